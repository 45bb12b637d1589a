"""One HTTP exchange of the MCP transports, decided in one database hop.

The consumers parse the HTTP request into an `Exchange` and hand it to one of the `handle_*`
functions here, which run synchronously in a single `database_sync_to_async` hop: authenticate the
token, find the session, answer the message(s), write the audit rows. They return a `Reply` that says
what to put on the wire (a status and JSON body, an SSE answer, or a stream to open) and which
channel-layer groups to send messages to, which the consumer does back on the event loop.

Streamable HTTP (2025-03-26 .. 2025-11-25), the stateless 2026-07-28 revision on the same endpoint, and
the legacy HTTP+SSE message endpoint (2024-11-05) all end in `protocol.respond`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings

from access import services
from access.models import BROADCAST_GROUP, ClientToken, McpSession, Transport, session_group, token_group
from confirmations.models import ConfirmationState, PendingConfirmation
from confirmations.services import expire_due, outcome_of
from forge_core.errors import Refusal
from mcp_api import jsonrpc
from mcp_api.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from mcp_api.protocol import CAPABILITIES, SERVER_INFO, CallContext, instructions, respond, shape_result, tool_result
from mcp_api.revisions import (
    BATCH_REVISIONS,
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    HANDSHAKE_REVISIONS,
    NAME_BEARING_METHODS,
    PROTOCOL_VERSION_META_KEY,
    STATELESS_REVISIONS,
    negotiate,
)
from mcp_api.tools.common import outcome_result

JSON = "application/json"
EVENT_STREAM = "text/event-stream"

# HTTP status for a JSON-RPC error on the stateless revision (its transport table) and for the
# envelope-level failures of every revision.
ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


@dataclass
class Exchange:
    """The parts of an HTTP request the MCP transports look at."""

    method: str
    path: str
    headers: dict[str, str]
    raw_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    query_string: str = ""

    @classmethod
    def from_scope(cls, scope: dict[str, Any], body: bytes = b"") -> Exchange:
        raw = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        return cls(
            method=scope.get("method", "GET"),
            path=scope.get("path", ""),
            headers=dict(raw),
            raw_headers=raw,
            body=body,
            query_string=scope.get("query_string", b"").decode("latin-1"),
        )

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def bearer(self) -> str | None:
        value = self.headers.get("authorization", "")
        scheme, _, credential = value.partition(" ")
        return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None

    def accepts(self, media_type: str) -> bool:
        accept = self.headers.get("accept")
        if accept is None:
            return True
        kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
        return bool(kinds & {media_type, "*/*", media_type.split("/")[0] + "/*"})

    def query(self, name: str) -> str | None:
        values = parse_qs(self.query_string).get(name)
        return values[0] if values else None


@dataclass
class StreamPlan:
    """A long-lived SSE response: the groups it joins and what it sends first."""

    token_id: int
    token_expires_at: Any
    groups: list[str]
    session_id: str | None = None
    first_events: list[tuple[str, str]] = field(default_factory=list)
    end_session_on_close: bool = False
    subscription_id: Any = None
    notifications: frozenset[str] = frozenset()


@dataclass
class WaitPlan:
    """A write call that waits on its SSE answer for the operator's decision, sending progress meanwhile.

    `Reply.body` (FORGE_ERR_CONFIRMATION_REQUIRED) is the answer if nobody decides within `seconds`."""

    confirmation_id: str
    request_id: Any
    progress_token: Any
    revision: str
    seconds: float
    interval: float


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    sse: bool = False
    stream: StreamPlan | None = None
    wait: WaitPlan | None = None
    # (group, message) pairs to publish; a batch's answers go as one list, as the client sent them.
    deliver: list[tuple[str, dict[str, Any] | list[dict[str, Any]]]] = field(default_factory=list)

    @classmethod
    def rpc_error(cls, exc: RpcError, request_id: Any = None, *, status: int | None = None) -> Reply:
        return cls(status=status or exc.http_status, body=jsonrpc.error(request_id, exc))


def unauthorized(detail: str) -> Reply:
    exc = RpcError(INVALID_REQUEST, f"Unauthorized: {detail}")
    return Reply(
        status=401,
        body=jsonrpc.error(None, exc),
        headers={"WWW-Authenticate": 'Bearer realm="forge-mcp", error="invalid_token"'},
    )


def _authenticate(exchange: Exchange) -> ClientToken | Reply:
    raw = exchange.bearer
    if raw is None:
        return unauthorized(
            "send 'Authorization: Bearer <token>' with a client token from the Forge console "
            "(or 'python manage.py create_token')."
        )
    token = services.authenticate_bearer(raw, exchange.path)
    if token is None:
        return unauthorized("this token is unknown, expired or revoked; ask an operator for a new one.")
    return token


def _no_session(detail: str = "") -> Reply:
    exc = RpcError(
        INVALID_REQUEST,
        "Session not found: it never existed, has ended, or belongs to another client. "
        f"Initialize a new session without Mcp-Session-Id. {detail}".strip(),
    )
    return Reply.rpc_error(exc, status=404)


def _run(fn, exchange: Exchange) -> Reply:
    """Run one exchange handler behind the boundary that turns refusals into replies."""
    try:
        return fn(exchange)
    except RpcError as exc:
        return Reply.rpc_error(exc)
    except Refusal as refusal:
        return Reply.rpc_error(jsonrpc.refusal_error(refusal))


# --- Streamable HTTP: POST /mcp --------------------------------------------------------------------


def handle_streamable_post(exchange: Exchange) -> Reply:
    return _run(_streamable_post, exchange)


def _streamable_post(exchange: Exchange) -> Reply:
    if not (exchange.accepts(JSON) or exchange.accepts(EVENT_STREAM)):
        exc = RpcError(INVALID_REQUEST, "Not acceptable: accept application/json and text/event-stream.")
        return Reply.rpc_error(exc, status=406)
    token = _authenticate(exchange)
    if isinstance(token, Reply):
        return token
    message = jsonrpc.decode(exchange.body)
    version_header = exchange.header("mcp-protocol-version")
    if _is_stateless_request(exchange, message, version_header):
        return _stateless_post(exchange, token, message)
    return _session_post(exchange, token, message)


def _is_stateless_request(exchange: Exchange, message: Any, version_header: str | None) -> bool:
    if version_header is not None:
        return version_header not in HANDSHAKE_REVISIONS
    if exchange.header("mcp-session-id") is not None or not isinstance(message, dict):
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def _session_post(exchange: Exchange, token: ClientToken, message: Any) -> Reply:
    if isinstance(message, list):
        return _session_batch(exchange, token, message)
    kind = jsonrpc.kind_of(message)
    if kind == "invalid":
        return Reply.rpc_error(jsonrpc.invalid_request(), jsonrpc.safe_id(message))
    if kind == "request" and message["method"] == "initialize":
        if exchange.header("mcp-session-id") is not None:
            exc = jsonrpc.invalid_request(
                "This session is already initialized; to start over, DELETE it and initialize without Mcp-Session-Id."
            )
            return Reply.rpc_error(exc, message["id"])
        return _initialize(exchange, token, message, Transport.STREAMABLE_HTTP)
    session = _require_session(exchange, token)
    if isinstance(session, Reply):
        return session
    ctx = _session_context(token, session, Transport.STREAMABLE_HTTP)
    if kind != "request":
        _notification(ctx, message)
        return Reply(status=202)
    return _answer(exchange, ctx, message)


def _require_session(exchange: Exchange, token: ClientToken) -> McpSession | Reply:
    session_id = exchange.header("mcp-session-id")
    if session_id is None:
        exc = jsonrpc.invalid_request(
            "Missing Mcp-Session-Id header: send the id the initialize response gave you, or initialize first."
        )
        return Reply.rpc_error(exc)
    session = services.find_session(token, session_id)
    if session is None or session.transport != Transport.STREAMABLE_HTTP:
        return _no_session()
    # A header naming another handshake revision is tolerated (clients in the field send their own
    # latest, and the conformance suite does too): the session keeps the revision it negotiated. An
    # unknown revision never gets here; it is routed to the stateless path and refused with -32022.
    return session


def _session_batch(exchange: Exchange, token: ClientToken, batch: list[Any]) -> Reply:
    if not batch:
        return Reply.rpc_error(jsonrpc.invalid_request("An empty batch is not a request."))
    session = _require_session(exchange, token)
    if isinstance(session, Reply):
        return session
    refusal = _batch_refusal(session.protocol_version, batch)
    if refusal is not None:
        return refusal
    ctx = _session_context(token, session, Transport.STREAMABLE_HTTP)
    answers = _answer_all(ctx, batch)
    return Reply(status=200, body=answers) if answers else Reply(status=202)


def _batch_refusal(revision: str, batch: list[Any]) -> Reply | None:
    if revision not in BATCH_REVISIONS:
        exc = jsonrpc.invalid_request(
            f"JSON-RPC batches are not part of MCP revision {revision}; send one message per POST."
        )
        return Reply.rpc_error(exc)
    if any(isinstance(m, dict) and m.get("method") == "initialize" for m in batch):
        return Reply.rpc_error(jsonrpc.invalid_request("initialize must be sent on its own, not in a batch."))
    return None


def _answer_all(ctx: CallContext, batch: list[Any]) -> list[dict[str, Any]]:
    answers = []
    for message in batch:
        kind = jsonrpc.kind_of(message)
        if kind == "invalid":
            answers.append(jsonrpc.error(jsonrpc.safe_id(message), jsonrpc.invalid_request()))
        elif kind == "request":
            answers.append(respond(ctx, message))
        else:
            _notification(ctx, message)
    return answers


def _session_context(token: ClientToken, session: McpSession, transport: str) -> CallContext:
    return CallContext(
        token=token,
        revision=session.protocol_version,
        transport=transport,
        session=session,
        client_info=session.client_info,
    )


def _initialize(exchange: Exchange, token: ClientToken, message: dict[str, Any], transport: Transport) -> Reply:
    revision, client_info = _initialize_params(message)
    session = services.do_open_session(token, transport=transport, protocol_version=revision, client_info=client_info)
    answer = jsonrpc.result(message["id"], initialize_result(revision))
    return Reply(status=200, body=answer, headers={"Mcp-Session-Id": session.id})


def _initialize_params(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The revision to answer an initialize with, and the client's self-description."""
    params = message.get("params") or {}
    client_info = params.get("clientInfo")
    return negotiate(params.get("protocolVersion")), client_info if isinstance(client_info, dict) else {}


