"""Pending confirmations: created by a write call, decided by an operator, carried out by the executor.

Every state change is one `do_<verb>_confirmation` function that checks the declared transition, writes
the audit row in the same transaction and, once committed, tells whoever waits through the channel layer:
the confirmation's own group (a write call waiting for its decision), and the console. Expiry is swept on
read (`expire_due`) and by the server's housekeeping thread; a decision on an expired item expires it and
refuses. Approval runs the executor at once, so the operator's request returns with the outcome.

The operator's other two decisions act on recovery contracts: `do_rollback_contract` and
`do_resolve_contract` check the resolve_contract permission and hand the contract to the executor, which
records the transitions; whatever they refuse is audited here, with the operator and the reason. The
console and the operator REST API call these, never the executor directly.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Field, Q, QuerySet
from django.db.models.signals import post_save
from django.utils import timezone

from audit.models import EventKind
from audit.together import audit_row
from caretaker.fingerprint import normalize_typed_id
from confirmations import executor, sealing
from confirmations.models import (
    RESOLUTIONS,
    ConfirmationState,
    Contract,
    ContractState,
    PendingConfirmation,
    TransitionRefused,
)
from forge_core import fastsql, rights
from forge_core.canonical import canonical_json
from forge_core.capabilities import sentence
from forge_core.errors import Refusal
from forge_core.live import notify_console, notify_streams, on_commit_first

C = ConfirmationState
DECIDE_PERMISSION = "confirmations.decide_confirmation"
RESOLVE_PERMISSION = "confirmations.resolve_contract"


def confirmation_group(confirmation_id: Any) -> str:
    """The channel-layer group a write call waiting for this confirmation listens on."""
    return f"confirmation.{confirmation_id}"


class DecisionRefused(Refusal):
    """A decision that cannot be made, nothing changed: `reason` is a slug, the code FORGE_ERR_ + it."""

    def __init__(self, reason: str, message: str, *, status: int = 409) -> None:
        super().__init__(f"FORGE_ERR_{reason.upper()}", message, status=status)
        self.reason = reason


def expiry_for(tool: str) -> timedelta:
    seconds = settings.FORGE_CONFIRM_EXPIRY_BY_TOOL.get(tool, settings.FORGE_CONFIRM_EXPIRY_SECONDS)
    return timedelta(seconds=seconds)


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The sha256 of the call's arguments in the service's canonical JSON, as the audit rows name them."""
    return hashlib.sha256(canonical_json(arguments).encode()).hexdigest()


def do_create_confirmation(
    *,
    tool: str,
    arguments: Mapping[str, Any],
    question: str,
    preview: Mapping[str, Any],
    principal: User,
    session_id: str,
    client_label: str,
    project: str,
    capability: str,
    method: str,
    target: Mapping[str, Any],
    intent: Mapping[str, Any],
    base_fingerprint: str,
    result_digest: str,
    label: str,
    requires_typed_id: bool = False,
    key_memorable_id: str = "",
    result: bytes = b"",
) -> PendingConfirmation:
    """Suspend a mutation until an operator decides; the console hears of it at once. The record is sealed
    as it is created: what the operator will review (question, preview, operations, the base and the
    result by fingerprint) cannot be changed afterwards without the approval being refused. `result`, the bytes
    the preview made, is kept while it is pending, for the process that carries out its approval."""
    confirmation = PendingConfirmation(
        tool=tool,
        arguments=dict(arguments),
        arguments_digest=arguments_digest(arguments),
        question=question,
        options=["approve", "deny"],
        preview=dict(preview),
        requires_typed_id=requires_typed_id,
        key_memorable_id=key_memorable_id,
        session_id=session_id,
        principal=principal,
        client_label=client_label,
        project=project,
        capability=capability,
        method=method,
        target=dict(target),
        intent=dict(intent),
        base_fingerprint=base_fingerprint,
        result_digest=result_digest,
        label=label[:200],
        expires_at=timezone.now() + expiry_for(tool),
        reviewed_result=result,
    )
    confirmation.seal = sealing.mac(confirmation.review_parts())
    confirmation.save(force_insert=True)
    _audit(confirmation, EventKind.CONFIRMATION_CREATED, "pending", called_by=principal.get_username())
    notify_console("confirmations")
    return confirmation


