"""The legacy HTTP+SSE transport (2024-11-05): `GET /sse` opens the session and its stream, whose first
event names the endpoint; `POST /messages/?session_id=` accepts each message with 202, and its answer
travels on the stream (through the session's channel-layer group, whichever process holds the stream).
The session lives as long as its stream."""

from __future__ import annotations

from typing import Any

from access import limits, services
from access.models import BROADCAST_GROUP, McpSession, Transport, session_group, token_group
from forge_core.errors import Refusal
from mcp_api import jsonrpc
from mcp_api.protocol import respond
from mcp_api.transports.core import (
    EVENT_STREAM,
    EVERY_NOTIFICATION,
    Exchange,
    ExchangeRefused,
    NoSuchSession,
    Reply,
    StreamPlan,
    answers_refusals,
    authenticate,
    not_acceptable,
    read_message,
    refuse_resumption,
)
from mcp_api.transports.sessions import (
    answer_all,
    check_batch,
    client_notification,
    initialize_params,
    initialize_result,
    session_context,
)


@answers_refusals
def handle_open(exchange: Exchange) -> Reply:
    """GET /sse: a new session, and its stream."""
    if not exchange.accepts(EVENT_STREAM):
        raise not_acceptable("text/event-stream")
    token = authenticate(exchange)
    refuse_resumption(exchange, token, Transport.SSE)
    stream_id = limits.do_open_stream(token)
    try:
        session = services.do_open_session(token, transport=Transport.SSE)
    except Refusal:
        limits.stream_closed(stream_id)
        raise
    plan = StreamPlan(
        token_id=token.pk,
        token_expires_at=token.expires_at,
        groups=[session_group(session.id), token_group(token.pk), BROADCAST_GROUP],
        session_id=session.id,
        first_events=(("endpoint", f"/messages/?session_id={session.id}"),),
        end_session_on_close=True,
        stream_id=stream_id,
        notifications=EVERY_NOTIFICATION,
        event_ids=True,
    )
    return Reply(status=200, stream=plan)


@answers_refusals
def handle_message(exchange: Exchange) -> Reply:
    """POST /messages/?session_id=: accepted with 202; the answer goes to the session's stream."""
    token = authenticate(exchange)
    session = services.find_session(token, exchange.query("session_id"))
    if session is None or session.transport != Transport.SSE:
        raise NoSuchSession("Open a new stream with GET /sse.")
    group = session_group(session.id)
    try:
        message = read_message(exchange, token, Transport.SSE, session.id)
    except ExchangeRefused as refused:
        if refused.request_id is None:
            raise
        # A request refused for what its params carry is answered where its answer would go: on the stream.
        return Reply(status=202, body="Accepted", deliver=[(group, jsonrpc.error(refused.request_id, refused.error))])
    ctx = session_context(token, session, Transport.SSE)
    if isinstance(message, list):
        if not message:
            raise jsonrpc.invalid_request("An empty batch is not a request.")
        check_batch(ctx, session.protocol_version or "2024-11-05", message)
        answers = answer_all(ctx, message)
        events = [*ctx.messages, *answers]  # the batch's log messages first, on the stream its answers take
        return Reply(status=202, body="Accepted", deliver=[(group, events)] if events else [])
    kind = jsonrpc.kind_of(message)
    # Everything after this point is answered on the stream with a 202 here: the legacy client treats a
    # 4xx on its POST as a broken transport, while an error on the stream reaches the caller.
    if kind == "invalid":
        answered = jsonrpc.error(jsonrpc.safe_id(message), jsonrpc.invalid_request())
    elif kind == "request" and message["method"] == "initialize":
        answered = _initialize(session, message)
    elif not session.protocol_version:
        answered = jsonrpc.error(message.get("id"), jsonrpc.invalid_request("Send initialize first on this session."))
    elif kind != "request":
        client_notification(ctx, message)
        return Reply(status=202, body="Accepted")
    else:
        answered = respond(ctx, message)
    return Reply(
        status=202, body="Accepted", deliver=[(group, [*ctx.messages, answered] if ctx.messages else answered)]
    )


def _initialize(session: McpSession, message: dict[str, Any]) -> dict[str, Any]:
    if session.protocol_version:
        exc = jsonrpc.invalid_request("This session is already initialized; open a new stream to start over.")
        return jsonrpc.error(message["id"], exc)
    revision, client_info = initialize_params(message)
    McpSession.objects.filter(pk=session.pk).update(protocol_version=revision, client_info=client_info)
    return jsonrpc.result(message["id"], initialize_result(revision))