def initialize_result(revision: str) -> dict[str, Any]:
    return {
        "protocolVersion": revision,
        "capabilities": CAPABILITIES,
        "serverInfo": SERVER_INFO,
        "instructions": instructions(),
    }


def _notification(ctx: CallContext, message: dict[str, Any]) -> None:
    """Act on a client notification or response. Only `initialized` changes anything."""
    session = ctx.session
    if message.get("method") == "notifications/initialized" and session is not None and not session.initialized:
        McpSession.objects.filter(pk=session.pk).update(initialized=True)


def _answer(exchange: Exchange, ctx: CallContext, message: dict[str, Any], *, stateless: bool = False) -> Reply:
    answer = respond(ctx, message)
    status = 200
    if stateless and "error" in answer:
        status = ERROR_STATUS.get(answer["error"]["code"], 200)
    sse = status == 200 and _wants_stream(exchange, message)
    wait = None
    token = _progress_token(message)
    if ctx.awaiting and sse and token is not None and settings.FORGE_CONFIRM_WAIT_S > 0:
        wait = WaitPlan(
            confirmation_id=ctx.awaiting,
            request_id=message["id"],
            progress_token=token,
            revision=ctx.revision,
            seconds=settings.FORGE_CONFIRM_WAIT_S,
            interval=settings.FORGE_CONFIRM_PROGRESS_SECONDS,
        )
    return Reply(status=status, body=answer, sse=sse, wait=wait)


