"""Streamable HTTP with sessions (2025-03-26 .. 2025-11-25) at /mcp: POST a message, GET the session's
stream of server messages, DELETE the session.

A POST that is not a session's (a 2026-07-28 request: its header or its `_meta` names that revision) goes
to `stateless`, on the same endpoint. Session ids are bound to the token that opened the session: another
token's id, an unknown or an ended one is `NoSuchSession`.
"""

from __future__ import annotations

from typing import Any

from access import limits, services
from access.models import BROADCAST_GROUP, ClientToken, McpSession, Transport, session_group, token_group
from mcp_api import jsonrpc
from mcp_api.dialogue import reply_group
from mcp_api.jsonrpc import INVALID_REQUEST, RpcError
from mcp_api.revisions import HANDSHAKE_REVISIONS
from mcp_api.transports import stateless
from mcp_api.transports.answers import answer
from mcp_api.transports.core import (
    EVENT_STREAM,
    EVERY_NOTIFICATION,
    JSON,
    Exchange,
    ExchangeRefused,
    NoSuchSession,
    Reply,
    StreamPlan,
    answers_refusals,
    authenticate,
    cancelled_requests,
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
def handle_post(exchange: Exchange) -> Reply:
    if not (exchange.accepts(JSON) or exchange.accepts(EVENT_STREAM)):
        raise not_acceptable("application/json and text/event-stream")
    token = authenticate(exchange)
    message = read_message(exchange, token, Transport.STREAMABLE_HTTP)
    if stateless.is_stateless_request(exchange, message):
        return stateless.post(exchange, token, message)
    if isinstance(message, list):
        return _post_batch(exchange, token, message)
    kind = jsonrpc.kind_of(message)
    if kind == "invalid":
        raise ExchangeRefused(jsonrpc.invalid_request(), jsonrpc.safe_id(message))
    if kind == "request" and message["method"] == "initialize":
        return _initialize(exchange, token, message)
    session = _require_session(exchange, token)
    ctx = session_context(token, session, Transport.STREAMABLE_HTTP)
    if kind == "response":
        # The answer to a request a conversing tool sent this session: to the call that waits for it.
        return Reply(status=202, replies=[(reply_group(token, session.id, message["id"]), message)])
    if kind != "request":
        client_notification(ctx, message)
        return Reply(status=202, cancel=cancelled_requests(token, session.id, [message]))
    return answer(exchange, ctx, message)


def _post_batch(exchange: Exchange, token: ClientToken, batch: list[Any]) -> Reply:
    if not batch:
        raise jsonrpc.invalid_request("An empty batch is not a request.")
    session = _require_session(exchange, token)
    ctx = session_context(token, session, Transport.STREAMABLE_HTTP)
    check_batch(ctx, session.protocol_version, batch)
    answers = answer_all(ctx, batch)
    cancel = cancelled_requests(token, session.id, batch)
    # A batch is answered as one JSON body: the log messages of its calls go to the session's stream.
    deliver: list[tuple[str, Any]] = [(session_group(session.id), ctx.messages)] if ctx.messages else []
    if not answers:
        return Reply(status=202, cancel=cancel, deliver=deliver)
    return Reply(status=200, body=answers, cancel=cancel, deliver=deliver)


def _initialize(exchange: Exchange, token: ClientToken, message: dict[str, Any]) -> Reply:
    if exchange.header("mcp-session-id") is not None:
        raise ExchangeRefused(
            jsonrpc.invalid_request(
                "This session is already initialized; to start over, DELETE it and initialize without Mcp-Session-Id."
            ),
            message["id"],
        )
    revision, client_info = initialize_params(message)
    declared = (message.get("params") or {}).get("capabilities")
    session = services.do_open_session(
        token,
        transport=Transport.STREAMABLE_HTTP,
        protocol_version=revision,
        client_info=client_info,
        client_capabilities=declared if isinstance(declared, dict) and len(jsonrpc.encode(declared)) <= 16_384 else {},
    )
    answered = jsonrpc.result(message["id"], initialize_result(revision))
    return Reply(status=200, body=answered, headers={"Mcp-Session-Id": session.id})


def _require_session(exchange: Exchange, token: ClientToken) -> McpSession:
    session_id = exchange.header("mcp-session-id")
    if session_id is None:
        raise jsonrpc.invalid_request(
            "Missing Mcp-Session-Id header: send the id the initialize response gave you, or initialize first."
        )
    session = services.find_session(token, session_id)
    if session is None or session.transport != Transport.STREAMABLE_HTTP:
        raise NoSuchSession()
    # A header naming another handshake revision is tolerated (clients in the field send their own
    # latest, and the conformance suite does too): the session keeps the revision it negotiated. An
    # unknown revision never gets here; it is routed to the stateless path and refused with -32022.
    return session


@answers_refusals
def handle_get(exchange: Exchange) -> Reply:
    if not exchange.accepts(EVENT_STREAM):
        raise not_acceptable("text/event-stream")
    token = authenticate(exchange)
    version_header = exchange.header("mcp-protocol-version")
    if version_header is not None and version_header not in HANDSHAKE_REVISIONS:
        raise ExchangeRefused(
            RpcError(
                INVALID_REQUEST,
                "Revision 2026-07-28 has no GET stream: POST subscriptions/listen to receive notifications.",
            ),
            status=405,
            headers={"Allow": "POST"},
        )
    session = _require_session(exchange, token)
    refuse_resumption(exchange, token, Transport.STREAMABLE_HTTP)
    plan = StreamPlan(
        token_id=token.pk,
        token_expires_at=token.expires_at,
        groups=[session_group(session.id), token_group(token.pk), BROADCAST_GROUP],
        session_id=session.id,
        notifications=EVERY_NOTIFICATION,
        stream_id=limits.do_open_stream(token, session.id),
    )
    return Reply(status=200, stream=plan)


@answers_refusals
def handle_delete(exchange: Exchange) -> Reply:
    token = authenticate(exchange)
    session = _require_session(exchange, token)
    services.do_end_session(session, reason="client sent DELETE")
    return Reply(status=204)