def _audit(confirmation: PendingConfirmation, kind: str, outcome: str, *, called_by: str) -> None:
    audit_row(
        kind=kind,
        tool=confirmation.tool,
        arguments={
            "confirmation": str(confirmation.id),
            "memorable_id": confirmation.memorable_id,
            "arguments_digest": confirmation.arguments_digest,
        },
        outcome=outcome,
        called_by=called_by,
        session=confirmation.session_id,
        client_label=confirmation.client_label,
        project=confirmation.project,
    )


def _announce(confirmation: PendingConfirmation) -> None:
    """Once committed: refresh the console, and give a waiting call the outcome it will answer with (only
    final states: "approved" would wake it for nothing)."""
    if confirmation.state not in (C.PENDING, C.APPROVED):
        group, outcome = confirmation_group(confirmation.id), outcome_of(confirmation)
        # First among the transaction's hooks: the waiting call answers with it, and the others (the project's
        # resource subscribers, the task's listeners) read the database before they send.
        on_commit_first(lambda: notify_streams(group, "confirmation.decided", outcome=outcome))
    notify_console("confirmations")


def _move(confirmation: PendingConfirmation, to: str, **changes: Any) -> PendingConfirmation:
    PendingConfirmation.check_transition(confirmation.state, to)
    if confirmation.state == C.PENDING:
        changes["reviewed_result"] = b""  # kept while it is pending only; read by the decision (`_locked`)
    confirmation.state = to
    for name, value in changes.items():
        setattr(confirmation, name, value)
    # Only what the move changes: the rest (the preview with its diff above all) is as it was sealed.
    fastsql.save_fields(confirmation, ("state", *changes))
    _announce(confirmation)
    return confirmation


# Every decision and every approval make these two reads: compiled once (`fastsql.PreparedRead`).
_locked_record = fastsql.PreparedRead(
    lambda confirmation_id: PendingConfirmation.objects.defer(None).select_for_update().filter(pk=confirmation_id),
    PendingConfirmation._meta.pk,
)
_with_who_asked_and_approved = fastsql.PreparedRead(
    lambda confirmation_id: PendingConfirmation.objects.select_related("principal", "decided_by").filter(
        pk=confirmation_id
    ),
    PendingConfirmation._meta.pk,
)


def _locked(confirmation_id: Any) -> PendingConfirmation:
    """The record locked, with the bytes its preview made while it is pending (`reviewed_result`)."""
    return _found(confirmation_id, _locked_record)


def _found(confirmation_id: Any, read: Callable[[Any], list[PendingConfirmation]] | None = None) -> PendingConfirmation:
    try:
        if read is None:
            return PendingConfirmation.objects.get(pk=confirmation_id)
        found = read(confirmation_id)
        if not found:
            raise PendingConfirmation.DoesNotExist()
        return found[0]
    except (PendingConfirmation.DoesNotExist, ValueError, TypeError, ValidationError):
        raise DecisionRefused(*NOT_FOUND, status=404) from None


def _expire_if_due(confirmation: PendingConfirmation, actor: str) -> bool:
    if confirmation.state != C.PENDING or confirmation.expires_at > timezone.now():
        return False
    _move(confirmation, C.EXPIRED, finished_at=timezone.now(), outcome=_refusal_outcome("expired"))
    _audit(confirmation, EventKind.CONFIRMATION_DECIDED, "expired", called_by=actor)
    return True


def expire_due(*, actor: str = "expiry") -> int:
    """Expire every pending confirmation past its time; each is audited and announced."""
    due = PendingConfirmation.objects.filter(state=C.PENDING, expires_at__lte=timezone.now()).values_list(
        "pk", flat=True
    )
    count = 0
    for pk in list(due[:500]):
        with transaction.atomic():
            count += _expire_if_due(PendingConfirmation.objects.select_for_update().get(pk=pk), actor)
    return count


def visible_to(user: User | AnonymousUser) -> QuerySet[PendingConfirmation]:
    """The confirmations `user` may see: those on projects it may view, and those on no project."""
    slugs = rights.visible_slugs(user)
    found = PendingConfirmation.objects.all()
    return found if slugs is None else found.filter(Q(project="") | Q(project__in=slugs))


