"""Approvals every client can follow: the forms a governed call's answer takes, by what the client declared.

A governed call (a `project.write.*` tool, a `team.*` mutation) never runs at once: it makes a pending
confirmation that an operator decides in the console. How the client hears of it depends on the client:

- one that declared nothing gets `FORGE_ERR_CONFIRMATION_REQUIRED` with a `pending_id` and asks again with
  `editor.confirm` (the universal fallback; every newer form below is offered only on top of it);
- one that declared the Tasks extension gets a task: at 2025-11-25 when its `tools/call` carries `task`, at
  2026-07-28 when its request's capabilities name `io.modelcontextprotocol/tasks`. The task is an
  `ApprovalTask` row committed with the confirmation before the answer, bound to the principal (another
  principal's task id is "not found"); its status is read from the confirmation; `tasks/get`, `tasks/cancel`,
  and at 2025-11-25 `tasks/list` and `tasks/result` (2026-07-28 removed both) follow it; once the operator
  decides (or it expires), a status notification goes to the session's streams or, at 2026-07-28, to the
  `subscriptions/listen` streams that named the task in their `taskIds`;
- a 2026-07-28 client that declared URL-mode elicitation (and not the Tasks extension) gets an `input_required`
  result carrying one URL elicitation, the confirmation's console page, and a request state sealed by the
  server (HMAC over the principal, the confirmation, the tool and the digest of the arguments). The retry of
  the same call with that state answers the outcome once decided, the same `input_required` while pending, and
  a refusal when the state is forged, stale, another principal's or the arguments differ. Opening the URL
  decides nothing: only an operator's decision in the console does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models.signals import post_save
from django.utils import timezone

from access.models import session_group
from audit.models import EventKind
from audit.services import record
from confirmations.models import CONFIRMATION_TRANSITIONS, ConfirmationState, PendingConfirmation
from confirmations.services import do_cancel_confirmations, expire_due, outcome_of
from forge_core.canonical import canonical_json
from forge_core.errors import Refusal
from forge_core.live import notify_streams
from mcp_api import request_state
from mcp_api.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError, encode
from mcp_api.models import ApprovalTask
from mcp_api.registry import Tool
from mcp_api.results import console_url, outcome_tool_result
from mcp_api.revisions import STATELESS_REVISIONS, SUBSCRIPTION_ID_META_KEY

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext

C = ConfirmationState
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_REVISION = "2025-11-25"  # the revision whose core had tasks (experimental); 2026-07-28 has the extension
TASK_REVISIONS = frozenset({TASK_REVISION, *STATELESS_REVISIONS})
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}  # declared at 2025-11-25
EXTENSIONS: dict[str, Any] = {TASKS_EXTENSION: {}}  # declared at 2026-07-28 (server/discover)

DEFAULT_TTL_MS = 60 * 60 * 1000
MAX_TTL_MS = 24 * 60 * 60 * 1000
# An operator decides in seconds or minutes, not milliseconds: a tighter poll only costs the server.
POLL_INTERVAL_MS = 2000
WORKING_STATES = tuple(CONFIRMATION_TRANSITIONS)  # a task is "working" while its confirmation can still move
PURGE_BATCH = 500
MAX_LISTENED_TASKS = 100  # task ids one subscriptions/listen may name
LIST_PAGE = 50
STATE_VERSION = "frs1"
MAX_STATE_CHARS = 2000
APPROVAL_INPUT_KEY = "operator_approval"


# --- which form a call's answer takes ------------------------------------------------------------


@dataclass(frozen=True)
class Form:
    """How this call's answer reaches the client if the call suspends into a confirmation."""

    kind: str  # "pending" | "task" | "input_required"
    ttl_ms: int = DEFAULT_TTL_MS
    request_state: str | None = None  # the sealed state an input_required retry carries back


PENDING = Form("pending")


def declares_tasks(ctx: CallContext) -> bool:
    """Whether a 2026-07-28 request declared the Tasks extension in its capabilities."""
    extensions = ctx.client_capabilities.get("extensions")
    return ctx.stateless and isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def declares_url_elicitation(ctx: CallContext) -> bool:
    elicitation = ctx.client_capabilities.get("elicitation")
    return ctx.stateless and isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def form_for(ctx: CallContext, params: dict[str, Any]) -> Form:
    """The form this client asked for, by what it declared (DESIGN: newer forms only on top of the fallback)."""
    requested = params.get("task")
    if ctx.revision == TASK_REVISION and isinstance(requested, dict):
        ttl = requested.get("ttl")
        return Form("task", ttl_ms=ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else DEFAULT_TTL_MS)
    if declares_tasks(ctx):
        return Form("task")
    # A retry carrying a request state is the retry of an input_required answer, whatever it declares now.
    state = params.get("requestState") if ctx.stateless else None
    if declares_url_elicitation(ctx) or state is not None:
        return Form("input_required", request_state=state)
    return Form("pending")


