"""The editor tools: what became of the changes this session proposed (DESIGN section 9).

`editor.pending_confirmations` lists the session's confirmations; `editor.confirm(pending_id)` gives one
outcome: the executed result, or the refusal (denied, expired, failed), or "still pending". Neither tool
decides anything: only an operator approves, in the console. A client that sends `force` (or any other
argument the schema does not name) is refused, because the argument models forbid extras.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import Field

from confirmations.models import PendingConfirmation
from confirmations.services import expire_due, outcome_of
from forge_core.errors import Refusal
from mcp_api.protocol import CallContext
from mcp_api.registry import Arguments, tool
from mcp_api.tools.common import outcome_result

LIST_LIMIT = 50
HANDLE = Field(
    default=None,
    max_length=64,
    description="Stateless (2026-07-28) clients only: the session handle the write call was made with.",
)


class ConfirmArguments(Arguments):
    pending_id: str = Field(max_length=64, description="The pending_id a write call answered with.")
    session_handle: str | None = HANDLE


class PendingArguments(Arguments):
    state: Literal["pending", "approved", "executed", "failed", "denied", "expired", "cancelled"] | None = Field(
        default=None, description="Only confirmations in this state (all of the session's when omitted)."
    )
    session_handle: str | None = HANDLE


@tool("editor.confirm", title="Outcome of a proposed change", arguments=ConfirmArguments)
def editor_confirm(ctx: CallContext, args: ConfirmArguments) -> dict[str, Any]:
    """The outcome of a change you proposed with a write tool: the result once an operator approved it
    and it was written, or why not (denied, expired, failed), or that it still waits. This never
    approves anything: only an operator can, in the Forge console."""
    expire_due()
    session_id = ctx.session_id
    pending_id = _uuid(args.pending_id)
    confirmation = (
        PendingConfirmation.objects.filter(pk=pending_id, principal=ctx.token.owner, session_id=session_id)
        .only("id", "tool", "state", "expires_at", "outcome", "project")
        .first()
        if session_id and pending_id
        else None
    )
    if confirmation is None:
        raise Refusal(
            "FORGE_ERR_NOT_FOUND",
            "This session has no confirmation with that pending_id. editor.pending_confirmations lists yours.",
        )
    ctx.audit_project = confirmation.project
    structured, is_error = outcome_result(outcome_of(confirmation))
    if is_error:
        raise Refusal(structured.pop("error"), structured.pop("message"), **structured)
    return structured


@tool("editor.pending_confirmations", title="Your proposed changes", arguments=PendingArguments)
def editor_pending_confirmations(ctx: CallContext, args: PendingArguments) -> dict[str, Any]:
    """The changes this session proposed with write tools, newest first, with their state (pending,
    executed, denied, expired, failed, cancelled). Use editor.confirm for one outcome."""
    expire_due()
    session_id = ctx.session_id
    query = PendingConfirmation.objects.filter(principal=ctx.token.owner, session_id=session_id)
    if args.state:
        query = query.filter(state=args.state)
    items = list(query.order_by("-created_at")[: LIST_LIMIT + 1]) if session_id else []
    answer: dict[str, Any] = {
        "confirmations": [
            {
                "pending_id": str(c.id),
                "memorable_id": c.memorable_id,
                "tool": c.tool,
                "project": c.project,
                "state": c.state,
                "created_at": c.created_at.isoformat(),
                "expires_at": c.expires_at.isoformat(),
            }
            for c in items[:LIST_LIMIT]
        ]
    }
    if len(items) > LIST_LIMIT:
        answer["truncated"] = f"only the newest {LIST_LIMIT} are listed; filter by state for others"
    return answer


def _uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
