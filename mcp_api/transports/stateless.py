"""The stateless revision (2026-07-28) on POST /mcp: no initialize and no session.

Every request carries its envelope in `params._meta` (protocol version, client capabilities and info),
and its routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) must agree with the body; the
envelope is checked rung by rung and the first failure wins. `subscriptions/listen` replaces the GET
stream: its answer is an event stream of the notifications it asks for.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from access import limits
from access.models import BROADCAST_GROUP, ClientToken, Transport, token_group
from mcp_api import jsonrpc, registry, tasks
from mcp_api.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from mcp_api.protocol import CallContext
from mcp_api.resource_updates import listeners_group
from mcp_api.resources import MAX_SUBSCRIPTIONS_PER_SESSION, listened_resource
from mcp_api.revisions import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    HANDSHAKE_REVISIONS,
    NAME_BEARING_METHODS,
    PROTOCOL_VERSION_META_KEY,
    STATELESS_REVISIONS,
)
from mcp_api.transports.answers import answer
from mcp_api.transports.core import (
    ERROR_STATUS,
    EVENT_STREAM,
    LISTEN_FILTERS,
    Exchange,
    ExchangeRefused,
    Reply,
    StreamPlan,
    cancelled_requests,
)


def is_stateless_request(exchange: Exchange, message: Any) -> bool:
    """Whether a POST /mcp is a 2026-07-28 request: its `MCP-Protocol-Version` names a revision that is
    not a handshake one, or, without that header and without `Mcp-Session-Id`, its `_meta` carries the
    protocol version."""
    version_header = exchange.header("mcp-protocol-version")
    if version_header is not None:
        return version_header not in HANDSHAKE_REVISIONS
    if exchange.header("mcp-session-id") is not None or not isinstance(message, dict):
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def post(exchange: Exchange, token: ClientToken, message: Any) -> Reply:
    """Answer a stateless POST for an authenticated token."""
    if isinstance(message, dict) and "id" not in message:
        return _notification(exchange, token, message)
    if jsonrpc.kind_of(message) != "request":
        detail = "Batches are not part of MCP revision 2026-07-28." if isinstance(message, list) else ""
        raise ExchangeRefused(jsonrpc.invalid_request(detail), jsonrpc.safe_id(message))
    requested = exchange.header("mcp-protocol-version")
    meta = (message.get("params") or {}).get("_meta")
    if requested not in STATELESS_REVISIONS and not (isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta):
        # A session client naming a revision we do not speak: say so, rather than ask for an envelope.
        raise ExchangeRefused(_unsupported(requested), message["id"], status=400)
    if message["method"] == "subscriptions/listen" and not exchange.accepts(EVENT_STREAM):
        raise ExchangeRefused(
            RpcError(INVALID_REQUEST, "subscriptions/listen answers as text/event-stream; accept it."),
            message["id"],
            status=406,
        )
    revision, client_info, client_capabilities = _envelope(exchange, message)
    ctx = CallContext(
        token=token,
        revision=revision,
        transport=Transport.STREAMABLE_HTTP,
        client_info=client_info,
        client_capabilities=client_capabilities,
    )
    if message["method"] == "subscriptions/listen":
        return _listen(ctx, message)
    return answer(exchange, ctx, message)


def _notification(exchange: Exchange, token: ClientToken, message: dict[str, Any]) -> Reply:
    if jsonrpc.kind_of(message) != "notification":
        raise jsonrpc.invalid_request()
    requested = exchange.header("mcp-protocol-version") or ""
    if requested not in STATELESS_REVISIONS:
        raise ExchangeRefused(_unsupported(requested), status=400)
    return Reply(status=202, cancel=cancelled_requests(token, "", [message]))


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


def _envelope(exchange: Exchange, message: dict[str, Any]) -> tuple[str, dict, dict]:
    """The request's revision, client info and client capabilities, once its envelope is checked; a rung it
    fails is answered with the request's id and the error's HTTP status."""
    try:
        return _read_envelope(exchange, message)
    except RpcError as problem:
        raise ExchangeRefused(problem, message["id"], status=ERROR_STATUS.get(problem.code, 400)) from None


def _read_envelope(exchange: Exchange, message: dict[str, Any]) -> tuple[str, dict, dict]:
    """Check the per-request envelope of a stateless request, rung by rung; the first failure wins."""
    meta = (message.get("params") or {}).get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying {PROTOCOL_VERSION_META_KEY!r} and "
            f"{CLIENT_CAPABILITIES_META_KEY!r}.",
        )
    missing = [key for key in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if key not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, f"params._meta is missing {', '.join(missing)}; add it to every request.")
    duplicated = _duplicated_routing_header(exchange)
    if duplicated:
        raise RpcError(HEADER_MISMATCH, f"The {duplicated} header appears more than once; send it once.")
    version = meta[PROTOCOL_VERSION_META_KEY]
    if exchange.header("mcp-protocol-version") != version:
        raise RpcError(
            HEADER_MISMATCH, "The MCP-Protocol-Version header does not match params._meta's protocol version."
        )
    if exchange.header("mcp-method") != message["method"]:
        raise RpcError(HEADER_MISMATCH, "The Mcp-Method header does not match the request's method.")
    name_key = NAME_BEARING_METHODS.get(message["method"])
    if name_key is not None:
        body_value = (message.get("params") or {}).get(name_key)
        if body_value is not None and decode_header_value(exchange.header("mcp-name")) != body_value:
            raise RpcError(HEADER_MISMATCH, f"The Mcp-Name header does not match the request's {name_key!r}.")
    if message["method"] == "tools/call":
        _check_mirrored_arguments(exchange, message.get("params") or {})
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, "The protocol version in params._meta must be a string.")
    if version not in STATELESS_REVISIONS:
        raise _unsupported(version)
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


def _check_mirrored_arguments(exchange: Exchange, params: dict[str, Any]) -> None:
    """SEP-2243: each argument the tool's schema marks with `x-mcp-header` travels in an `Mcp-Param-<Name>` header
    too, which must say the same as the body (decoded from `=?base64?...?=`; numbers and booleans as their JSON
    text); an argument left out or null has no header. An unknown tool is left to tools/call to refuse."""
    tool = registry.find_tool(params.get("name"))
    arguments = params.get("arguments")
    if tool is None or not isinstance(arguments, dict):
        return
    for argument, header in mirrored_arguments(tool).items():
        value = arguments.get(argument)
        sent = exchange.header(f"mcp-param-{header.lower()}")
        if value is None:
            if sent is not None:
                raise RpcError(HEADER_MISMATCH, f"The Mcp-Param-{header} header is sent but {argument!r} is not.")
            continue
        expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if sent is None:
            raise RpcError(
                HEADER_MISMATCH, f"The Mcp-Param-{header} header is missing: it must repeat the argument {argument!r}."
            )
        if decode_header_value(sent) != expected:
            raise RpcError(HEADER_MISMATCH, f"The Mcp-Param-{header} header does not match the argument {argument!r}.")


def mirrored_arguments(tool: registry.Tool) -> dict[str, str]:
    """The tool's arguments marked `x-mcp-header` in its published schema, with the header name each goes in."""
    properties = tool.descriptor()["inputSchema"].get("properties") or {}
    return {
        name: schema["x-mcp-header"]
        for name, schema in properties.items()
        if isinstance(schema, dict) and isinstance(schema.get("x-mcp-header"), str)
    }


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


