"""MCP logging for the handshake revisions (2024-11-05 .. 2025-11-25): a session's level, and the log
messages of its own calls.

`logging/setLevel` stores the level on the session's row, so whichever process serves the session's next call
reads it with the session. Until a client sets one it hears no log messages: a client that never asked gets
no traffic it did not want. `emit(ctx, level, logger, data)` queues one `notifications/message` for the call
being answered when its level is at or above the session's; the transport sends what was queued with the
answer, before it, on the call's own event stream when the POST accepts `text/event-stream`, and otherwise on
the session's stream (GET /mcp, or /sse). A message is about this session's own call, never another's.

2026-07-28 deprecates logging: it is not declared there, `logging/setLevel` is not offered, and `emit`
queues nothing for a call at that revision.

What the server itself says (`tool_call_logged`): a tool call's start at debug (its argument names, never
their values), its answer at info, a refusal at warning (its code and message, what the result says too), a
pending confirmation at notice, an internal failure at error (no detail: the server's own log has it).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from access.models import McpSession
from forge_core.errors import Refusal
from mcp_api.consent import audited
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext

LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""The syslog severities of RFC 5424 (section 6.2.1) by MCP's names, least severe first."""
_RANK = {level: rank for rank, level in enumerate(LEVELS)}
MAX_MESSAGES_PER_EXCHANGE = 100
"""One request (or batch) queues at most this many messages; the rest are dropped, never the answer."""
TOOLS_LOGGER = "forge.tools"


def set_level(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    """`logging/setLevel`: the least severe level this session wants to hear from now on (audited)."""
    level = params.get("level")

    def store() -> dict[str, Any]:
        session = ctx.session
        if session is None:
            raise LookupError("logging/setLevel is offered only on revisions with sessions")
        if not isinstance(level, str) or level not in _RANK:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: level must be one of {', '.join(LEVELS)} (least to most severe), "
                f"not {str(level)[:40]!r}.",
                {"levels": list(LEVELS)},
            )
        McpSession.objects.filter(pk=session.pk).update(log_level=level)
        session.log_level = level  # the rest of a batch hears at the new level too
        return {}

    return audited(ctx, "logging/setLevel", {"level": str(level)[:40]}, store, changes=True)


def emit(ctx: CallContext, level: str, logger: str | None, data: Any) -> bool:
    """Queue a `notifications/message` for the session of the call `ctx` answers, if the session asked for
    `level` or a less severe one; True when queued. `data` is any JSON value (no secrets: it goes to the
    client as given); `logger` names the part of the server speaking, or None."""
    if level not in _RANK:
        raise ValueError(f"{level!r} is not an MCP log level; use one of {', '.join(LEVELS)}")
    if not hears(ctx, level) or len(ctx.messages) >= MAX_MESSAGES_PER_EXCHANGE:
        return False
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a log message's data must be a JSON value: {exc}") from None
    params: dict[str, Any] = {"level": level, "data": data}
    if logger:
        params["logger"] = logger
    ctx.messages.append({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
    return True


def hears(ctx: CallContext, level: str) -> bool:
    """Whether the session of this call asked for messages at `level` (so a caller can skip building one)."""
    session = ctx.session
    if ctx.stateless or session is None or not session.log_level:
        return False
    return _RANK.get(level, -1) >= _RANK.get(session.log_level, len(LEVELS))


def tool_call_started(ctx: CallContext, tool: str, arguments: Any) -> None:
    if not hears(ctx, "debug"):
        return  # the usual case: no work on a call nobody listens to
    names = sorted(str(name)[:100] for name in arguments)[:50] if isinstance(arguments, dict) else []
    emit(ctx, "debug", TOOLS_LOGGER, {"message": f"Calling {tool}.", "tool": tool, "arguments": names})


def tool_call_logged(ctx: CallContext, tool: str, outcome: str, refusal: Refusal | RpcError | None = None) -> None:
    """The log messages of one tool call's end, from what it answered."""
    if ctx.awaiting:
        emit(
            ctx,
            "notice",
            TOOLS_LOGGER,
            {
                "message": f"{tool} waits for an operator's decision in the Forge console; nothing is changed "
                "until then. Follow it with editor.confirm.",
                "tool": tool,
                "confirmation": ctx.awaiting,
            },
        )
    if refusal is None and outcome != "internal_error":  # "ok", or another answer such as a resumed call's
        project = ctx.target.slug if ctx.target is not None else ctx.audit_project
        data: dict[str, Any] = {"message": f"{tool} answered.", "tool": tool, "outcome": outcome}
        if project:
            data["project"] = project
        emit(ctx, "info", TOOLS_LOGGER, data)
    elif outcome == "internal_error":
        emit(
            ctx,
            "error",
            TOOLS_LOGGER,
            {"message": f"{tool} failed inside the server; nothing it did was kept.", "tool": tool},
        )
    elif refusal is not None and not ctx.awaiting:  # a pending confirmation's "refusal" is the notice above
        code = refusal.code if isinstance(refusal, Refusal) else outcome
        emit(
            ctx,
            "warning",
            TOOLS_LOGGER,
            {"message": str(refusal.message)[:1000], "tool": tool, "outcome": outcome, "code": code},
        )


def decision_arrived(tool: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The info message a write call waiting on its stream sends before its final answer, once the operator's
    decision came (the transport asked `hears(ctx, "info")` when the call began)."""
    structured = (answer.get("result") or {}).get("structuredContent") or {}
    data = {
        "message": f"The decision on {tool} arrived; its outcome is the answer that follows.",
        "tool": tool,
        "outcome": structured.get("error", "ok") if isinstance(structured, dict) else "ok",
    }
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": data, "logger": TOOLS_LOGGER},
    }
