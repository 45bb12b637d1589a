"""The MCP transports, one module each over a shared core, all ending in `protocol.respond`.

- `core`: the exchange as parsed, the reply, the stream and wait plans, authentication, and the boundary
  (`answers_refusals`) that turns every refusal raised below an entry point into its reply;
- `streamable`: Streamable HTTP with sessions (2025-03-26 .. 2025-11-25), POST/GET/DELETE /mcp;
- `stateless`: the stateless revision (2026-07-28) on POST /mcp: the envelope, header agreement,
  `subscriptions/listen`;
- `legacy_sse`: the legacy HTTP+SSE transport (2024-11-05), GET /sse and POST /messages/;
- `sessions`: what the two session transports share (call context, initialize, notifications, batches);
- `answers`: how a POST's answer goes out (JSON or an event stream) and a write call's wait for its decision;
- `upkeep`: the database side of a stream that stays open.

The consumers (`mcp_api.consumers`) call an entry point (`streamable.handle_post`, `legacy_sse.handle_open`,
...) in the exchange's one database hop and put its `core.Reply` on the wire.
"""
