"""The MCP protocol revisions this server speaks, and what differs between them."""

from __future__ import annotations

HANDSHAKE_REVISIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Revisions negotiated by `initialize`, oldest first."""

STATELESS_REVISIONS: tuple[str, ...] = ("2026-07-28",)
"""Revisions without initialize or session: every request carries its envelope in `_meta`."""

ALL_REVISIONS: tuple[str, ...] = (*HANDSHAKE_REVISIONS, *STATELESS_REVISIONS)
LATEST_HANDSHAKE = HANDSHAKE_REVISIONS[-1]

BATCH_REVISIONS = frozenset({"2024-11-05", "2025-03-26"})
"""JSON-RPC batches were explicit in 2025-03-26 and removed in 2025-06-18; 2024-11-05 inherits them."""

PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"

NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""Methods whose `Mcp-Name` header mirrors a body parameter (2026-07-28)."""


def negotiate(requested: object) -> str:
    """The revision to answer an `initialize` with: the client's when we speak it, else our latest."""
    return requested if isinstance(requested, str) and requested in HANDSHAKE_REVISIONS else LATEST_HANDSHAKE


def is_stateless(revision: str) -> bool:
    return revision in STATELESS_REVISIONS