def _listen(ctx: CallContext, message: dict[str, Any]) -> Reply:
    requested = (message.get("params") or {}).get("notifications")
    if not isinstance(requested, dict):
        raise ExchangeRefused(
            RpcError(INVALID_PARAMS, "subscriptions/listen needs params.notifications, e.g. {toolsListChanged: true}."),
            message["id"],
            status=400,
        )
    honored: dict[str, Any] = {key: True for key in LISTEN_FILTERS if requested.get(key) is True}
    resources = _listened_resources(ctx, requested.get("resourceSubscriptions"), message)
    if resources is not None:
        honored["resourceSubscriptions"] = list(resources)
    try:
        listened = tasks.listened_tasks(ctx, requested.get("taskIds"))
    except RpcError as refused:
        raise ExchangeRefused(refused, message["id"], status=ERROR_STATUS.get(refused.code, 200)) from None
    task_ids = [str(task.id) for task in listened]
    if task_ids:
        honored["taskIds"] = task_ids
    subscription_id = message["id"]
    acknowledged = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "notifications": honored,
            "_meta": {"io.modelcontextprotocol/subscriptionId": subscription_id},
        },
    }
    followed = {uri: found for uri, found in (resources or {}).items() if found is not None}
    projects = sorted({project_id for project_id, _ in followed.values()})
    plan = StreamPlan(
        token_id=ctx.token.pk,
        token_expires_at=ctx.token.expires_at,
        groups=[
            token_group(ctx.token.pk),
            BROADCAST_GROUP,
            *map(listeners_group, projects),
            *map(tasks.task_group, task_ids),
        ],
        # A stream following a project's resources holds them through the session handle that was granted
        # them: it ends with the handle.
        session_id=(ctx.session_id or None) if followed else None,
        # A task that has already finished is told at once: no later notification would say it.
        first_events=(
            ("message", jsonrpc.encode(acknowledged).decode()),
            *(("message", notice) for task in listened if (notice := tasks.finished_notice(task, subscription_id))),
        ),
        subscription_id=subscription_id,
        notifications=frozenset(LISTEN_FILTERS[key] for key in honored if key in LISTEN_FILTERS),
        stream_id=limits.do_open_stream(ctx.token),
        resources=followed,
    )
    return Reply(status=200, stream=plan)


def _listened_resources(
    ctx: CallContext, wanted: Any, message: dict[str, Any]
) -> dict[str, tuple[int, bool] | None] | None:
    """The resources a listen asks to follow (`resourceSubscriptions`), each through the gates of
    resources/subscribe (a project's needs this handle's grant, named in `_meta` as for resources/read); the
    first one refused refuses the listen, with that refusal."""
    if wanted is None:
        return None
    if not isinstance(wanted, list) or len(wanted) > MAX_SUBSCRIPTIONS_PER_SESSION:
        raise ExchangeRefused(
            RpcError(
                INVALID_PARAMS,
                "Invalid params: resourceSubscriptions is a list of at most "
                f"{MAX_SUBSCRIPTIONS_PER_SESSION} resource addresses from resources/list.",
            ),
            message["id"],
            status=400,
        )
    params = message.get("params") or {}
    followed: dict[str, tuple[int, bool] | None] = {}
    for uri in wanted:
        try:
            followed[uri] = listened_resource(ctx, uri, params)
        except RpcError as refused:
            raise ExchangeRefused(refused, message["id"], status=ERROR_STATUS.get(refused.code, 200)) from None
    return followed
