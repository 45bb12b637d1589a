"""What every MCP transport shares: the exchange as parsed, the reply it gets, and the one refusal boundary.

A consumer parses the HTTP request into an `Exchange` and hands it to a transport's entry point, which runs
synchronously inside the exchange's one `database_sync_to_async` hop (DESIGN section 16) and returns a
`Reply`: what to put on the wire (a status and JSON body, an SSE answer, a stream to open as a `StreamPlan`,
or a write call's wait as a `WaitPlan`) and which channel-layer groups to send messages to, which the
consumer does back on the event loop.

Below an entry point nothing returns a refusal for its caller to re-check: it raises. `ExchangeRefused`
(a JSON-RPC error with the HTTP status, request id and headers it goes out with; `Unauthorized` and
`NoSuchSession` are the two every transport meets), a protocol `RpcError` or a service's `Refusal` all end
at `answers_refusals`, the decorator of every entry point, which turns each into its reply in one place.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings

from access import services
from access.models import ClientToken
from access.peers import CertificateRefused
from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable, Refusal
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

LISTEN_FILTERS = {"toolsListChanged": "notifications/tools/list_changed"}
"""The server notifications a stream may carry, by the name `subscriptions/listen` asks for them with."""
EVERY_NOTIFICATION = frozenset(LISTEN_FILTERS.values())
"""What a session's stream carries (GET /mcp, GET /sse): every server notification, one set for all of them."""


@dataclass(slots=True)
class Exchange:
    """The parts of an HTTP request the MCP transports look at."""

    method: str
    path: str
    headers: dict[str, str]
    raw_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    query_string: str = ""
    # The client certificate chain (PEM, leaf first) the TLS connection presented: only ever from the server's
    # ASGI TLS extension (forge_site.tls_server), never from a header.
    client_cert_chain: tuple[str, ...] = ()
    # The Accept header's media types, parsed on the first `accepts` (a POST asks up to four times); no header
    # accepts anything, as "*/*" does.
    accepted: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_scope(cls, scope: dict[str, Any], body: bytes = b"") -> Exchange:
        raw = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        tls = (scope.get("extensions") or {}).get("tls") or {}
        return cls(
            method=scope.get("method", "GET"),
            path=scope.get("path", ""),
            headers=dict(raw),
            raw_headers=raw,
            body=body,
            query_string=scope.get("query_string", b"").decode("latin-1"),
            client_cert_chain=tuple(tls.get("client_cert_chain") or ()),
        )

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def bearer(self) -> str | None:
        value = self.headers.get("authorization", "")
        scheme, _, credential = value.partition(" ")
        return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None

    def accepts(self, media_type: str) -> bool:
        kinds = self.accepted
        if kinds is None:
            accept = self.headers.get("accept")
            kinds = self.accepted = frozenset(
                ("*/*",) if accept is None else (part.split(";")[0].strip().lower() for part in accept.split(","))
            )
        return "*/*" in kinds or media_type in kinds or media_type.split("/")[0] + "/*" in kinds

    def query(self, name: str) -> str | None:
        values = parse_qs(self.query_string).get(name)
        return values[0] if values else None


@dataclass(slots=True)
class StreamPlan:
    """A long-lived SSE response: the groups it joins and what it sends first."""

    token_id: int
    token_expires_at: Any
    groups: list[str]
    session_id: str | None = None
    first_events: tuple[tuple[str, str], ...] = ()
    end_session_on_close: bool = False
    subscription_id: Any = None
    notifications: frozenset[str] = frozenset()
    stream_id: int | None = None  # its row counted against the token's stream cap (access.limits)
    # The client certificate chain its principal authenticated with, checked again with the token (a peer's
    # stream ends when the roster, the CRL or the trust store stops vouching for it).
    certificate: tuple[str, ...] = ()
    # Whether its events carry ids. Only the legacy /sse stream's do: no stream here can be resumed, and a
    # Streamable HTTP client that saw ids would reconnect with Last-Event-ID, which is refused, and stop
    # listening; without ids it opens a fresh stream.
    event_ids: bool = False
    # A listen stream's resourceSubscriptions: each address, with its project's id and whether it is the draft
    # (which changes on its own as well as with the accepted file).
    resources: dict[str, tuple[int, bool]] = field(default_factory=dict)


