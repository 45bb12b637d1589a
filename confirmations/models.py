"""Pending confirmations and recovery contracts, with their state machines (DESIGN section 9).

Both state machines are declared here as tables and enforced in one place each
(`PendingConfirmation.check_transition`, `Contract.check_transition`); the services move records only
through them. A contract is the durable record of one approved mutation under reference 001: its
target identity, intent and snapshot are sealed (see `sealing`), its row and each of its state events
carry an HMAC bound to the store id, and a `TargetReservation` row (unique per target) keeps two
executions or rollbacks off the same target.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from caretaker.fingerprint import memorable_id
from confirmations.sealing import digest
from forge_core.canonical import canonical_json


class TransitionRefused(Exception):
    """A state change the state machine does not declare; nothing was changed."""


class ConfirmationState(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTED = "executed"
    FAILED = "failed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


CONFIRMATION_TRANSITIONS: dict[str, frozenset[str]] = {
    ConfirmationState.PENDING: frozenset(
        {ConfirmationState.APPROVED, ConfirmationState.DENIED, ConfirmationState.EXPIRED, ConfirmationState.CANCELLED}
    ),
    ConfirmationState.APPROVED: frozenset({ConfirmationState.EXECUTED, ConfirmationState.FAILED}),
}


class WithoutReviewedResult(models.Manager["PendingConfirmation"]):
    """Confirmations read without the bytes their preview made (a copy of the project file each): only the decision
    reads them (`defer(None)`)."""

    def get_queryset(self) -> models.QuerySet[PendingConfirmation]:
        return super().get_queryset().defer("reviewed_result")


class PendingConfirmation(models.Model):
    """A mutation a client asked for, suspended until an operator approves or denies it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tool = models.CharField(max_length=100, db_index=True)
    arguments = models.JSONField(default=dict)
    arguments_digest = models.CharField(max_length=64)
    question = models.TextField()
    options = models.JSONField(default=list)
    preview = models.JSONField(default=dict, help_text="What the operator sees: diff, findings, changed ids.")
    requires_typed_id = models.BooleanField(default=False)
    key_memorable_id = models.CharField(max_length=100, blank=True, help_text="Of the key involved, if any.")
    session_id = models.CharField(max_length=100, blank=True, db_index=True)
    principal = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    client_label = models.CharField(max_length=200, blank=True)
    project = models.CharField(max_length=100, blank=True, db_index=True)
    # What the executor will be asked to do once approved (through a capability adapter).
    capability = models.CharField(max_length=100)
    method = models.CharField(max_length=100)
    target = models.JSONField(default=dict)
    intent = models.JSONField(default=dict)
    base_fingerprint = models.CharField(max_length=64, blank=True, help_text="The target as the preview saw it.")
    result_digest = models.CharField(
        max_length=64, blank=True, help_text="The SHA-256 of the bytes the preview showed (the result to be written)."
    )
    label = models.CharField(max_length=200, blank=True)
    state = models.CharField(
        max_length=20, choices=ConfirmationState.choices, default=ConfirmationState.PENDING, db_index=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.JSONField(default=dict, blank=True, help_text="The result, or the refusal, once known.")
    # HMACs with a key kept outside the database (`sealing`): `seal` over what the operator reviews, made
    # when the confirmation is created; `decision_seal` over that and the approval, made when an operator
    # approves. The executor recomputes both, so a record edited after review does not execute.
    seal = models.CharField(max_length=64, blank=True)
    decision_seal = models.CharField(max_length=64, blank=True)
    # The bytes the preview made (the result to be written), kept while it is pending: the process that carries out
    # its approval writes them instead of applying the operations again, as the preview's process did (an apply and
    # a schema validation). Not sealed itself: the executor takes them only when their fingerprint is the sealed
    # `result_digest`, so bytes edited in the database are computed anew, and refused unless they come out as
    # reviewed. Emptied by the move out of pending; left out of every read but the decision's (`objects`).
    reviewed_result = models.BinaryField(default=b"", blank=True, editable=False)

    objects = WithoutReviewedResult()

    class Meta:
        ordering = ["-created_at"]
        permissions = [("decide_confirmation", "Can approve or deny pending confirmations")]
        indexes = [models.Index(fields=["state", "expires_at"])]

    def __str__(self) -> str:
        return f"{self.tool} ({self.memorable_id})"

    @property
    def memorable_id(self) -> str:
        return memorable_id(str(self.id))

    @staticmethod
    def check_transition(current: str, to: str) -> None:
        if to not in CONFIRMATION_TRANSITIONS.get(current, frozenset()):
            raise TransitionRefused(f"a confirmation cannot go from {current} to {to}")

    def review_parts(self) -> dict[str, Any]:
        """What an operator reviews and what would be carried out, as `seal` covers it: the operations and
        the preview by digest, the base and the result by fingerprint."""
        return {
            "confirmation": str(self.id),
            "tool": self.tool,
            "arguments_digest": self.arguments_digest,
            "question": self.question,
            "preview": digest(canonical_json(self.preview).encode()),
            "requires_typed_id": self.requires_typed_id,
            "key_memorable_id": self.key_memorable_id,
            "session_id": self.session_id,
            "principal": self.principal_id,
            "project": self.project,
            "capability": self.capability,
            "method": self.method,
            "target": digest(canonical_json(self.target).encode()),
            "operations": digest(canonical_json(self.intent).encode()),
            "base_fingerprint": self.base_fingerprint,
            "result_digest": self.result_digest,
            "expires_at": self.expires_at.isoformat(),
        }

    def decision_parts(self) -> dict[str, Any]:
        """What `decision_seal` covers: the reviewed record and who approved it when."""
        return {
            **self.review_parts(),
            "decision": "approved",
            "decided_by": self.decided_by_id,
            "decided_at": self.decided_at.isoformat() if self.decided_at else "",
        }


class ContractState(models.TextChoices):
    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    EXECUTING = "EXECUTING"
    VERIFIED = "VERIFIED"
    FAILED = "FAILED"
    EXPIRED = "EXPIRED"
    RECONCILIATION = "RECONCILIATION"
    ROLLING_BACK = "ROLLING_BACK"
    ROLLED_BACK = "ROLLED_BACK"
    ROLLBACK_FAILED = "ROLLBACK_FAILED"


S = ContractState
CONTRACT_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PREPARING: frozenset({S.PREPARED, S.FAILED}),
    S.PREPARED: frozenset({S.EXECUTING, S.EXPIRED}),
    S.EXECUTING: frozenset({S.VERIFIED, S.FAILED, S.RECONCILIATION}),
    S.VERIFIED: frozenset({S.ROLLING_BACK}),
    S.ROLLING_BACK: frozenset({S.ROLLED_BACK, S.ROLLBACK_FAILED, S.RECONCILIATION}),
}
# The only ways out of RECONCILIATION: an operator's conclusion, never the executor.
RESOLUTIONS: dict[str, str] = {
    "applied": S.VERIFIED,
    "not_applied": S.FAILED,
    "rolled_back_by_hand": S.ROLLED_BACK,
}
RESERVING_STATES = frozenset({S.EXECUTING, S.ROLLING_BACK, S.RECONCILIATION})
IN_FLIGHT_STATES = frozenset({S.EXECUTING, S.ROLLING_BACK})