def _progress_token(message: dict[str, Any]) -> Any:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def _wants_stream(exchange: Exchange, message: dict[str, Any]) -> bool:
    """Answer as an SSE stream when the client asks for progress, or accepts nothing else."""
    if not exchange.accepts(EVENT_STREAM):
        return False
    return _progress_token(message) is not None or not exchange.accepts(JSON)


def handle_decided(wait: WaitPlan) -> dict[str, Any] | None:
    """The final answer of a waiting write call if its confirmation is decided by now, else None."""
    expire_due()
    confirmation = PendingConfirmation.objects.filter(pk=wait.confirmation_id).first()
    if confirmation is None or confirmation.state in (ConfirmationState.PENDING, ConfirmationState.APPROVED):
        return None
    return decided_answer(wait, outcome_of(confirmation))


def decided_answer(wait: WaitPlan, outcome: dict[str, Any]) -> dict[str, Any]:
    """The final answer of a waiting write call from its confirmation's outcome (no database needed: the
    decision's announcement carries the outcome)."""
    structured, is_error = outcome_result(outcome)
    return jsonrpc.result(wait.request_id, shape_result(wait.revision, tool_result(structured, is_error=is_error)))


# --- The stateless revision (2026-07-28) on POST /mcp ----------------------------------------------


def _stateless_post(exchange: Exchange, token: ClientToken, message: Any) -> Reply:
    if isinstance(message, dict) and "id" not in message:
        return _stateless_notification(exchange, message)
    kind = jsonrpc.kind_of(message)
    if kind != "request":
        detail = "Batches are not part of MCP revision 2026-07-28." if isinstance(message, list) else ""
        return Reply.rpc_error(jsonrpc.invalid_request(detail), jsonrpc.safe_id(message))
    request_id = message["id"]
    meta = (message.get("params") or {}).get("_meta")
    requested = exchange.header("mcp-protocol-version")
    if requested not in STATELESS_REVISIONS and not (isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta):
        # A session client naming a revision we do not speak: say so, rather than ask for an envelope.
        return Reply.rpc_error(_unsupported(requested), request_id, status=400)
    if message["method"] == "subscriptions/listen" and not exchange.accepts(EVENT_STREAM):
        exc = RpcError(INVALID_REQUEST, "subscriptions/listen answers as text/event-stream; accept it.")
        return Reply.rpc_error(exc, request_id, status=406)
    envelope = _envelope(exchange, message)
    if isinstance(envelope, RpcError):
        return Reply.rpc_error(envelope, request_id, status=ERROR_STATUS.get(envelope.code, 400))
    revision, client_info, client_capabilities = envelope
    ctx = CallContext(
        token=token,
        revision=revision,
        transport=Transport.STREAMABLE_HTTP,
        client_info=client_info,
        client_capabilities=client_capabilities,
    )
    if message["method"] == "subscriptions/listen":
        return _listen(ctx, message)
    return _answer(exchange, ctx, message, stateless=True)


