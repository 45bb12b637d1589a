"""How the answer to a request on POST /mcp goes out, with or without a session: as JSON, or as an event
stream when the request asks for progress or its client accepts nothing else; and a write call that
created a pending confirmation waits on that stream for the operator's decision (a `WaitPlan`), whose
final answer is built here too."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from access.models import session_group, token_group
from confirmations.models import ConfirmationState, PendingConfirmation
from confirmations.services import do_cancel_confirmations, expire_due, outcome_of
from mcp_api import jsonrpc
from mcp_api import logging as client_logging
from mcp_api.protocol import CallContext, respond, shape_result, tool_result
from mcp_api.tools.common import outcome_result
from mcp_api.transports.core import (
    ERROR_STATUS,
    EVENT_STREAM,
    JSON,
    ConversationPlan,
    Exchange,
    Reply,
    WaitPlan,
    request_group,
)


def answer(exchange: Exchange, ctx: CallContext, message: dict[str, Any]) -> Reply:
    """Answer one request; on the stateless revision an error answer carries its HTTP status too. A call whose
    tool converses with the client goes on as a `ConversationPlan` once its first step has said something."""
    # Only a POST that takes an event stream can carry a tool's progress (a session's, or at 2026-07-28 any);
    # requests to the client only a session's (`mcp_api.dialogue`).
    ctx.can_converse = (ctx.stateless or ctx.session is not None) and exchange.accepts(EVENT_STREAM)
    ctx.progress_token = _progress_token(message)
    answered = respond(ctx, message)
    if ctx.conversation is not None and "result" in answered:
        conversation, first = ctx.conversation
        conversation.request_id = message["id"]
        cancel_group = request_group(ctx.token, "" if ctx.stateless else ctx.session_id, message["id"])
        ends = (
            [session_group(ctx.session_id), token_group(ctx.token.pk)]
            if ctx.session_id
            else [token_group(ctx.token.pk)]
        )
        return Reply(status=200, conversation=ConversationPlan(conversation, first, cancel_group, ends))
    status = 200
    if ctx.stateless and "error" in answered:
        status = ERROR_STATUS.get(answered["error"]["code"], 200)
    sse = status == 200 and _wants_stream(exchange, message, bool(ctx.messages))
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
            cancel_group=request_group(ctx.token, "" if ctx.stateless else ctx.session_id, message["id"]),
            principal=ctx.called_by,
            tool=str((message.get("params") or {}).get("name", ""))[:100],
            log_decision=client_logging.hears(ctx, "info"),
        )
    if ctx.messages and not sse:
        # The client takes JSON only: its log messages go to the session's stream (GET /mcp) instead.
        deliver: list[tuple[str, Any]] = [(session_group(ctx.session_id), ctx.messages)] if ctx.session_id else []
        return Reply(status=status, body=answered, deliver=deliver)
    return Reply(status=status, body=answered, sse=sse, wait=wait, notes=ctx.messages)


def cancel_wait(wait: WaitPlan) -> None:
    """The client cancelled the waiting request: its confirmation, if still pending, is cancelled (audited)."""
    do_cancel_confirmations(
        "client_cancelled", sessions=None, pending_id=wait.confirmation_id, acting_user=wait.principal
    )


def _progress_token(message: dict[str, Any]) -> Any:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def _wants_stream(exchange: Exchange, message: dict[str, Any], has_notes: bool = False) -> bool:
    """Answer as an SSE stream when the client asks for progress, has log messages to hear before the answer
    (they belong on the request's own stream), or accepts nothing else."""
    if not exchange.accepts(EVENT_STREAM):
        return False
    return has_notes or _progress_token(message) is not None or not exchange.accepts(JSON)


def decided(wait: WaitPlan) -> dict[str, Any] | None:
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