def may_see(user: User | AnonymousUser, confirmation: PendingConfirmation) -> bool:
    return not confirmation.project or rights.can_view(user, confirmation.project)


def visible(user: User | AnonymousUser, confirmation_id: Any) -> PendingConfirmation:
    """The confirmation with this id if `user` may see it; "not found" alike for one it may not."""
    confirmation = _found(confirmation_id)
    if not may_see(user, confirmation):
        raise DecisionRefused(*NOT_FOUND, status=404)
    return confirmation


def extra_permission(confirmation: PendingConfirmation) -> str:
    """The permission its capability asks of who decides it, beside decide_confirmation ("" for none)."""
    try:
        return str(getattr(executor.capability(confirmation.capability), "decide_permission", "") or "")
    except executor.ExecutionRefused:
        return ""


def may_decide(user: User | AnonymousUser, confirmation: PendingConfirmation) -> bool:
    """Whether `user` may approve or deny it: decide_confirmation, approve_change on its project, and the
    permission its capability asks for (the caretaker's, for a certificate)."""
    extra = extra_permission(confirmation)
    return (
        user.has_perm(DECIDE_PERMISSION)
        and (not confirmation.project or rights.can_approve(user, confirmation.project))
        and (not extra or user.has_perm(extra))
    )


NOT_FOUND = ("not_found", "There is no such pending confirmation.")


def _decider_refusal(confirmation: PendingConfirmation, user: User, choice: str) -> DecisionRefused | None:
    """The refusal (audited) of a decision by a user who may not see the confirmation's project (refused as not
    found, as if it did not exist), who lacks decide_confirmation, or who may not approve changes to its
    project; None when the user may decide. The project's rights come from one read of it."""
    sees, approves = rights.view_and_approve(user, confirmation.project) if confirmation.project else (True, True)
    extra = extra_permission(confirmation)
    if not sees:
        outcome, refusal = "project not visible", DecisionRefused(*NOT_FOUND, status=404)
    elif not user.has_perm(DECIDE_PERMISSION):
        outcome, refusal = (
            "without permission",
            DecisionRefused(
                "permission_denied",
                "You may not decide confirmations; ask an administrator for the decide_confirmation permission.",
                status=403,
            ),
        )
    elif extra and not user.has_perm(extra):
        outcome, refusal = (
            f"without {extra}",
            DecisionRefused(
                "permission_denied",
                f"Only a caretaker may decide {confirmation.tool}: that needs the {extra} permission; ask an "
                "administrator.",
                status=403,
            ),
        )
    elif not approves:
        outcome, refusal = (
            "without approve_change",
            DecisionRefused(
                "permission_denied",
                f"You may not decide changes to project {confirmation.project}: that needs the approve_change "
                "permission on it; ask an administrator.",
                status=403,
            ),
        )
    else:
        return None
    _audit(confirmation, EventKind.CONFIRMATION_DECIDED, f"refused: {choice} {outcome}", called_by=user.get_username())
    return refusal


EXPIRED_REFUSAL = ("expired", "This confirmation expired before it was decided; the client must ask again.")


def _decide(
    confirmation_id: Any, user: User, choice: str, decide: Callable[[PendingConfirmation], None]
) -> PendingConfirmation:
    """Make one decision in one transaction: refused (nothing changed) unless the user may decide and the
    confirmation is pending; one past its time is expired (that stays) and the decision refused. A decision
    on one no longer pending (decided, cancelled) is refused and the attempt audited."""
    with transaction.atomic():
        confirmation = _locked(confirmation_id)
        # Who decides is checked on the locked record (no read before it); a refusal is audited in this
        # transaction, which then changes nothing else.
        refused = _decider_refusal(confirmation, user, choice)
        expired = refused is None and _expire_if_due(confirmation, user.get_username())
        settled = refused is None and not expired and confirmation.state != C.PENDING
        if settled:
            outcome = f"refused: {choice}, already {confirmation.state}"
            _audit(confirmation, EventKind.CONFIRMATION_DECIDED, outcome, called_by=user.get_username())
        elif refused is None and not expired:
            decide(confirmation)
    if refused is not None:
        raise refused
    if expired:
        raise DecisionRefused(*EXPIRED_REFUSAL, status=409)
    if settled:
        raise DecisionRefused(
            "already_decided", f"This confirmation was already decided: it is {confirmation.state}.", status=409
        )
    return confirmation