class Contract(models.Model):
    """The recovery contract of one mutation (reference 001). Authenticated by `mac`; see `sealing`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    operation_id = models.UUIDField(unique=True, default=uuid.uuid4, editable=False)
    idempotency_digest = models.CharField(max_length=64, unique=True)
    confirmation = models.OneToOneField(
        PendingConfirmation, null=True, blank=True, on_delete=models.PROTECT, related_name="contract"
    )
    capability = models.CharField(max_length=100)
    target_kind = models.CharField(max_length=100)
    method = models.CharField(max_length=100)
    target_sealed = models.BinaryField()
    target_digest = models.CharField(max_length=64, db_index=True)
    precondition_fingerprint = models.CharField(max_length=64, blank=True)
    intent_sealed = models.BinaryField()
    intent_digest = models.CharField(max_length=64)
    snapshot_sealed = models.BinaryField(default=b"")
    snapshot_digest = models.CharField(max_length=64, blank=True)
    rollback_plan_version = models.PositiveSmallIntegerField(default=1)
    confirmation_digest = models.CharField(max_length=64, blank=True)
    expected_post_fingerprint = models.CharField(max_length=64, blank=True)
    post_fingerprint = models.CharField(max_length=64, blank=True, help_text="Sealed with VERIFIED.")
    label = models.CharField(max_length=200, blank=True)
    executor = models.CharField(max_length=200, blank=True, help_text="host:pid of the process executing it.")
    detail = models.CharField(max_length=200, blank=True, help_text="Why it is in its state (no values).")
    state = models.CharField(max_length=20, choices=ContractState.choices, default=S.PREPARING, db_index=True)
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    mac = models.CharField(max_length=64)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("resolve_contract", "Can roll back contracts and resolve reconciliations")]

    def __str__(self) -> str:
        return f"{self.label or self.capability} ({self.memorable_id})"

    @property
    def memorable_id(self) -> str:
        return memorable_id(str(self.id))

    @staticmethod
    def check_transition(current: str, to: str) -> None:
        if to not in CONTRACT_TRANSITIONS.get(current, frozenset()):
            raise TransitionRefused(f"a contract cannot go from {current} to {to}")

    def mac_parts(self) -> dict[str, Any]:
        """Everything the record's MAC covers: every field but the MAC, artifacts by digest."""
        return {
            "id": str(self.id),
            "operation_id": str(self.operation_id),
            "idempotency_digest": self.idempotency_digest,
            "confirmation": str(self.confirmation_id or ""),
            "capability": self.capability,
            "target_kind": self.target_kind,
            "method": self.method,
            "target_sealed": digest(bytes(self.target_sealed)),
            "target_digest": self.target_digest,
            "precondition_fingerprint": self.precondition_fingerprint,
            "intent_sealed": digest(bytes(self.intent_sealed)),
            "intent_digest": self.intent_digest,
            "snapshot_sealed": digest(bytes(self.snapshot_sealed)),
            "snapshot_digest": self.snapshot_digest,
            "rollback_plan_version": self.rollback_plan_version,
            "confirmation_digest": self.confirmation_digest,
            "expected_post_fingerprint": self.expected_post_fingerprint,
            "post_fingerprint": self.post_fingerprint,
            "label": self.label,
            "executor": self.executor,
            "detail": self.detail,
            "state": self.state,
            "version": self.version,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


class ContractEvent(models.Model):
    """One state transition of a contract: value-free, MAC-chained per contract (prev_mac -> mac)."""

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="events")
    version = models.PositiveIntegerField()
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20)
    at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    reason = models.CharField(max_length=200, blank=True)
    prev_mac = models.CharField(max_length=64)
    mac = models.CharField(max_length=64)

    class Meta:
        ordering = ["contract", "version"]
        constraints = [models.UniqueConstraint(fields=["contract", "version"], name="contract_event_version")]

    def mac_parts(self) -> dict[str, Any]:
        return {
            "contract": str(self.contract_id),
            "version": self.version,
            "from": self.from_state,
            "to": self.to_state,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "reason": self.reason,
            "prev_mac": self.prev_mac,
        }


class TargetReservation(models.Model):
    """At most one contract executes, rolls back or awaits reconciliation on a target at a time."""

    target_digest = models.CharField(max_length=64, primary_key=True)
    contract = models.OneToOneField(Contract, on_delete=models.PROTECT, related_name="reservation")
    reserved_at = models.DateTimeField()
