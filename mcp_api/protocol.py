"""The MCP method layer: one table of methods, the lifecycle, and the single exception-to-wire boundary.

A refusal (`forge_core.errors.Refusal`) raised by a tool, by the registry's gate or by a service a tool
calls becomes the tool's result here, once (`refused_result`); one that meets a method outside a tool call
becomes a JSON-RPC error (`jsonrpc.refusal_error`). Protocol faults are `RpcError`s throughout.

`respond(ctx, message)` answers one JSON-RPC request for an authenticated principal, whatever the
transport and revision; the transports only move bytes. It runs inside the one database hop of a call
(DESIGN section 16), so everything here is synchronous Django code.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from access import hotpath, peers
from access.models import ClientToken, McpSession
from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable, Refusal
from mcp_api import completions, dialogue, prompts, registry, resources, tasks, tracing
from mcp_api import logging as client_logging
from mcp_api.consent import MCP_OFF
from mcp_api.jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND, RpcError, error, refusal_error, result
from mcp_api.results import OVERRIDE_BANNER, refused_result, tool_result
from mcp_api.revisions import ALL_REVISIONS, SERVER_INFO_META_KEY, is_stateless
from projects.models import Project

logger = logging.getLogger("forge.mcp")

SERVER_NAME = "forge-mcp"
SERVER_VERSION = "0.1.0"
SERVER_INFO = {"name": SERVER_NAME, "title": "Forge MCP", "version": SERVER_VERSION}
CAPABILITIES = {
    "tools": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": False},
    "prompts": {"listChanged": False},
    "completions": {},
    "logging": {},
}
"""What the server offers at the handshake revisions from 2025-03-26 on."""


def capabilities(revision: str) -> dict[str, Any]:
    """The capabilities declared at a revision: `completions` came with 2025-03-26 (completion/complete itself
    answers at 2024-11-05, which declared nothing for it), and 2026-07-28 removed `resources/subscribe` (its
    clients listen with subscriptions/listen), and deprecated logging (`mcp_api.logging`). Tasks are in the core
    of 2025-11-25 and an extension at 2026-07-28 (`mcp_api.tasks`)."""
    if revision == "2024-11-05":
        return {key: value for key, value in CAPABILITIES.items() if key != "completions"}
    if is_stateless(revision):
        offered = {key: value for key, value in CAPABILITIES.items() if key != "logging"}
        return {**offered, "resources": {"listChanged": False}, "extensions": tasks.EXTENSIONS}
    if revision == tasks.TASK_REVISION:
        return {**CAPABILITIES, "tasks": tasks.CAPABILITY}
    return CAPABILITIES


@dataclass
class CallContext:
    """Who is calling, over what, at which revision: what every method and tool handler receives."""

    token: ClientToken
    revision: str
    transport: str
    # The transport's session; on the stateless revision, the session handle the registry resolved from a
    # tool's session_handle argument (one request, one context, so it never outlives the call).
    session: McpSession | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    target: Project | None = None  # the project a tool's arguments name, resolved by the registry
    audit_project: str = ""  # a project a tool reached without naming it: what the audit row names
    awaiting: str | None = None  # a confirmation the call created: the transport may wait for its decision
    # Set by the transport: whether this call's answer is an event stream a conversing tool may talk on, and
    # the progress token the call sent (`mcp_api.dialogue`); a conversation the call began, to carry on.
    can_converse: bool = False
    progress_token: Any = None
    conversation: Any = None
    # The notifications/message the exchange's calls queued (`mcp_api.logging.emit`): the transport sends them
    # before the answer, on the call's own event stream or the session's.
    messages: list[dict[str, Any]] = field(default_factory=list)
    trace: dict[str, str] = field(default_factory=dict)  # the request's W3C trace context, for its audit row

    @property
    def stateless(self) -> bool:
        return is_stateless(self.revision)

    @property
    def called_by(self) -> str:
        return self.token.owner.get_username()

    @property
    def session_id(self) -> str:
        return self.session.id if self.session is not None else ""

    @property
    def project(self) -> Project:
        """The project this call names, visible to the principal and, for a tool that needs a grant, granted
        to this session: the registry resolved it before the handler ran."""
        if self.target is None:
            raise LookupError("no project was resolved for this call: its tool's arguments name none")
        return self.target

    def start_call(self) -> None:
        """Forget what the previous tools/call of a batch resolved."""
        self.target, self.audit_project, self.awaiting = None, "", None


def instructions() -> str:
    mode = (
        OVERRIDE_BANNER
        if settings.FORGE_OVERRIDE_SECURITIES
        else "Governed mode: you may read projects and propose changes; people accept them."
    )
    if not hotpath.mcp_enabled():
        mode += " MCP IS SWITCHED OFF right now: only server_info and session.status answer until an operator switches it on."
    return (
        f"Forge MCP serves IEC 61131-3 PLC projects (PLCopen XML). {mode} "
        f"Start with session.status to see what this session may do. {registry.AUTHORING_GUIDANCE} No tool "
        "makes the working draft the project, and a statement in chat is never an approval."
    )


def _ping(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    return {}


def _tools_list(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    page = registry.list_page(
        params.get("cursor"), mcp_on=hotpath.mcp_enabled(ctx.token), read_only=peers.is_read_only(ctx.token)
    )
    if ctx.stateless:
        # The list depends on the principal and on flags an operator can change at any time.
        page.update({"ttlMs": 0, "cacheScope": "private"})
    return page


def _server_discover(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "supportedVersions": list(ALL_REVISIONS),
        "capabilities": capabilities(ctx.revision),
        "instructions": instructions(),
        "ttlMs": 0,
        "cacheScope": "private",
    }


def _tools_call(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    ctx.start_call()
    name = params.get("name")
    tool = registry.find_tool(name)
    if tool is None:
        record(
            EventKind.TOOL_CALL,
            tool=str(name)[:100],
            outcome="unknown_tool",
            called_by=ctx.called_by,
            session=ctx.session_id,
            client_label=ctx.token.label,
            trace=ctx.trace,
        )
        unknown = registry.unknown_tool(name)
        client_logging.tool_call_logged(ctx, str(name)[:100], "unknown_tool", unknown)
        raise unknown
    raw_arguments = params.get("arguments")
    client_logging.tool_call_started(ctx, tool.name, raw_arguments)
    try:
        arguments = tool.parse(raw_arguments)
    except RpcError as invalid:
        _audit_call(ctx, tool, raw_arguments if isinstance(raw_arguments, dict) else {}, "invalid_params")
        client_logging.tool_call_logged(ctx, tool.name, "invalid_params", invalid)
        raise
    if not tool.when_off and not hotpath.mcp_enabled(ctx.token):
        _audit_call(ctx, tool, raw_arguments if isinstance(raw_arguments, dict) else {}, "mcp_disabled")
        client_logging.tool_call_logged(ctx, tool.name, "mcp_disabled", MCP_OFF)
        return refused_result(MCP_OFF)
    # How a governed call's pending confirmation reaches this client: by what it declared (`mcp_api.tasks`).
    form = tasks.form_for(ctx, params) if tool.waits_for_operator else tasks.PENDING
    if dialogue.converses(tool):
        return _converse(ctx, tool, arguments, form, params)
    return _conclude(ctx, tool, arguments, form, lambda: tool.run(ctx, arguments))


def _converse(
    ctx: CallContext, tool: registry.Tool, arguments: registry.Arguments, form: tasks.Form, params: dict[str, Any]
) -> dict[str, Any]:
    """Begin a conversing tool's call (`mcp_api.dialogue`): its first step runs here; if it asks or reports
    something, the transport carries the call on (`ctx.conversation`) and this answer is not sent. At 2026-07-28
    its requests are answered from the request's rounds (`dialogue.Rounds`) instead of sent to the client."""
    if not tool.read_only:
        raise TypeError(f"{tool.name} converses with its client, so it may only read (no transaction spans steps)")
    rounds = None
    if ctx.stateless:
        try:
            rounds = dialogue.Rounds.open(ctx, f"tool:{tool.name}", arguments.model_dump(mode="json"), params)
        except RpcError:
            _audit_call(ctx, tool, arguments.model_dump(mode="json"), "request_state_refused")
            raise
    try:
        steps: Any = tool.run(ctx, arguments)  # admission; the tool's own code has not started
    except Exception as refused:
        return _conclude(ctx, tool, arguments, form, dialogue.raising(refused))
    conversation = dialogue.Conversation(
        ctx,
        steps,
        conclude=lambda produce: _conclude(ctx, tool, arguments, form, produce),
        shape=lambda value: shape_result(ctx.revision, value),
        rounds=rounds,
    )
    if not ctx.can_converse:
        return conversation.run_through()
    said = conversation.advance()
    if said.failure is not None:
        raise said.failure
    if said.result is not None:
        ctx.messages[:0] = said.notes
        return said.result
    ctx.conversation = (conversation, said)
    return {}