def do_deny_confirmation(confirmation_id: Any, *, acting_user: User, reason: str = "") -> PendingConfirmation:
    def deny(confirmation: PendingConfirmation) -> None:
        now = timezone.now()
        _move(
            confirmation,
            C.DENIED,
            decided_by=acting_user,
            decided_at=now,
            finished_at=now,
            outcome=_refusal_outcome("denied", operator_note=reason[:500]),
        )
        _audit(confirmation, EventKind.CONFIRMATION_DECIDED, "denied", called_by=acting_user.get_username())

    return _decide(confirmation_id, acting_user, "deny", deny)


def do_approve_confirmation(confirmation_id: Any, *, acting_user: User, typed_id: str = "") -> PendingConfirmation:
    """Approve, then carry the mutation out through the executor; returns the confirmation executed or
    failed (with its outcome). Refused, with nothing changed, when not pending, expired or not allowed."""

    def approve(confirmation: PendingConfirmation) -> None:
        require_authentic(confirmation)
        if confirmation.requires_typed_id and normalize_typed_id(typed_id) != (
            confirmation.key_memorable_id or confirmation.memorable_id
        ):
            raise DecisionRefused(
                "typed_id_mismatch",
                "Type the memorable ID shown with the confirmation exactly to approve it.",
                status=400,
            )
        confirmation.decided_by, confirmation.decided_at = acting_user, timezone.now()
        decision_seal = sealing.mac(confirmation.decision_parts())
        previewed = bytes(confirmation.reviewed_result)  # read with the locked record; the move empties it
        _move(
            confirmation,
            C.APPROVED,
            decided_by=acting_user,
            decided_at=confirmation.decided_at,
            decision_seal=decision_seal,
        )
        # Kept on this object only, for the executor (`_carry_out`).
        confirmation.previewed = previewed  # type: ignore[attr-defined]
        _audit(confirmation, EventKind.CONFIRMATION_DECIDED, "approved", called_by=acting_user.get_username())

    try:
        confirmation = _decide(confirmation_id, acting_user, "approve", approve)
    except DecisionRefused as refusal:
        if refusal.reason == "integrity":
            with transaction.atomic():
                _audit(
                    _found(confirmation_id),
                    EventKind.CONFIRMATION_DECIDED,
                    "refused: integrity",
                    called_by=acting_user.get_username(),
                )
        raise
    return _carry_out(confirmation, acting_user.get_username())


INTEGRITY_MESSAGE = (
    "This confirmation's record no longer matches what was sealed when it was made (it was edited outside Forge), "
    "so it cannot be approved; deny it, and compare the database with a backup."
)


def is_authentic(confirmation: PendingConfirmation) -> bool:
    """Whether the record still holds what was sealed when it was made: what the console shows is what the
    client proposed, and what approval would carry out."""
    try:
        sealing.check_mac(confirmation.review_parts(), confirmation.seal, f"confirmation {confirmation.id}")
    except sealing.ContractTampered:
        return False
    return True


def require_authentic(confirmation: PendingConfirmation) -> None:
    if not is_authentic(confirmation):
        raise DecisionRefused("integrity", INTEGRITY_MESSAGE, status=409)


def _approved_as_sealed(confirmation: PendingConfirmation) -> PendingConfirmation | None:
    """The approved record read again, if it still holds exactly what the operator reviewed and approved;
    None when anything under the decision's seal was changed since."""
    # With who asked and who approved: the approval's answer names them.
    stored = _found(confirmation.pk, _with_who_asked_and_approved)
    try:
        sealing.check_mac(stored.decision_parts(), stored.decision_seal, f"the approval of {stored.id}")
    except sealing.ContractTampered:
        return None
    return stored