def _stateless_notification(exchange: Exchange, message: dict[str, Any]) -> Reply:
    if jsonrpc.kind_of(message) != "notification":
        return Reply.rpc_error(jsonrpc.invalid_request())
    requested = exchange.header("mcp-protocol-version") or ""
    if requested not in STATELESS_REVISIONS:
        return Reply.rpc_error(_unsupported(requested), status=400)
    return Reply(status=202)


def _unsupported(requested: Any) -> RpcError:
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {str(requested)[:40]!r}. Use one of {', '.join(STATELESS_REVISIONS)} "
        f"per request, or initialize with one of {', '.join(HANDSHAKE_REVISIONS)}.",
        {
            "supported": list(STATELESS_REVISIONS),
            "requested": requested if isinstance(requested, str) else "",
        },
    )


def _envelope(exchange: Exchange, message: dict[str, Any]) -> tuple[str, dict, dict] | RpcError:
    """Check the per-request envelope of a stateless request, rung by rung; the first failure wins."""
    meta = (message.get("params") or {}).get("_meta")
    if not isinstance(meta, dict):
        return RpcError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying {PROTOCOL_VERSION_META_KEY!r} and "
            f"{CLIENT_CAPABILITIES_META_KEY!r}.",
        )
    missing = [key for key in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if key not in meta]
    if missing:
        return RpcError(INVALID_PARAMS, f"params._meta is missing {', '.join(missing)}; add it to every request.")
    duplicated = _duplicated_routing_header(exchange)
    if duplicated:
        return RpcError(HEADER_MISMATCH, f"The {duplicated} header appears more than once; send it once.")
    version = meta[PROTOCOL_VERSION_META_KEY]
    if exchange.header("mcp-protocol-version") != version:
        return RpcError(
            HEADER_MISMATCH, "The MCP-Protocol-Version header does not match params._meta's protocol version."
        )
    if exchange.header("mcp-method") != message["method"]:
        return RpcError(HEADER_MISMATCH, "The Mcp-Method header does not match the request's method.")
    name_key = NAME_BEARING_METHODS.get(message["method"])
    if name_key is not None:
        body_value = (message.get("params") or {}).get(name_key)
        if body_value is not None and decode_header_value(exchange.header("mcp-name")) != body_value:
            return RpcError(HEADER_MISMATCH, f"The Mcp-Name header does not match the request's {name_key!r}.")
    if not isinstance(version, str):
        return RpcError(INVALID_PARAMS, "The protocol version in params._meta must be a string.")
    if version not in STATELESS_REVISIONS:
        return _unsupported(version)
    client_info = meta.get(CLIENT_INFO_META_KEY)
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)
    return (
        version,
        client_info if isinstance(client_info, dict) else {},
        capabilities if isinstance(capabilities, dict) else {},
    )