def answer_suspended(ctx: CallContext, form: Form, tool: Tool, arguments: dict[str, Any], answer: dict[str, Any]):
    """The answer of a call that just made a pending confirmation (`ctx.awaiting`), in the client's form. Runs in
    the call's transaction, so a task commits with the confirmation and the audit row, before the answer."""
    if ctx.awaiting is None or form.kind == "pending":
        return answer
    confirmation = PendingConfirmation.objects.get(pk=ctx.awaiting)
    ctx.awaiting = None  # the client follows the decision in its own form: no stream waits for it
    if form.kind == "task":
        return create_task(ctx, confirmation, form.ttl_ms)
    return input_required(ctx, confirmation, tool.name, arguments)


# --- tasks --------------------------------------------------------------------------------------------------


def create_task(ctx: CallContext, confirmation: PendingConfirmation, ttl_ms: int) -> dict[str, Any]:
    lifetime_ms = int((confirmation.expires_at - timezone.now()).total_seconds() * 1000)
    task = ApprovalTask.objects.create(
        principal=ctx.token.owner,
        token=ctx.token,
        session_id=ctx.session_id,
        confirmation=confirmation,
        revision=ctx.revision,
        ttl_ms=min(max(ttl_ms, lifetime_ms, 0), MAX_TTL_MS),
    )
    task.confirmation = confirmation
    fields = task_fields(task, stateless=ctx.stateless)
    return {"resultType": "task", **fields} if ctx.stateless else {"task": fields}


def _status(confirmation: PendingConfirmation) -> tuple[str, str]:
    state = confirmation.state
    if state in WORKING_STATES:  # the one place that says which states are working (purge_expired keeps these)
        if state == C.PENDING:
            return "working", (
                f"Waiting for an operator's decision in the Forge console ({console_url(confirmation.id)}); it "
                f"expires at {confirmation.expires_at.isoformat()}."
            )
        return "working", "Approved by an operator; the change is being carried out."
    message = str(confirmation.outcome.get("message", ""))
    if state == C.CANCELLED:
        return "cancelled", message
    # A denial, an expiry or a failed execution is the tool's own error result (isError), not a protocol fault.
    return "completed", message or "Carried out after an operator approved it."


def _last_updated(confirmation: PendingConfirmation, task: ApprovalTask) -> datetime:
    return confirmation.finished_at or confirmation.decided_at or task.created_at


def task_fields(task: ApprovalTask, *, stateless: bool, detailed: bool = False) -> dict[str, Any]:
    """The task as the wire carries it at either revision; `detailed` (2026-07-28's tasks/get and notification)
    inlines the result once completed."""
    confirmation = task.confirmation
    status, message = _status(confirmation)
    fields: dict[str, Any] = {
        "taskId": str(task.id),
        "status": status,
        "statusMessage": message,
        "createdAt": task.created_at.isoformat(),
        "lastUpdatedAt": _last_updated(confirmation, task).isoformat(),
    }
    if stateless:
        fields.update(ttlMs=task.ttl_ms, pollIntervalMs=POLL_INTERVAL_MS)
    else:
        fields.update(ttl=task.ttl_ms, pollInterval=POLL_INTERVAL_MS)
    if detailed and status == "completed":
        fields["result"] = outcome_tool_result(outcome_of(confirmation))
    return fields