def _carry_out(confirmation: PendingConfirmation, actor: str) -> PendingConfirmation:
    """Hand the approved change to the executor exactly as it was sealed: the record is read again and its
    decision seal checked, and the executor refuses a result whose bytes differ from the ones previewed. The bytes
    the preview made (`previewed`, read with the record the decision locked) are offered to the executor, which
    writes them only when their fingerprint is the sealed one (`executor.prepare`'s `reviewed_result`)."""
    previewed = getattr(confirmation, "previewed", b"")
    sealed = _approved_as_sealed(confirmation)
    if sealed is None:
        return _finish(confirmation, None, refusal_reason="integrity")
    confirmation = sealed
    approval = {
        "authority": "forge-console",
        "approver": actor,
        "confirmation": str(confirmation.id),
        "decided_at": confirmation.decided_at.isoformat() if confirmation.decided_at else "",
    }
    executed: list[PendingConfirmation] = []
    try:
        with executor.one_change(confirmation.capability):
            contract = executor.prepare(
                capability_name=confirmation.capability,
                method=confirmation.method,
                target=confirmation.target,
                intent=confirmation.intent,
                idempotency_key=f"confirmation:{confirmation.id}",
                approval=approval,
                actor=actor,
                label=confirmation.label,
                expected_fingerprint=confirmation.base_fingerprint,
                expected_result=confirmation.result_digest,
                reviewed_result=previewed or None,
                confirmation=confirmation,
            )
            contract = executor.execute(
                contract,
                actor=actor,
                on_verified=lambda verified, settled: executed.append(_executed(confirmation, verified, settled)),
            )
    except executor.ExecutionRefused as refusal:
        left = Contract.objects.filter(confirmation=confirmation).first()
        return _finish(confirmation, left, refusal_reason=refusal.reason, message=refusal.clause)
    except sealing.ContractTampered:
        # The contract record no longer authenticates: nothing more is done with it, and the client is
        # told to go through an operator (the console shows the contract as tampered).
        left = Contract.objects.filter(confirmation=confirmation).first()
        return _finish(confirmation, left, refusal_reason="reconciliation")
    if contract.state == ContractState.VERIFIED and executed:
        # The record as the VERIFIED transaction wrote it, which has committed: no need to read it again.
        return executed[0]
    return _finish(confirmation, contract)