def _duplicated_routing_header(exchange: Exchange) -> str | None:
    seen: set[str] = set()
    for name, _ in exchange.raw_headers:
        if name in ("mcp-protocol-version", "mcp-method", "mcp-name"):
            if name in seen:
                return name
            seen.add(name)
    return None


def decode_header_value(value: str | None) -> str | None:
    """Undo the `=?base64?...?=` form a client uses for header values that are not plain ASCII."""
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    payload = value[len("=?base64?") : -2]
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode("ascii") != payload:
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


LISTEN_FILTERS = {"toolsListChanged": "notifications/tools/list_changed"}


def _listen(ctx: CallContext, message: dict[str, Any]) -> Reply:
    requested = (message.get("params") or {}).get("notifications")
    if not isinstance(requested, dict):
        exc = RpcError(
            INVALID_PARAMS, "subscriptions/listen needs params.notifications, e.g. {toolsListChanged: true}."
        )
        return Reply.rpc_error(exc, message["id"], status=400)
    honored = {key: True for key in LISTEN_FILTERS if requested.get(key) is True}
    subscription_id = message["id"]
    acknowledged = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "notifications": honored,
            "_meta": {"io.modelcontextprotocol/subscriptionId": subscription_id},
        },
    }
    plan = StreamPlan(
        token_id=ctx.token.pk,
        token_expires_at=ctx.token.expires_at,
        groups=[token_group(ctx.token.pk), BROADCAST_GROUP],
        first_events=[("message", jsonrpc.encode(acknowledged).decode())],
        subscription_id=subscription_id,
        notifications=frozenset(LISTEN_FILTERS[key] for key in honored),
    )
    return Reply(status=200, stream=plan)


# --- Streamable HTTP: GET and DELETE /mcp ------------------------------------------------------------


def handle_streamable_get(exchange: Exchange) -> Reply:
    return _run(_streamable_get, exchange)


def _streamable_get(exchange: Exchange) -> Reply:
    if not exchange.accepts(EVENT_STREAM):
        return Reply.rpc_error(RpcError(INVALID_REQUEST, "Not acceptable: accept text/event-stream."), status=406)
    token = _authenticate(exchange)
    if isinstance(token, Reply):
        return token
    version_header = exchange.header("mcp-protocol-version")
    if version_header is not None and version_header not in HANDSHAKE_REVISIONS:
        exc = RpcError(
            INVALID_REQUEST,
            "Revision 2026-07-28 has no GET stream: POST subscriptions/listen to receive notifications.",
        )
        reply = Reply.rpc_error(exc, status=405)
        reply.headers["Allow"] = "POST"
        return reply
    session = _require_session(exchange, token)
    if isinstance(session, Reply):
        return session
    plan = StreamPlan(
        token_id=token.pk,
        token_expires_at=token.expires_at,
        groups=[session_group(session.id), token_group(token.pk), BROADCAST_GROUP],
        session_id=session.id,
        notifications=frozenset(LISTEN_FILTERS.values()),
    )
    return Reply(status=200, stream=plan)


def handle_streamable_delete(exchange: Exchange) -> Reply:
    return _run(_streamable_delete, exchange)


