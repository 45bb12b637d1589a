"""The consent gates for the methods beside the tools: resources, prompts and completions.

A method that reaches a project's content passes the same gates as a read tool, through the registry's own
gate (`registry.admit` with a declaration that needs a grant): MCP switched on, the project visible to the
principal, this session's allowed grant on it. What differs is how a refusal travels: outside a tool call
there is no `isError` result, so it is a JSON-RPC error that carries the `FORGE_ERR_*` code in its message and
`data`, sent with HTTP 200 (the request was understood; the client should act on its data). Every call of
these methods, answered or refused, is one audit row, as a tool call is: its `tool` names the method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import transaction

from access import hotpath
from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable, Refusal
from mcp_api import registry
from mcp_api.jsonrpc import INVALID_PARAMS, REFUSED, RpcError
from projects.models import Project
from projects.services import ProjectUnavailable

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext

T = TypeVar("T")

RESOURCE_NOT_FOUND = -32002
"""The code for a resource that does not exist up to 2025-11-25 (resources: error handling); 2026-07-28 answers
-32602 instead (SEP-2164: the code was in the range left to implementations)."""


def resource_not_found(ctx: CallContext) -> int:
    return INVALID_PARAMS if ctx.stateless else RESOURCE_NOT_FOUND


SESSION_HANDLE_META_KEY = "dev.forge/sessionHandle"
"""Where a stateless (2026-07-28) client names its session handle in a request's `_meta`: these methods have no
arguments of their own to carry it in."""


MCP_OFF = Refusal(
    "FORGE_ERR_MCP_DISABLED",
    "MCP is switched off by the operators of this Forge server, so no project can be read or changed. "
    "Ask an operator to switch it on in the Forge console (dashboard); session.status tells you when it is.",
)


def switched_off() -> Refusal:
    """The switch's refusal to raise: a fresh one each time, since a raised exception keeps its traceback, and
    with it every frame of the request (the module's one instance would hold them for the process's life)."""
    return Refusal(MCP_OFF.code, MCP_OFF.message)


class ContentArguments(registry.Arguments):
    """What the gate resolves: the project a method names, and a stateless client's session handle."""

    project: str
    session_handle: str | None = None


def _no_handler(ctx: CallContext, arguments: Any) -> dict[str, Any]:
    raise LookupError("the consent gate's declaration is never called")


_PROJECT_CONTENT = registry.Tool(
    name="project content",
    title="Project content",
    description="The gate in front of a resource, prompt or completion that reaches a project.",
    arguments=ContentArguments,
    handler=_no_handler,
    needs=registry.NEEDS_GRANT,
)
"""Not registered (no tool has this name): the declaration `registry.admit` checks these methods against."""


def handle_of(params: dict[str, Any]) -> str | None:
    meta = params.get("_meta")
    handle = meta.get(SESSION_HANDLE_META_KEY) if isinstance(meta, dict) else None
    return handle if isinstance(handle, str) and len(handle) <= 64 else None


def granted_project(ctx: CallContext, slug: str, params: dict[str, Any]) -> Project:
    """The project, when MCP is on, the principal may view it and this session holds an allowed grant on it;
    otherwise the read tools' refusal (raising the access request on the first attempt, as they do)."""
    if not hotpath.mcp_enabled(ctx.token):
        raise switched_off()
    arguments = ContentArguments(project=slug[:100], session_handle=handle_of(params))
    registry.admit(_PROJECT_CONTENT, ctx, arguments)
    return ctx.project


def project_read(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a read of a project's content; a file that cannot be read now is not found, as the read tools say."""
    try:
        return call(*args, **kwargs)
    except ProjectUnavailable as exc:
        raise Refusal("FORGE_ERR_NOT_FOUND", f"The project cannot be read now: {exc}.") from None


def audited(
    ctx: CallContext,
    method: str,
    arguments: dict[str, Any],
    run: Callable[[], T],
    *,
    not_found: int = REFUSED,
    changes: bool = False,
) -> T:
    """Run one call of `method` and write its audit row (outcome `ok`, or the refusal's code); a refusal
    becomes the JSON-RPC error the client acts on (`not_found` is the code of FORGE_ERR_NOT_FOUND).

    A call that `changes` something commits it with its audit row, or neither; what it stored before a
    refusal (the access request the gate raised) commits with the refusal's row, as a tool call's does. The
    error is raised only once that transaction has closed."""
    ctx.start_call()
    failure: RpcError | None = None
    with transaction.atomic() if changes else contextlib.nullcontext():
        try:
            value, outcome = run(), "ok"
        except AuditUnavailable:
            raise  # the transaction is lost: nothing the call did may stay
        except Refusal as refusal:
            code = not_found if refusal.code == "FORGE_ERR_NOT_FOUND" else REFUSED
            failure = RpcError(code, f"{refusal.code}: {refusal.message}", refusal.structured())
            outcome = refusal.code
        except RpcError as exc:
            failure, outcome = (
                exc,
                "not_found" if isinstance(exc.data, dict) and "uri" in exc.data else "invalid_params",
            )
        _audit(ctx, method, arguments, outcome)
    if failure is not None:
        raise failure
    return value


def _audit(ctx: CallContext, method: str, arguments: dict[str, Any], outcome: str) -> None:
    project = ctx.target.slug if ctx.target is not None else str(arguments.get("project", ""))[:100]
    record(
        EventKind.TOOL_CALL,
        tool=method,
        arguments=arguments,
        outcome=outcome,
        called_by=ctx.called_by,
        session=ctx.session_id,
        client_label=ctx.token.label,
        project=project,
        trace=ctx.trace,
    )