def _update_if_approved(confirmation_id: Any, changes: Mapping[str, Any]) -> bool:
    """`PendingConfirmation.objects.filter(pk=..., state=approved).update(**changes)`, as the one statement it makes
    written out here, with the values the ORM's update sends: compiling the update at each approval cost more than
    its round trip. Whether it moved the record."""
    fields = [field for name in changes if isinstance(field := PendingConfirmation._meta.get_field(name), Field)]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    table = quote(PendingConfirmation._meta.db_table)
    key, state = quote(PendingConfirmation._meta.pk.column), quote(PendingConfirmation._meta.get_field("state").column)
    values = [field.get_db_prep_save(changes[field.name], connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {assignments} WHERE {key} = %s AND {state} = %s",
            [*values, PendingConfirmation._meta.pk.get_db_prep_value(confirmation_id, connection), C.APPROVED],
        )
        return bool(cursor.rowcount == 1)


def _executed(confirmation: PendingConfirmation, contract: Contract, settled: Mapping[str, Any]) -> PendingConfirmation:
    """Inside the contract's VERIFIED transaction: the confirmation is executed, with its result. The move is
    checked against its state as stored (a recovery may have settled it meanwhile): one UPDATE that moves it only
    from approved, which on PostgreSQL waits for a concurrent move's lock and then sees its state; the rest is the
    record in hand, the approved one whose decision seal was checked, returned with the contract it was carried out
    under."""
    executed = copy.copy(confirmation)
    PendingConfirmation.contract.related.set_cached_value(executed, contract)
    outcome = {
        "state": C.EXECUTED,
        "result": {
            **executed.preview.get("result", {}),
            **settled,
            "contract": str(contract.id),
            "contract_memorable_id": contract.memorable_id,
        },
    }
    changes = {"state": C.EXECUTED, "finished_at": timezone.now(), "outcome": outcome}
    if not _update_if_approved(confirmation.pk, changes):
        # Refused as `_move` refuses it (only the refusal reads the state it found).
        stored = PendingConfirmation.objects.filter(pk=confirmation.pk)
        PendingConfirmation.check_transition(stored.values_list("state", flat=True).get(), C.EXECUTED)
        raise TransitionRefused(f"confirmation {confirmation.id} left approved while it was executed")
    for name, value in changes.items():
        setattr(executed, name, value)
    # What `_move`'s save would send, which an UPDATE does not: the approval task announces the outcome on it.
    post_save.send(
        sender=PendingConfirmation,
        instance=executed,
        created=False,
        update_fields=frozenset(changes),
        raw=False,
        using=connection.alias,
    )
    _announce(executed)
    _audit(executed, EventKind.CONFIRMATION_DECIDED, C.EXECUTED, called_by="executor")
    return executed


def _finish(
    confirmation: PendingConfirmation,
    contract: Contract | None,
    *,
    refusal_reason: str = "",
    message: str = "",
) -> PendingConfirmation:
    """Record what the executor did as the confirmation's outcome when it did not succeed (or, after a
    restart, whatever it did): executed, or failed and why."""
    if contract is not None and contract.state == ContractState.VERIFIED:
        with transaction.atomic():
            if _locked(confirmation.pk).state == C.APPROVED:
                _executed(confirmation, contract, {})
        return _found(confirmation.pk)
    reason = refusal_reason or (contract.detail if contract is not None else "not_carried_out")
    in_reconciliation = contract is not None and contract.state == ContractState.RECONCILIATION
    outcome = _refusal_outcome("reconciliation" if in_reconciliation else reason, message=message, contract=contract)
    to = C.FAILED
    with transaction.atomic():
        locked = _locked(confirmation.pk)
        if locked.state != C.APPROVED:
            return locked
        _move(locked, to, finished_at=timezone.now(), outcome=outcome)
        _audit(locked, EventKind.CONFIRMATION_DECIDED, to, called_by="executor")
    return locked


REFUSALS = {
    "denied": (
        "FORGE_ERR_CONFIRMATION_DENIED",
        "An operator denied this change; nothing was written. Read the project again and propose something else.",
    ),
    "expired": (
        "FORGE_ERR_CONFIRMATION_EXPIRED",
        "Nobody decided this change in time; nothing was written. Call the write tool again if it is still wanted.",
    ),
    "target_drift": (
        "FORGE_ERR_TARGET_DRIFT",
        "The project changed after this change was previewed, so it was not written. Read the project again "
        "and propose the change anew.",
    ),
    "integrity": (
        "FORGE_ERR_INTEGRITY",
        "The stored change no longer matches what the operator reviewed (it was edited outside Forge), so nothing "
        "was written. Read the project again and propose the change anew; an operator should check the database.",
    ),
    "reconciliation": (
        "FORGE_ERR_RECONCILIATION",
        "The outcome of the write could not be proven; an operator must reconcile it in the console before "
        "the project can be changed again.",
    ),
    "interrupted": (
        "FORGE_ERR_CONFIRMATION_EXPIRED",
        "The server stopped before this approved change was carried out; nothing was written. Call the "
        "write tool again if it is still wanted.",
    ),
    "target_busy": (
        "FORGE_ERR_RECONCILIATION",
        "Another change holds this project (awaiting reconciliation or still running); nothing was written. "
        "Ask an operator to resolve it, then propose the change again.",
    ),
}
DEFAULT_REFUSAL = (
    "FORGE_ERR_INVALID_OPERATION",
    "The change could not be carried out; nothing was written. Read the project again and propose it anew.",
)


def _refusal_outcome(
    reason: str, *, message: str = "", contract: Contract | None = None, **extra: Any
) -> dict[str, Any]:
    code, text = REFUSALS.get(reason, DEFAULT_REFUSAL)
    outcome: dict[str, Any] = {"error": code, "message": text, "reason": reason, **extra}
    if message and reason not in REFUSALS:
        outcome["message"] = f"{message}. {text}"
    if contract is not None:
        outcome["contract"] = str(contract.id)
        outcome["contract_memorable_id"] = contract.memorable_id
    return outcome


# Why a pending confirmation was cancelled, as its outcome tells the client (code FORGE_ERR_CONFIRMATION_CANCELLED,
# reason "cancelled", the cause beside it) and its audit row names it ("cancelled: <cause>").
CANCELLATIONS = {
    "session_ended": "The session that asked for this change ended before it was decided; nothing was written.",
    "token_revoked": "The client token that asked for this change was revoked before it was decided; nothing was "
    "written. Ask an operator for a new token.",
    "grant_revoked": "An operator revoked this session's access to the project before the change was decided; "
    "nothing was written. Call any tool on the project to ask for access again.",
    "mcp_disabled": "MCP was switched off before this change was decided; nothing was written. Propose it again "
    "once an operator switches MCP back on.",
    "client_cancelled": "The client cancelled the request that asked for this change (notifications/cancelled) "
    "before it was decided; nothing was written.",
    "task_cancelled": "The client cancelled the task that stood for this change (tasks/cancel) before it was "
    "decided; nothing was written.",
}


def do_cancel_confirmations(
    cause: str,
    *,
    sessions: Iterable[str] | None,
    project: str | None = None,
    pending_id: str | None = None,
    acting_user: str,
) -> int:
    """Cancel the pending confirmations of these sessions (every session's, given None), on one project or on
    all: their principal lost its standing (`cause`, a key of CANCELLATIONS). Each is audited and its waiting
    client told; runs inside the caller's transaction when there is one."""
    outcome = {
        "error": "FORGE_ERR_CONFIRMATION_CANCELLED",
        "message": CANCELLATIONS[cause],
        "reason": "cancelled",
        "cause": cause,
    }
    pending = PendingConfirmation.objects.select_for_update().filter(state=C.PENDING)
    if sessions is not None:
        pending = pending.filter(session_id__in=sessions)
    if project is not None:
        pending = pending.filter(project=project)
    if pending_id is not None:
        pending = pending.filter(pk=pending_id)
    count = 0
    with transaction.atomic():
        for confirmation in pending:
            _move(confirmation, C.CANCELLED, finished_at=timezone.now(), outcome=outcome)
            _audit(confirmation, EventKind.CONFIRMATION_DECIDED, f"cancelled: {cause}", called_by=acting_user)
            count += 1
    return count


def recover(*, actor: str = "recovery") -> list[Contract]:
    """At start-up: hand interrupted contracts to reconciliation, and settle approved confirmations whose
    contract will not run any more (the process approving them ended mid-way)."""
    moved = executor.recover_interrupted(actor=actor)
    for confirmation in PendingConfirmation.objects.filter(state=C.APPROVED):
        contract = Contract.objects.filter(confirmation=confirmation).first()
        if (
            contract is None
            and confirmation.decided_at
            and confirmation.decided_at > timezone.now() - timedelta(seconds=settings.FORGE_EXECUTOR_LEASE_SECONDS)
        ):
            continue  # approved moments ago by a process that may still be preparing it
        if contract is not None and contract.state in (
            ContractState.PREPARING,
            ContractState.PREPARED,
            ContractState.EXECUTING,
            ContractState.ROLLING_BACK,
        ):
            continue  # still in flight in a live process
        _finish(confirmation, contract, refusal_reason="" if contract else "interrupted")
    return moved


def outcome_of(confirmation: PendingConfirmation) -> dict[str, Any]:
    """What editor.confirm answers: the result once executed, the refusal once failed, or still pending."""
    base = {
        "pending_id": str(confirmation.id),
        "memorable_id": confirmation.memorable_id,
        "tool": confirmation.tool,
        "state": confirmation.state,
    }
    if confirmation.state in (C.PENDING, C.APPROVED):
        return {**base, "expires_at": confirmation.expires_at.isoformat()}
    return {**base, **confirmation.outcome, "state": confirmation.state}


# --- operators' decisions on contracts: rollback and reconciliation -------------------------------

EVIDENCE_FINDINGS = {
    "before": "The target matches what it was before the contract ran: the change is not in it.",
    "result": "The target matches the intended result: the change is in it.",
    "neither": "The target matches neither what it was before nor the intended result: something else changed it, "
    "or the write was partial.",
    "unreadable": "The target cannot be read now (missing, moved or unreadable).",
}


def contract_by_id(contract_id: Any) -> Contract:
    """The contract with this id, as stored (not authenticated: `executor.load` does that)."""
    try:
        return Contract.objects.select_related("confirmation").get(pk=contract_id)
    except (Contract.DoesNotExist, ValueError, TypeError, ValidationError):
        raise DecisionRefused("not_found", "There is no such contract.", status=404) from None


def tampered_refusal(exc: sealing.ContractTampered) -> DecisionRefused:
    return DecisionRefused(
        "contract_tampered",
        f"{sentence(str(exc))} Nothing can be done with it here: compare the database with a backup and check "
        "the target by hand.",
        status=409,
    )


def reconciles(contract: Contract) -> str:
    """What a contract in RECONCILIATION is unsure of, as `executor.resolve` reads it: "rollback" when it was
    VERIFIED once (its result sealed), so its rollback was interrupted; "change" otherwise."""
    return "rollback" if contract.post_fingerprint else "change"


def conclusions(contract: Contract) -> dict[str, str]:
    """The state each conclusion leads a contract in RECONCILIATION to (as `executor.resolve` decides): for a
    rollback, "applied" means the rollback took effect and "not applied" returns the contract to VERIFIED."""
    if reconciles(contract) == "rollback":
        return {
            "applied": ContractState.ROLLED_BACK,
            "not_applied": ContractState.VERIFIED,
            "rolled_back_by_hand": ContractState.ROLLED_BACK,
        }
    return dict(RESOLUTIONS)


def reconciliation_evidence(contract: Contract) -> dict[str, Any]:
    """What the target looks like now next to the contract's fingerprints, with a sentence that says so,
    what is being reconciled (the change, or its rollback) and where each conclusion leads."""
    found = executor.evidence(contract)
    if found["matches_before"]:
        finding = "before"
    elif found["matches_result"]:
        finding = "result"
    else:
        finding = "neither" if found["current_fingerprint"] else "unreadable"
    return {
        **found,
        "finding": finding,
        "text": EVIDENCE_FINDINGS[finding],
        "reconciles": reconciles(contract),
        "conclusions": conclusions(contract),
    }


def do_rollback_contract(contract_id: Any, *, acting_user: User, typed_id: str) -> Contract:
    """Roll a VERIFIED contract back (the operator typed its memorable ID). Returns the contract as the
    rollback left it (ROLLED_BACK, or ROLLBACK_FAILED / RECONCILIATION when it went wrong midway); refused
    with nothing changed (and audited) without the permission, on a typed-ID mismatch, in another state,
    or when the target drifted since the contract was carried out."""
    return _act_on_contract(
        contract_id,
        acting_user,
        "rollback",
        lambda contract: executor.rollback(contract, actor=acting_user.get_username(), typed_id=typed_id),
    )


def do_resolve_contract(contract_id: Any, *, acting_user: User, conclusion: str) -> Contract:
    """An operator's conclusion on a contract in RECONCILIATION: "applied", "not_applied" or
    "rolled_back_by_hand" (RESOLUTIONS). Refused with nothing changed (and audited) otherwise."""
    return _act_on_contract(
        contract_id,
        acting_user,
        f"resolve {conclusion}"[:60],
        lambda contract: executor.resolve(contract, conclusion, actor=acting_user.get_username()),
    )


def _act_on_contract(contract_id: Any, user: User, action: str, act: Callable[[Contract], Contract]) -> Contract:
    contract = contract_by_id(contract_id)
    refusal: Refusal
    if not user.has_perm(RESOLVE_PERMISSION):
        refusal = DecisionRefused(
            "permission_denied",
            "You may not roll back contracts or resolve reconciliations; ask an administrator for the "
            "resolve_contract permission.",
            status=403,
        )
        outcome = f"refused: {action} without permission"
    else:
        try:
            done = act(contract)
        except executor.ExecutionRefused as exc:
            refusal = exc
        except sealing.ContractTampered as exc:
            refusal = tampered_refusal(exc)
        else:
            notify_console("contracts")
            return done
        outcome = f"refused: {action}, {refusal.code.removeprefix('FORGE_ERR_').lower()}"
    # The executor's refusals change nothing, so they leave no contract event: the audit row says an
    # operator tried, and why it was refused.
    with transaction.atomic():
        executor.record_contract_event(contract, {"state": contract.state}, outcome=outcome, actor=user.get_username())
    raise refusal