def _streamable_delete(exchange: Exchange) -> Reply:
    token = _authenticate(exchange)
    if isinstance(token, Reply):
        return token
    session = _require_session(exchange, token)
    if isinstance(session, Reply):
        return session
    services.do_end_session(session, reason="client sent DELETE")
    return Reply(status=204)


# --- Legacy HTTP+SSE: GET /sse and POST /messages/?session_id= --------------------------------------


def handle_sse_open(exchange: Exchange) -> Reply:
    return _run(_sse_open, exchange)


def _sse_open(exchange: Exchange) -> Reply:
    if not exchange.accepts(EVENT_STREAM):
        return Reply.rpc_error(RpcError(INVALID_REQUEST, "Not acceptable: accept text/event-stream."), status=406)
    token = _authenticate(exchange)
    if isinstance(token, Reply):
        return token
    session = services.do_open_session(token, transport=Transport.SSE)
    plan = StreamPlan(
        token_id=token.pk,
        token_expires_at=token.expires_at,
        groups=[session_group(session.id), token_group(token.pk), BROADCAST_GROUP],
        session_id=session.id,
        first_events=[("endpoint", f"/messages/?session_id={session.id}")],
        end_session_on_close=True,
        notifications=frozenset(LISTEN_FILTERS.values()),
    )
    return Reply(status=200, stream=plan)


def handle_sse_message(exchange: Exchange) -> Reply:
    return _run(_sse_message, exchange)


def _sse_message(exchange: Exchange) -> Reply:
    token = _authenticate(exchange)
    if isinstance(token, Reply):
        return token
    session = services.find_session(token, exchange.query("session_id"))
    if session is None or session.transport != Transport.SSE:
        return _no_session("Open a new stream with GET /sse.")
    message = jsonrpc.decode(exchange.body)
    group = session_group(session.id)
    if isinstance(message, list):
        if not message:
            return Reply.rpc_error(jsonrpc.invalid_request("An empty batch is not a request."))
        refusal = _batch_refusal(session.protocol_version or "2024-11-05", message)
        if refusal is not None:
            return refusal
        ctx = _session_context(token, session, Transport.SSE)
        answers = _answer_all(ctx, message)
        return Reply(status=202, body="Accepted", deliver=[(group, answers)] if answers else [])
    kind = jsonrpc.kind_of(message)
    # Everything after this point is answered on the stream with a 202 here: the legacy client treats a
    # 4xx on its POST as a broken transport, while an error on the stream reaches the caller.
    if kind == "invalid":
        answer = jsonrpc.error(jsonrpc.safe_id(message), jsonrpc.invalid_request())
    elif kind == "request" and message["method"] == "initialize":
        answer = _sse_initialize(session, message)
    elif not session.protocol_version:
        answer = jsonrpc.error(message.get("id"), jsonrpc.invalid_request("Send initialize first on this session."))
    elif kind != "request":
        _notification(_session_context(token, session, Transport.SSE), message)
        return Reply(status=202, body="Accepted")
    else:
        answer = respond(_session_context(token, session, Transport.SSE), message)
    return Reply(status=202, body="Accepted", deliver=[(group, answer)])


def _sse_initialize(session: McpSession, message: dict[str, Any]) -> dict[str, Any]:
    if session.protocol_version:
        exc = jsonrpc.invalid_request("This session is already initialized; open a new stream to start over.")
        return jsonrpc.error(message["id"], exc)
    revision, client_info = _initialize_params(message)
    McpSession.objects.filter(pk=session.pk).update(protocol_version=revision, client_info=client_info)
    return jsonrpc.result(message["id"], initialize_result(revision))


def handle_stream_check(token_id: int, session_id: str | None) -> bool:
    """Whether a stream may stay open: its token is still usable and its session has not ended."""
    token = ClientToken.objects.select_related("owner").filter(pk=token_id).first()
    if token is None or not token.is_usable() or not token.owner.is_active:
        return False
    return session_id is None or McpSession.objects.filter(pk=session_id, ended_at__isnull=True).exists()


def handle_stream_closed(session_id: str) -> None:
    session = McpSession.objects.select_related("token__owner").filter(pk=session_id).first()
    if session is not None:
        services.do_end_session(session, reason="stream closed")