def _offered(ctx: CallContext, method: str, *, stateless_too: bool = True, handshake_too: bool = True) -> None:
    offered = ctx.revision in TASK_REVISIONS and (stateless_too or not ctx.stateless)
    offered = offered and (handshake_too or ctx.stateless)
    if not offered:
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method {method!r} is not offered at revision {ctx.revision}: tasks are offered at 2025-11-25 "
            "(tasks/get, tasks/list, tasks/result, tasks/cancel) and, with the Tasks extension, at 2026-07-28 "
            "(tasks/get, tasks/update, tasks/cancel).",
        )
    if ctx.stateless and not declares_tasks(ctx):
        raise RpcError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"{method} needs the Tasks extension: declare {TASKS_EXTENSION!r} under extensions in the request's "
            "client capabilities.",
            {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


def _refuse(ctx: CallContext, method: str, task_id: Any, reason: str, message: str) -> RpcError:
    """Audit a refused task request (the attempt stays on the record) and give the error to raise."""
    record(
        EventKind.REQUEST_REFUSED,
        tool=method,
        arguments={"taskId": str(task_id)[:64]},
        outcome=f"refused: {reason}",
        called_by=ctx.called_by,
        session=ctx.session_id,
        client_label=ctx.token.label,
    )
    return RpcError(INVALID_PARAMS, message)


def _own_task(ctx: CallContext, params: dict[str, Any], method: str) -> ApprovalTask:
    """The caller's task named by params.taskId; another principal's, or none, is "not found" alike."""
    task_id = params.get("taskId")
    try:
        key = uuid.UUID(task_id) if isinstance(task_id, str) and len(task_id) <= 64 else None
    except ValueError:
        key = None
    task = (
        ApprovalTask.objects.select_related("confirmation").filter(pk=key, principal=ctx.token.owner).first()
        if key is not None
        else None
    )
    if task is None:
        raise _refuse(
            ctx,
            method,
            task_id,
            "task not found",
            f"{method}: no such task. Pass the taskId a tools/call answered you with (a finished task is kept for "
            "its ttl, then removed); tasks/list lists yours.",
        )
    return task


def tasks_get(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    _offered(ctx, "tasks/get")
    expire_due()
    task = _own_task(ctx, params, "tasks/get")
    return task_fields(task, stateless=ctx.stateless, detailed=ctx.stateless)


def tasks_list(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    """The caller's tasks, newest first, a page at a time (2025-11-25: 2026-07-28 removed it)."""
    _offered(ctx, "tasks/list", stateless_too=False)
    expire_due()
    offset = _page_offset(params.get("cursor"))
    found = list(
        ApprovalTask.objects.select_related("confirmation")
        .filter(principal=ctx.token.owner)
        .order_by("-created_at", "-id")[offset : offset + LIST_PAGE + 1]
    )
    page: dict[str, Any] = {"tasks": [task_fields(task, stateless=False) for task in found[:LIST_PAGE]]}
    if len(found) > LIST_PAGE:
        page["nextCursor"] = base64.urlsafe_b64encode(json.dumps({"tasks": offset + LIST_PAGE}).encode()).decode()
    return page


def _page_offset(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(str(cursor)[:200].encode()))["tasks"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        offset = None
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise RpcError(INVALID_PARAMS, "Invalid params: unknown cursor. Pass back a nextCursor from tasks/list.")
    return offset


def tasks_result(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    """The tool's result once the task is done (2025-11-25). An unfinished task is refused at once rather than
    held open: a person's decision may take minutes, and no request waits on one (DESIGN section 4)."""
    _offered(ctx, "tasks/result", stateless_too=False)
    expire_due()
    task = _own_task(ctx, params, "tasks/result")
    status, message = _status(task.confirmation)
    if status == "working":
        raise RpcError(
            INVALID_PARAMS,
            f"tasks/result: the task is still working ({message}). Poll tasks/get every "
            f"{POLL_INTERVAL_MS} ms or wait for notifications/tasks/status, then ask again.",
        )
    answer = outcome_tool_result(outcome_of(task.confirmation))
    answer["_meta"] = {RELATED_TASK_META_KEY: {"taskId": str(task.id)}}
    return answer


def tasks_update(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    """2026-07-28: an approval task asks the client for nothing, so there is no outstanding input request and
    every response is ignored (as the extension says of keys not outstanding); the task must be the caller's."""
    _offered(ctx, "tasks/update", handshake_too=False)
    _own_task(ctx, params, "tasks/update")
    return {}


def tasks_cancel(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    """Cancel the caller's task, and with it the pending confirmation (audited). A confirmation an operator has
    already decided cannot be cancelled: the refusal says what became of it."""
    _offered(ctx, "tasks/cancel")
    task = _own_task(ctx, params, "tasks/cancel")
    expire_due()
    # The refusal's audit row is written inside the transaction, which must close before the error is raised.
    with transaction.atomic():
        cancelled = do_cancel_confirmations(
            "task_cancelled", sessions=None, pending_id=str(task.confirmation_id), acting_user=ctx.called_by
        )
        task.confirmation.refresh_from_db()
        if not cancelled:
            state = task.confirmation.state
            already = "was already cancelled" if state == C.CANCELLED else f"was already decided: it is {state}"
            refusal = _refuse(
                ctx,
                "tasks/cancel",
                task.id,
                f"already {state}",
                f"tasks/cancel: this task cannot be cancelled; its confirmation {already}. tasks/get gives its "
                "outcome.",
            )
    if not cancelled:
        raise refusal
    return {} if ctx.stateless else task_fields(task, stateless=False)


def handlers() -> dict[str, Callable[[CallContext, dict[str, Any]], dict[str, Any]]]:
    """The task methods, for the method table."""
    return {
        "tasks/get": tasks_get,
        "tasks/list": tasks_list,
        "tasks/result": tasks_result,
        "tasks/update": tasks_update,
        "tasks/cancel": tasks_cancel,
    }


# --- status notifications -----------------------------------------------------------------------------------


def connect() -> None:
    post_save.connect(_confirmation_saved, sender=PendingConfirmation, dispatch_uid="mcp_api.tasks.confirmation")


def _confirmation_saved(
    sender: type[PendingConfirmation], instance: PendingConfirmation, created: bool, update_fields: Any, **kwargs: Any
) -> None:
    # Every decision (approval, denial, expiry, execution, failure, cancellation) moves the state through
    # `confirmations.services._move`, which saves exactly the fields it changed. An approval leaves the task
    # working (the execution's end follows at once), so only the final states are announced.
    if created or update_fields is None or "state" not in update_fields:
        return
    if instance.state in (C.PENDING, C.APPROVED):
        return
    confirmation_id = instance.pk
    transaction.on_commit(lambda: announce(confirmation_id))


def purge_expired(now: datetime | None = None) -> int:
    """Delete the tasks whose `ttl` has run out since they were made, once their confirmation is final (one still
    working is kept whatever its ttl), a batch at a time; returns how many. The ttl told the client how long the
    task and its result are kept; the confirmation and the audit log keep the history."""
    now = now or timezone.now()
    finished = ApprovalTask.objects.exclude(confirmation__state__in=WORKING_STATES)
    deleted = 0
    # No ttl is longer than MAX_TTL_MS: what was made before that is past its ttl, whichever it had.
    past_any_ttl = finished.filter(created_at__lt=now - timedelta(milliseconds=MAX_TTL_MS))
    while batch := list(past_any_ttl.values_list("pk", flat=True)[:PURGE_BATCH]):
        deleted += ApprovalTask.objects.filter(pk__in=batch).delete()[0]
    recent = finished.filter(created_at__lt=now).values_list("pk", "created_at", "ttl_ms")
    due = [pk for pk, created_at, ttl_ms in recent if created_at + timedelta(milliseconds=ttl_ms) <= now]
    for start in range(0, len(due), PURGE_BATCH):
        deleted += ApprovalTask.objects.filter(pk__in=due[start : start + PURGE_BATCH]).delete()[0]
    return deleted


def task_group(task_id: str) -> str:
    """The channel-layer group of the `subscriptions/listen` streams that named the task in their `taskIds`."""
    return f"mcp.task.{task_id}"


def listened_tasks(ctx: CallContext, wanted: Any) -> list[ApprovalTask]:
    """The tasks a 2026-07-28 `subscriptions/listen` names in `taskIds`, each the caller's own, in id order: an
    unknown id or another principal's is refused as tasks/get refuses it (audited), and the first refusal refuses
    the listen. The extension's status notifications go only to a listen that named the task, so one naming
    none hears none."""
    if wanted is None:
        return []
    _offered(ctx, "subscriptions/listen")
    if not isinstance(wanted, list) or not 0 < len(wanted) <= MAX_LISTENED_TASKS:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: taskIds is a list of 1 to {MAX_LISTENED_TASKS} task ids from your tools/call answers.",
        )
    own = (_own_task(ctx, {"taskId": task_id}, "subscriptions/listen") for task_id in wanted)
    return sorted({str(task.id): task for task in own}.values(), key=lambda task: str(task.id))


def _stateless_notification(task: ApprovalTask) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": task_fields(task, stateless=True, detailed=True),
    }


def finished_notice(task: ApprovalTask, subscription_id: Any) -> str | None:
    """The `notifications/tasks` a listen naming `task` starts with when the task has already finished (its status
    will not change again, so no later notification would tell the listener); None while it is working."""
    if _status(task.confirmation)[0] == "working":
        return None
    notification = _stateless_notification(task)
    notification["params"]["_meta"] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
    return encode(notification).decode()


def announce(confirmation_id: Any) -> int:
    """Send the task's new status to where its client listens: the session's streams (2025-11-25), or the
    `subscriptions/listen` streams that named the task (2026-07-28; each adds its own subscription id).
    Returns how many tasks were announced."""
    told = 0
    for task in ApprovalTask.objects.select_related("confirmation").filter(confirmation_id=confirmation_id):
        if task.revision in STATELESS_REVISIONS:
            message = _stateless_notification(task)
            notify_streams(task_group(str(task.id)), "mcp.task_status", json=encode(message).decode())
        elif task.session_id:
            message = {
                "jsonrpc": "2.0",
                "method": "notifications/tasks/status",
                "params": task_fields(task, stateless=False),
            }
            notify_streams(session_group(task.session_id), "mcp.message", json=encode(message).decode())
        else:
            continue
        told += 1
    return told


# --- input_required and its sealed request state ------------------------------------------------------------


def arguments_digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(arguments).encode()).hexdigest()


def _state_parts(ctx: CallContext, confirmation_id: str, tool: str, digest: str, expires: int) -> dict[str, Any]:
    return {
        "purpose": "mcp.request_state",
        "principal": ctx.token.owner_id,
        "confirmation": confirmation_id,
        "tool": tool,
        "arguments": digest,
        "expires": expires,
    }


def seal_request_state(ctx: CallContext, confirmation: PendingConfirmation, tool: str, arguments: dict) -> str:
    # Good for as long as the client may still want the outcome: the confirmation's life and a task's default TTL.
    expires = int((confirmation.expires_at + timedelta(milliseconds=DEFAULT_TTL_MS)).timestamp())
    return request_state.seal(
        STATE_VERSION, _state_parts(ctx, str(confirmation.id), tool, arguments_digest(arguments), expires)
    )


def input_required(ctx: CallContext, confirmation: PendingConfirmation, tool: str, arguments: dict) -> dict[str, Any]:
    typed = confirmation.key_memorable_id or confirmation.memorable_id
    message = (
        f"An operator must approve {tool} in the Forge console before it runs (memorable ID {typed}). This page "
        "shows the pending confirmation; opening it approves nothing. Retry the call once an operator decided."
    )
    return {
        "resultType": "input_required",
        "inputRequests": {
            APPROVAL_INPUT_KEY: {
                "method": "elicitation/create",
                "params": {"mode": "url", "message": message, "url": console_url(confirmation.id)},
            }
        },
        "requestState": seal_request_state(ctx, confirmation, tool, arguments),
    }


STATE_REFUSED = "FORGE_ERR_REQUEST_STATE_REFUSED"


def _state_refusal(why: str) -> Refusal:
    return Refusal(STATE_REFUSED, f"{why} Call the tool again without requestState to propose the change anew.")


def _opened_state(ctx: CallContext, state: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The request state's parts once it authenticates and binds this principal, tool and arguments."""
    keys = frozenset({"purpose", "principal", "confirmation", "tool", "arguments", "expires"})
    try:
        parts = request_state.unseal(STATE_VERSION, "mcp.request_state", state, keys, MAX_STATE_CHARS)
    except request_state.StateRefused as refused:
        if str(refused) == "changed":
            raise _state_refusal("This requestState does not authenticate: it was changed or forged.") from None
        raise _state_refusal("This requestState is not one this server issued.") from None
    if parts["principal"] != ctx.token.owner_id:
        raise _state_refusal("This requestState was issued to another client.")
    if parts["tool"] != tool or parts["arguments"] != arguments_digest(arguments):
        raise _state_refusal("This requestState was issued for another call: the tool or its arguments differ.")
    if not isinstance(parts["expires"], int) or parts["expires"] < timezone.now().timestamp():
        raise _state_refusal("This requestState is stale: the change it stood for is past keeping.")
    return parts


def resume(ctx: CallContext, tool: Tool, arguments: dict[str, Any], state: Any) -> dict[str, Any]:
    """The retry of an input_required call: its outcome once decided, the same input_required while pending."""
    parts = _opened_state(ctx, state, tool.name, arguments)
    expire_due()
    confirmation = PendingConfirmation.objects.filter(pk=parts["confirmation"], principal=ctx.token.owner).first()
    if confirmation is None:
        raise _state_refusal("The change this requestState stood for is gone.")
    ctx.audit_project = confirmation.project
    if confirmation.state in (C.PENDING, C.APPROVED):
        return input_required(ctx, confirmation, tool.name, arguments)
    return outcome_tool_result(outcome_of(confirmation))