def _conclude(
    ctx: CallContext, tool: registry.Tool, arguments: registry.Arguments, form: tasks.Form, produce: Callable[[], Any]
) -> dict[str, Any]:
    """A call's end: the handler's value (`produce`) or its refusal as the tool's result, and the audit row."""
    refused: Refusal | None = None
    try:
        # A tool that changes something commits with its audit row: if the row cannot be written, whatever the
        # handler changed is rolled back and the client is told nothing was done (fail closed). A read-only
        # tool runs outside any transaction, beside other calls (on SQLite a transaction holds the one write
        # lock); its row is then group-committed with others' (`audit.services.record`), and the answer goes
        # out only once the row is committed.
        with contextlib.nullcontext() if tool.read_only else transaction.atomic():
            try:
                if form.request_state is not None:
                    answer, outcome = (
                        tasks.resume(ctx, tool, arguments.model_dump(mode="json"), form.request_state),
                        "resumed",
                    )
                else:
                    value = produce()
                    if isinstance(value, dialogue.InputRequired):
                        answer, outcome = value.result, "input_required"
                    else:
                        answer, outcome = tool_result(value), "ok"
            except (AuditUnavailable, RpcError):
                raise  # the transaction is lost: nothing the handler did may stay; or a protocol error, below
            except Refusal as refusal:
                # A refusal is the call's answer: what the handler stored before it (a write call's pending
                # confirmation) commits with the audit row.
                answer, outcome, refused = refused_result(refusal), refusal.code, refusal
                answer = tasks.answer_suspended(ctx, form, tool, arguments.model_dump(mode="json"), answer)
            _audit_call(ctx, tool, arguments.model_dump(mode="json"), outcome)
    except RpcError as rejected:
        # A request the client cannot be asked (-32021): a protocol error, not the tool's result.
        _audit_call(ctx, tool, arguments.model_dump(mode="json"), f"rpc_error {rejected.code}")
        raise
    except AuditUnavailable as unavailable:
        ctx.awaiting = None  # a confirmation the call made was rolled back with it: there is nothing to wait for
        answer, outcome, refused = refused_result(unavailable), unavailable.code, unavailable
    except Exception:
        # What the handler did is rolled back with its transaction, but the attempt stays on the record;
        # `respond` answers it as an internal error.
        with contextlib.suppress(AuditUnavailable):
            _audit_call(ctx, tool, arguments.model_dump(mode="json"), "internal_error")
        client_logging.tool_call_logged(ctx, tool.name, "internal_error")
        raise
    client_logging.tool_call_logged(ctx, tool.name, outcome, refused)
    return answer


