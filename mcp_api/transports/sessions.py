"""What the two session transports share (Streamable HTTP and legacy HTTP+SSE): a session's call context,
the initialize handshake's parameters and result, client notifications, and JSON-RPC batches where the
session's revision has them."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from access.models import ClientToken, McpSession, Transport
from mcp_api import jsonrpc
from mcp_api.jsonrpc import INVALID_REQUEST, RpcError
from mcp_api.protocol import SERVER_INFO, CallContext, capabilities, instructions, respond
from mcp_api.revisions import BATCH_REVISIONS, negotiate
from mcp_api.transports.core import audit_refused_request


def session_context(token: ClientToken, session: McpSession, transport: Transport) -> CallContext:
    return CallContext(
        token=token,
        revision=session.protocol_version,
        transport=transport,
        session=session,
        client_info=session.client_info,
        client_capabilities=session.client_capabilities if isinstance(session.client_capabilities, dict) else {},
    )


def initialize_params(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The revision to answer an initialize with, and the client's self-description."""
    params = message.get("params") or {}
    client_info = params.get("clientInfo")
    return negotiate(params.get("protocolVersion")), client_info if isinstance(client_info, dict) else {}


def initialize_result(revision: str) -> dict[str, Any]:
    return {
        "protocolVersion": revision,
        "capabilities": capabilities(revision),
        "serverInfo": SERVER_INFO,
        "instructions": instructions(),
    }


def client_notification(ctx: CallContext, message: dict[str, Any]) -> None:
    """Act on a client notification or response. Only `initialized` changes anything."""
    session = ctx.session
    if message.get("method") == "notifications/initialized" and session is not None and not session.initialized:
        McpSession.objects.filter(pk=session.pk).update(initialized=True)


def check_batch(ctx: CallContext, revision: str, batch: list[Any]) -> None:
    """Refuse a batch where the session's revision has none, one longer than `FORGE_MAX_BATCH` (audited),
    or one that carries initialize; each refusal comes before any of the batch is answered."""
    if revision not in BATCH_REVISIONS:
        raise jsonrpc.invalid_request(
            f"JSON-RPC batches are not part of MCP revision {revision}; send one message per POST."
        )
    limit = settings.FORGE_MAX_BATCH
    if len(batch) > limit:
        arguments = {"transport": ctx.transport, "revision": ctx.revision, "batch_size": len(batch), "limit": limit}
        audit_refused_request(ctx.token, "batch_too_large", arguments, session_id=ctx.session_id)
        raise RpcError(
            INVALID_REQUEST,
            f"Invalid request: this batch has {len(batch)} messages, more than this server's limit of {limit} "
            f"(FORGE_MAX_BATCH); none of them was answered. Send at most {limit} messages per batch.",
            {"limit": limit, "received": len(batch)},
            http_status=400,
        )
    if any(isinstance(m, dict) and m.get("method") == "initialize" for m in batch):
        raise jsonrpc.invalid_request("initialize must be sent on its own, not in a batch.")


def answer_all(ctx: CallContext, batch: list[Any]) -> list[dict[str, Any]]:
    """The answers to a batch's requests, in order; its notifications are acted on and not answered."""
    answers = []
    for message in batch:
        kind = jsonrpc.kind_of(message)
        if kind == "invalid":
            answers.append(jsonrpc.error(jsonrpc.safe_id(message), jsonrpc.invalid_request()))
        elif kind == "request":
            answers.append(respond(ctx, message))
        else:
            client_notification(ctx, message)
    return answers