@dataclass(slots=True)
class WaitPlan:
    """A write call that waits on its SSE answer for the operator's decision, sending progress meanwhile.

    `Reply.body` (FORGE_ERR_CONFIRMATION_REQUIRED) is the answer if nobody decides within `seconds`."""

    confirmation_id: str
    request_id: Any
    progress_token: Any
    revision: str
    seconds: float
    interval: float
    cancel_group: str  # where the client's notifications/cancelled for this request arrives
    principal: str  # who asked: the one a cancellation is audited as
    tool: str = ""
    log_decision: bool = False  # the session hears info: the decision is logged before the final answer


@dataclass(slots=True)
class ConversationPlan:
    """A tool call that talks with its client while it runs (`mcp_api.dialogue`): the consumer carries it on
    its SSE answer from what its first step said; the client's notifications/cancelled arrive in `cancel_group`."""

    conversation: Any
    first: Any
    cancel_group: str
    ends: list[str] = field(default_factory=list)  # the groups told when its session ends or its token is revoked


@dataclass(slots=True)
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    sse: bool = False
    stream: StreamPlan | None = None
    wait: WaitPlan | None = None
    # (group, message) pairs to publish; a batch's answers go as one list, as the client sent them.
    deliver: list[tuple[str, dict[str, Any] | list[dict[str, Any]]]] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)  # request groups told their request was cancelled
    conversation: ConversationPlan | None = None
    # (reply group, response) pairs: the client's answers to requests a conversing tool sent it.
    replies: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Notifications that go before the answer on its event stream (`sse`, or a wait): the call's log messages.
    notes: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def rpc_error(cls, exc: RpcError, request_id: Any = None, *, status: int | None = None) -> Reply:
        return cls(status=status or exc.http_status, body=jsonrpc.error(request_id, exc))