def _audit_call(ctx: CallContext, tool: registry.Tool, arguments: dict[str, Any], outcome: str) -> None:
    project = ctx.target.slug if ctx.target is not None else ctx.audit_project
    record(
        EventKind.TOOL_CALL,
        tool=tool.name,
        arguments=arguments,
        secret_keys=tool.secret_arguments,
        outcome=outcome,
        called_by=ctx.called_by,
        session=ctx.session_id,
        client_label=ctx.token.label,
        project=project or str(arguments.get("project", ""))[:100],
        trace=ctx.trace,
    )


@dataclass(frozen=True)
class Method:
    handler: Callable[[CallContext, dict[str, Any]], dict[str, Any]]
    stateless_only: bool = False
    handshake_only: bool = False

    def offered_at(self, ctx: CallContext) -> bool:
        return not (self.stateless_only and not ctx.stateless) and not (self.handshake_only and ctx.stateless)


METHODS: dict[str, Method] = {
    "ping": Method(_ping, handshake_only=True),  # removed in 2026-07-28
    "tools/list": Method(_tools_list),
    "tools/call": Method(_tools_call),
    "server/discover": Method(_server_discover, stateless_only=True),
    "resources/list": Method(resources.resources_list),
    "resources/templates/list": Method(resources.templates_list),
    "resources/read": Method(resources.resources_read),
    # Removed in 2026-07-28, whose clients name resources in subscriptions/listen instead.
    "resources/subscribe": Method(resources.resources_subscribe, handshake_only=True),
    "resources/unsubscribe": Method(resources.resources_unsubscribe, handshake_only=True),
    "prompts/list": Method(prompts.prompts_list),
    "prompts/get": Method(prompts.prompts_get),
    "completion/complete": Method(completions.complete),
    # The Tasks extension's methods; each answers only at the revisions that have it (`mcp_api.tasks`).
    **{name: Method(handler) for name, handler in tasks.handlers().items()},
    "logging/setLevel": Method(client_logging.set_level, handshake_only=True),  # deprecated in 2026-07-28
}


def respond(ctx: CallContext, message: dict[str, Any]) -> dict[str, Any]:
    """Answer one JSON-RPC request. Never raises: every failure becomes an error object."""
    request_id = message.get("id")
    method = METHODS.get(message["method"])
    ctx.trace = tracing.trace_context(message.get("params"))
    try:
        if method is None or not method.offered_at(ctx):
            raise RpcError(
                METHOD_NOT_FOUND,
                f"Method {message['method'][:100]!r} is not offered at revision {ctx.revision}. "
                "This server offers tools, resources, prompts, completions and (with sessions) logging: call "
                "tools/list.",
            )
        value = method.handler(ctx, message.get("params") or {})
    except RpcError as exc:
        return error(request_id, exc)
    except Refusal as refusal:
        return error(request_id, refusal_error(refusal))
    except Exception:
        logger.exception("internal error answering %s", message.get("method"))
        return error(request_id, RpcError(INTERNAL_ERROR, "Internal error. The server logged it; try again."))
    return result(request_id, shape_result(ctx.revision, value))


def shape_result(revision: str, value: dict[str, Any]) -> dict[str, Any]:
    """Add what a stateless-revision result must carry: its resultType and the server's identity."""
    if is_stateless(revision):
        value.setdefault("resultType", "complete")
        value["_meta"] = {**value.get("_meta", {}), SERVER_INFO_META_KEY: SERVER_INFO}
    return value