class ExchangeRefused(Exception):
    """The exchange is answered with a JSON-RPC error and nothing else happens: raised anywhere below an
    entry point, answered by `answers_refusals` with this status (else the error's own), id and headers."""

    def __init__(
        self,
        error: RpcError,
        request_id: Any = None,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.request_id = request_id
        self.status = status
        self.headers = headers or {}

    def reply(self) -> Reply:
        reply = Reply.rpc_error(self.error, self.request_id, status=self.status)
        reply.headers.update(self.headers)
        return reply


class Unauthorized(ExchangeRefused):
    """No usable credential: 401 with the challenge that says which scheme to use; a refused client certificate
    also names its reason (`data.reason`)."""

    def __init__(self, detail: str, *, reason: str | None = None) -> None:
        super().__init__(
            RpcError(INVALID_REQUEST, f"Unauthorized: {detail}", {"reason": reason} if reason else None),
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="forge-mcp", error="invalid_token"'},
        )


class NoSuchSession(ExchangeRefused):
    """An unknown, ended or another principal's session id: the same 404 for each (DESIGN section 4)."""

    def __init__(self, detail: str = "") -> None:
        message = (
            "Session not found: it never existed, has ended, or belongs to another client. "
            f"Initialize a new session without Mcp-Session-Id. {detail}".strip()
        )
        super().__init__(RpcError(INVALID_REQUEST, message), status=404)


def not_acceptable(what: str) -> ExchangeRefused:
    return ExchangeRefused(RpcError(INVALID_REQUEST, f"Not acceptable: accept {what}."), status=406)


def answers_refusals(entry: Callable[[Exchange], Reply]) -> Callable[[Exchange], Reply]:
    """Make `entry` a transport's entry point: whatever refusal is raised under it becomes its reply, here
    and nowhere else."""

    @functools.wraps(entry)
    def run(exchange: Exchange) -> Reply:
        try:
            return entry(exchange)
        except ExchangeRefused as refused:
            return refused.reply()
        except RpcError as exc:
            return Reply.rpc_error(exc)
        except Refusal as refusal:
            return Reply.rpc_error(jsonrpc.refusal_error(refusal))

    return run


def authenticate(exchange: Exchange) -> ClientToken:
    """The client token the request acts through, or `Unauthorized` saying how to get one. A client certificate,
    when the TLS connection presented one, decides alone: refused, it is refused whatever token is also sent."""
    if exchange.client_cert_chain:
        try:
            return services.authenticate_certificate(exchange.client_cert_chain, exchange.path)
        except CertificateRefused as refused:
            raise Unauthorized(
                f"client certificate refused ({refused.reason}): {refused}", reason=refused.reason
            ) from None
    raw = exchange.bearer
    if raw is None:
        raise Unauthorized(
            "send 'Authorization: Bearer <token>' with a client token from the Forge console "
            "(or 'python manage.py create_token')."
        )
    token = services.authenticate_bearer(raw, exchange.path, session_id=exchange.header("mcp-session-id"))
    if token is None:
        raise Unauthorized("this token is unknown, expired or revoked; ask an operator for a new one.")
    return token


def read_message(exchange: Exchange, token: ClientToken, transport: str, session_id: str = "") -> Any:
    """The JSON-RPC message (or batch) the body carries, screened by `jsonrpc.decode`; a body refused unread
    is audited and answered with the error's id (null when there is none to trust)."""
    try:
        return jsonrpc.decode(exchange.body, max_depth=settings.FORGE_MAX_JSON_DEPTH)
    except jsonrpc.UnreadableMessage as unreadable:
        audit_refused_request(
            token,
            unreadable.outcome,
            {"transport": transport, "path": exchange.path[:200], "code": unreadable.code, **(unreadable.data or {})},
            session_id=session_id,
        )
        raise ExchangeRefused(unreadable, unreadable.request_id) from None


def audit_refused_request(token: ClientToken, outcome: str, arguments: dict[str, Any], *, session_id: str = "") -> None:
    """The audit row of an authenticated request refused whole before any of it ran; the refusal stands even
    when the row cannot be written."""
    with contextlib.suppress(AuditUnavailable):
        record(
            EventKind.REQUEST_REFUSED,
            arguments=arguments,
            outcome=outcome,
            called_by=token.owner.get_username(),
            session=session_id,
            client_label=token.label,
        )


def request_group(token: ClientToken, session_id: str, request_id: Any) -> str:
    """The channel-layer group of one request in flight, named by the id and what the id is unique within
    (its session; without one, on the stateless revision, its token): where that client's
    `notifications/cancelled` for it goes."""
    scope = f"session:{session_id}" if session_id else f"token:{token.pk}"
    digest = hashlib.sha256(json.dumps([scope, request_id]).encode()).hexdigest()[:40]
    return f"mcp-request.{digest}"


def cancelled_requests(token: ClientToken, session_id: str, messages: list[Any]) -> list[str]:
    """The request groups that the `notifications/cancelled` among `messages` name."""
    groups = []
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "notifications/cancelled" and "id" not in message:
            request_id = (message.get("params") or {}).get("requestId")
            if jsonrpc.is_valid_id(request_id):
                groups.append(request_group(token, session_id, request_id))
    return groups


def refuse_resumption(exchange: Exchange, token: ClientToken, transport: str) -> None:
    """A stream cannot be resumed (`Last-Event-ID`): the events it carried are not kept, so a request to
    replay them is refused (audited) rather than answered with a fresh stream as if nothing was missed."""
    if exchange.header("last-event-id") is None:
        return
    audit_refused_request(token, "resumption_refused", {"transport": transport, "path": exchange.path[:200]})
    raise ExchangeRefused(
        RpcError(
            INVALID_REQUEST,
            "Resuming a stream (Last-Event-ID) is not supported: this server keeps no events to replay. Open a new "
            "stream without Last-Event-ID, and send again any request whose answer you did not receive.",
        ),
        status=400,
    )
