"""The one executor: every approved mutation is carried out here, under a recovery contract (reference 001).

The executor owns policy, durable acquisition, the authoritative re-read, the one write, verification
and the state record; a capability adapter (named in `FORGE_CAPABILITIES`, provided by the app that owns
the target) only projects a target's natural identity, reads it, computes the new content as a pure
function of the snapshot and the intent, writes it atomically and records the settled state. The
sequence for a forward mutation:

    prepare:  PREPARING (identity and intent sealed) -> read the target, refuse drift from what the
              operator saw, compute the result -> PREPARED (snapshot sealed, expected result fingerprint)
    execute:  PREPARED -> EXECUTING (target reserved) -> re-read, refuse drift -> write -> read back ->
              VERIFIED (post-forward fingerprint sealed, reservation released, target settled)

FAILED is entered only when no effect is proven (nothing was written, or a re-read shows the target as
it was); anything ambiguous (an interrupted write, a read-back that matches neither before nor after)
goes to RECONCILIATION, which keeps the target reserved until an operator concludes what happened. A
contract is never re-sent: at start-up every EXECUTING or ROLLING_BACK contract whose process is gone
moves to RECONCILIATION. Each transition is one transaction (compare state and version, update the
MAC-bound record, reserve or release the target, append the MAC-chained event and the audit row).

`step` callbacks mark the boundaries (before_write, after_temp_write, after_rename, before_verified);
the crash test stops a worker at each of them.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Field
from django.utils import timezone
from django.utils.module_loading import import_string

from audit.models import EventKind
from audit.together import audit_row, audited_together
from caretaker.fingerprint import normalize_typed_id
from confirmations import sealing
from confirmations.models import (
    IN_FLIGHT_STATES,
    RESERVING_STATES,
    RESOLUTIONS,
    Contract,
    ContractEvent,
    ContractState,
    PendingConfirmation,
    TargetReservation,
)
from forge_core import fastsql
from forge_core.capabilities import (
    Capability,
    ExecutionRefused,
    Step,
    TargetMissing,
    no_step,
)
from forge_core.execution import Outcome

logger = logging.getLogger("forge.executor")

S = ContractState
PREPARED_VALIDITY = timedelta(seconds=60)


class TargetBusy(ExecutionRefused):
    def __init__(self, holder: Contract) -> None:
        super().__init__(
            "target_busy",
            f"contract {holder.memorable_id} holds this target ({holder.state}); "
            + (
                "an operator must resolve its reconciliation first"
                if holder.state == S.RECONCILIATION
                else "try again when it has finished"
            ),
        )
        self.holder_state = holder.state


class _Expired(Exception):
    """A PREPARED contract found past its validity when it was to be executed (it moves to EXPIRED instead)."""


class StaleContract(ExecutionRefused):
    def __init__(self) -> None:
        super().__init__("stale", "the contract changed while this step was prepared; load it again")


@cache
def capability(name: str) -> Capability:
    path = settings.FORGE_CAPABILITIES.get(name)
    if path is None:
        raise ExecutionRefused("policy", f"no capability adapter is configured for {name!r}")
    return import_string(path)()


def authorize(capability_name: str, target_kind: str, method: str) -> Capability:
    """The adapter for an exact policy rule; anything not listed is refused (no prefixes, no wildcards)."""
    if (capability_name, target_kind, method) not in settings.FORGE_EXECUTOR_POLICY:
        raise ExecutionRefused(
            "policy", f"the executor policy has no rule for ({capability_name}, {target_kind}, {method})"
        )
    adapter = capability(capability_name)
    if adapter.target_kind != target_kind:
        raise ExecutionRefused("policy", f"{capability_name} does not change targets of kind {target_kind}")
    return adapter


def one_change(capability_name: str) -> AbstractContextManager[object]:
    """The adapter's scope for the steps of one change (prepare and execute), when it has one (`one_change`):
    what it reads to check a target's identity is read once among those steps, and never kept past them."""
    try:
        scope = getattr(capability(capability_name), "one_change", None)
    except ExecutionRefused:
        scope = None  # refused by the step that needs the adapter, as without a scope
    return scope() if scope is not None else nullcontext()


def executor_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --- loading and the one transition function ------------------------------------------------------


_locked_record = fastsql.PreparedRead(
    lambda contract_id: Contract.objects.select_for_update().filter(pk=contract_id), Contract._meta.pk
)
_event_chain = fastsql.PreparedRead(
    lambda contract_id: ContractEvent.objects.filter(contract_id=contract_id).order_by("version"), Contract._meta.pk
)


def load(contract_id: Any, *, for_update: bool = False) -> Contract:
    """A contract whose record and event chain authenticate; ContractTampered otherwise."""
    query = Contract.objects.select_for_update() if for_update else Contract.objects
    contract = query.get(pk=contract_id)
    verify(contract)
    return contract


def verify(contract: Contract) -> str:
    """Check a contract's record MAC and its whole event chain; ContractTampered otherwise. Returns the last
    event's MAC, which the next event chains to."""
    sealing.check_mac(contract.mac_parts(), contract.mac, f"contract {contract.id}")
    previous = ""
    events = _event_chain(contract.pk)
    for expected_version, event in enumerate(events, start=1):
        if event.version != expected_version or event.prev_mac != previous:
            raise sealing.ContractTampered(f"the event chain of contract {contract.id} is broken at {expected_version}")
        sealing.check_mac(event.mac_parts(), event.mac, f"event {event.version} of contract {contract.id}")
        previous = event.mac
    if not events or events[-1].version != contract.version or events[-1].to_state != contract.state:
        raise sealing.ContractTampered(f"contract {contract.id} does not match its last event")
    return previous


def _append_event(contract: Contract, from_state: str, actor: str, reason: str, *, previous: str) -> str:
    """Append the contract's event for its move from `from_state` (chained to `previous`) and its audit row;
    returns the event's MAC, which the next event chains to."""
    event = ContractEvent(
        contract=contract,
        version=contract.version,
        from_state=from_state,
        to_state=contract.state,
        at=contract.updated_at,
        actor=actor[:200],
        reason=reason[:200],
        prev_mac=previous,
    )
    event.mac = sealing.mac(event.mac_parts())
    sql, fields = _event_insert_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, [field.get_db_prep_save(field.pre_save(event, True), connection) for field in fields])
    arguments = {"from": from_state, "to": contract.state, "version": contract.version, "reason": reason}
    record_contract_event(contract, arguments, outcome=contract.state, actor=actor)
    return event.mac


def record_contract_event(contract: Contract, arguments: Mapping[str, Any], *, outcome: str, actor: str) -> None:
    """An audit row about a contract: its ids, rule and target digest, never its target, intent or content."""
    audit_row(
        kind=EventKind.CONTRACT_TRANSITION,
        tool=contract.capability,
        arguments={
            "contract": str(contract.id),
            "memorable_id": contract.memorable_id,
            "target_kind": contract.target_kind,
            "method": contract.method,
            "target_digest": contract.target_digest,
            **arguments,
        },
        outcome=outcome,
        called_by=actor,
    )


def _reserve(contract: Contract) -> None:
    """Reserve the contract's target, or raise TargetBusy naming the contract that holds it. The insert skips a
    target already reserved (by this contract, or another) instead of failing, so it needs no savepoint, and
    returns the row it inserted; only when it inserted none is the holder read (on PostgreSQL a concurrent
    reserver's insert is waited for on the key, then seen committed)."""
    reservation = TargetReservation(
        target_digest=contract.target_digest, contract=contract, reserved_at=contract.updated_at
    )
    sql, fields = _reserve_sql()
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [field.get_db_prep_save(getattr(reservation, field.attname), connection) for field in fields]
        )
        if cursor.fetchone() is not None:
            return
    holder = TargetReservation.objects.select_related("contract").get(target_digest=contract.target_digest)
    if holder.contract_id != contract.id:
        raise TargetBusy(holder.contract)


@cache
def _reserve_sql() -> tuple[str, list[Field[Any, Any]]]:
    """The insert of a reservation that skips a taken target and returns the row it inserted (SQLite and
    PostgreSQL alike), with its fields in column order."""
    fields = list(TargetReservation._meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = (
        f"INSERT INTO {quote(TargetReservation._meta.db_table)} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT DO NOTHING RETURNING {quote(fields[0].column)}"
    )
    return sql, fields


def _release(contract: Contract) -> None:
    """`TargetReservation.objects.filter(contract=contract).delete()`, as its statement written once (a reservation
    has no signal receivers and nothing refers to it, so the ORM's delete is this one statement too)."""
    quote = connection.ops.quote_name
    table, column = quote(TargetReservation._meta.db_table), quote(TargetReservation._meta.get_field("contract").column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE {column} = %s", [Contract._meta.pk.get_db_prep_value(contract.pk, connection)]
        )


# A move's writes are the same statements at every move: written once (`_event_insert_sql`, `_update_sql`) and
# sent through Django's cursor with the values the ORM would send (each field's `pre_save` and `get_db_prep_save`),
# where `save()` compiled them anew each time. Contracts and their events have no signal receivers to skip.


@cache
def _contract_insert_sql() -> tuple[str, list[Field[Any, Any]]]:
    """The insert of a contract's record (every field, its id made here), with its fields in column order."""
    fields = list(Contract._meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(Contract._meta.db_table)} ({columns}) VALUES ({marks})", fields


def _record(contract: Contract) -> None:
    """`contract.save(force_insert=True)`, as its statement written once: a second record of the same idempotency
    key fails on its unique key as the ORM's insert would (IntegrityError)."""
    sql, fields = _contract_insert_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, [field.get_db_prep_save(field.pre_save(contract, True), connection) for field in fields])
    contract._state.adding, contract._state.db = False, connection.alias


@cache
def _event_insert_sql() -> tuple[str, list[Field[Any, Any]]]:
    """The insert of a contract event (its id left to the database), with its fields in column order."""
    fields = [field for field in ContractEvent._meta.concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(ContractEvent._meta.db_table)} ({columns}) VALUES ({marks})", fields


@cache
def _update_sql(names: tuple[str, ...]) -> tuple[str, list[Field[Any, Any]]]:
    """The update of these fields of one contract, by its id, with the fields in the order of their placeholders."""
    fields = [field for name in names if isinstance(field := Contract._meta.get_field(name), Field)]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    table, key = quote(Contract._meta.db_table), quote(Contract._meta.pk.column)
    return f"UPDATE {table} SET {assignments} WHERE {key} = %s", fields


def _save_move(contract: Contract, names: tuple[str, ...]) -> None:
    """`contract.save(update_fields=names)`, as its statement written once; refused as `save()` refuses it when the
    record is gone."""
    sql, fields = _update_sql(names)
    values = [field.get_db_prep_save(field.pre_save(contract, False), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, Contract._meta.pk.get_db_prep_value(contract.pk, connection)])
        if cursor.rowcount != 1:
            raise DatabaseError("Save with update_fields did not affect any rows.")


def transition(
    contract: Contract,
    to: str,
    *,
    actor: str,
    reason: str = "",
    changes: Mapping[str, Any] | None = None,
    inside: Callable[[Contract], None] | None = None,
    resolution: bool = False,
    savepoint: bool = True,
    check: Callable[[Contract], None] | None = None,
    recorded: str = "",
) -> Contract:
    """Move a contract to `to` in one transaction; refused unless declared and the record is unchanged.
    `check(current)` runs on the stored record once it is locked and authenticated, before anything moves;
    whatever it raises refuses the move. `savepoint=False` inside a caller's transaction that fails as a
    whole when the move fails (prepare's). `recorded`, the MAC of its first event, when the caller recorded the
    contract in this same transaction (prepare): the record in hand is the one stored, which no other
    transaction can see or change before this one commits, so it is neither locked nor read again."""
    with transaction.atomic(savepoint=savepoint), audited_together():
        if recorded:
            current, previous = copy.copy(contract), recorded
        else:
            locked = _locked_record(contract.pk)
            if not locked:
                raise Contract.DoesNotExist(f"there is no contract {contract.pk}")
            current = locked[0]
            # The whole chain, under the row lock: one read of its few events, as reading only the last would be.
            previous = verify(current)
        if check is not None:
            check(current)
        if (current.state, current.version) != (contract.state, contract.version):
            raise StaleContract()
        if resolution:
            if current.state != S.RECONCILIATION or to not in RESOLUTIONS.values():
                Contract.check_transition(current.state, to)
        else:
            Contract.check_transition(current.state, to)
        from_state = current.state
        for name, value in (changes or {}).items():
            setattr(current, name, value)
        current.state = to
        current.version += 1
        current.updated_at = timezone.now()
        current.detail = reason[:200]
        current.mac = sealing.mac(current.mac_parts())
        # Only what the step changes: the sealed target, intent and snapshot stay as they are on disk.
        _save_move(current, ("state", "version", "updated_at", "detail", "mac", *(changes or {})))
        if to in RESERVING_STATES:
            _reserve(current)
        elif from_state in RESERVING_STATES:
            # Only a reserving state holds a reservation: it is made on entering one and released on leaving
            # it, each in its transition's transaction.
            _release(current)
        _append_event(current, from_state, actor, reason, previous=previous)
        if inside is not None:
            inside(current)
    contract.__dict__.update(current.__dict__)
    return contract


# --- preparing and executing ----------------------------------------------------------------------


def prepare(
    *,
    capability_name: str,
    method: str,
    target: Mapping[str, Any],
    intent: Mapping[str, Any],
    idempotency_key: str,
    approval: Mapping[str, Any],
    actor: str,
    label: str = "",
    expected_fingerprint: str = "",
    expected_result: str = "",
    reviewed_result: bytes | None = None,
    confirmation: PendingConfirmation | None = None,
) -> Contract:
    """Record a contract and prepare it against the target as it is now. Returns the PREPARED contract;
    raises ExecutionRefused (after recording FAILED) when the target drifted from `expected_fingerprint`,
    when the intent does not apply, or when it does not produce the result the operator reviewed
    (`expected_result`, the fingerprint of the previewed bytes). The same idempotency key is refused a
    second time: a confirmed request executes once.

    `reviewed_result`, the bytes the preview made (in another process, perhaps), stands for the intent applied to
    the target when the target is the one previewed (`expected_fingerprint`) and their fingerprint is
    `expected_result`: exactly the bytes the operator reviewed, so they are not computed again."""
    adapter = authorize(capability_name, capability(capability_name).target_kind, method)
    identity_json = sealing.canonical_json(adapter.identity(target))
    intent_json = sealing.canonical_json(intent)
    # Prepare with the canonical forms execution will unseal, so both compute the same result.
    identity, intent = json.loads(identity_json), json.loads(intent_json)
    now = timezone.now()
    contract = Contract(
        idempotency_digest=sealing.digest(
            sealing.canonical_json({"capability": capability_name, "key": idempotency_key})
        ),
        confirmation=confirmation,
        capability=capability_name,
        target_kind=adapter.target_kind,
        method=method,
        target_digest=sealing.digest(identity_json),
        intent_digest=sealing.digest(intent_json),
        label=label[:200],
        executor=executor_identity(),
        state=S.PREPARING,
        version=1,
        created_at=now,
        expires_at=now + PREPARED_VALIDITY,
        updated_at=now,
    )
    contract.target_sealed = sealing.seal(str(contract.id), "target", identity_json)
    contract.intent_sealed = sealing.seal(str(contract.id), "intent", intent_json)
    contract.mac = sealing.mac(contract.mac_parts())

    # Read and compute before recording: nothing is written here, and the record with its outcome then
    # takes one transaction (PREPARING and PREPARED, or PREPARING and FAILED, each its own event).
    refusal: ExecutionRefused | None = None
    try:
        observed = adapter.read(identity)
        if expected_fingerprint and observed.fingerprint != expected_fingerprint:
            raise ExecutionRefused("target_drift", "the target changed after the preview was made; nothing was written")
        if (
            reviewed_result is not None
            and expected_fingerprint
            and expected_result
            and adapter.fingerprint(reviewed_result) == expected_result
        ):
            result = reviewed_result
        else:
            result = adapter.forward(identity, method, observed.content, intent)
        if expected_result and adapter.fingerprint(result) != expected_result:
            raise ExecutionRefused(
                "integrity", "the change no longer produces the bytes the operator reviewed; nothing was written"
            )
    except ExecutionRefused as refused:
        refusal = refused
    # No savepoints inside: the record is the transaction's first statement, so a duplicate key rolls the whole
    # of it back, and whatever fails later in it fails prepare as a whole.
    recorded = False
    try:
        with transaction.atomic(), audited_together():
            _record(contract)
            recorded = True
            first = _append_event(contract, "", actor, "recorded", previous="")
            if refusal is not None:
                transition(contract, S.FAILED, actor=actor, reason=refusal.reason, savepoint=False, recorded=first)
            else:
                evidence = {
                    **approval,
                    "nonce": secrets.token_hex(16),
                    "contract": str(contract.id),
                    "operation": str(contract.operation_id),
                    "target_digest": contract.target_digest,
                    "precondition_fingerprint": observed.fingerprint,
                    "intent_digest": contract.intent_digest,
                    "issued": now.isoformat(),
                    "expires": contract.expires_at.isoformat(),
                }
                transition(
                    contract,
                    S.PREPARED,
                    actor=actor,
                    reason="prepared",
                    savepoint=False,
                    recorded=first,
                    changes={
                        "precondition_fingerprint": observed.fingerprint,
                        "snapshot_sealed": sealing.seal(str(contract.id), "snapshot", observed.content),
                        "snapshot_digest": sealing.digest(observed.content),
                        "expected_post_fingerprint": adapter.fingerprint(result),
                        "confirmation_digest": sealing.mac({"evidence": evidence}),
                    },
                )
    except IntegrityError:
        if recorded:
            raise
        raise ExecutionRefused("duplicate", "this request was carried out (or refused) once already") from None
    if refusal is not None:
        raise refusal
    # Kept on this object only: execute in the same process writes these bytes instead of computing them
    # again (an apply and a schema validation, costly on a large project) once their fingerprint matches.
    contract.prepared_result = result  # type: ignore[attr-defined]
    return contract


def _opened(contract: Contract) -> tuple[Capability, dict[str, Any], dict[str, Any]]:
    adapter = authorize(contract.capability, contract.target_kind, contract.method)
    identity = json.loads(sealing.unseal(str(contract.id), "target", bytes(contract.target_sealed)))
    intent = json.loads(sealing.unseal(str(contract.id), "intent", bytes(contract.intent_sealed)))
    if sealing.digest(sealing.canonical_json(identity)) != contract.target_digest:
        raise sealing.ContractTampered(f"the target of contract {contract.id} does not match its digest")
    if sealing.digest(sealing.canonical_json(intent)) != contract.intent_digest:
        raise sealing.ContractTampered(f"the intent of contract {contract.id} does not match its digest")
    return adapter, identity, intent


def _snapshot(contract: Contract) -> bytes:
    snapshot = sealing.unseal(str(contract.id), "snapshot", bytes(contract.snapshot_sealed))
    if sealing.digest(snapshot) != contract.snapshot_digest:
        raise sealing.ContractTampered(f"the snapshot of contract {contract.id} does not match its digest")
    return snapshot


Settled = Callable[[Contract, dict[str, Any]], None]


def execute(contract: Contract, *, actor: str, step: Step = no_step, on_verified: Settled | None = None) -> Contract:
    """Carry out a PREPARED contract once. Returns it VERIFIED, FAILED, EXPIRED or in RECONCILIATION.

    `on_verified(contract, settled)` runs inside the VERIFIED transaction, so what the caller records
    about the success (the confirmation's outcome) commits with it or not at all."""
    prepared_result = getattr(contract, "prepared_result", None)
    opened: list[tuple[tuple[Capability, dict[str, Any], dict[str, Any]], bytes]] = []

    def ready(current: Contract) -> None:
        # On the stored record, locked and authenticated (no separate load before): the state first, since a
        # contract that failed in preparation has no snapshot to open, and that is no sign of tampering.
        if current.state != S.PREPARED:
            raise ExecutionRefused("state", f"contract {current.memorable_id} is {current.state}, not PREPARED")
        opened.append((_opened(current), _snapshot(current)))
        if not current.confirmation_digest:
            raise ExecutionRefused("unconfirmed", "the contract carries no confirmation")
        if current.expires_at <= timezone.now():
            raise _Expired()

    try:
        transition(
            contract,
            S.EXECUTING,
            actor=actor,
            reason="acquired",
            changes={"executor": executor_identity()},
            check=ready,
        )
    except _Expired:
        return transition(contract, S.EXPIRED, actor=actor, reason="expired")
    except TargetBusy as busy:
        transition(contract, S.EXPIRED, actor=actor, reason=busy.reason)
        raise
    (adapter, identity, intent), snapshot = opened[-1]
    try:
        return _forward(
            contract,
            adapter,
            identity,
            intent,
            snapshot,
            actor=actor,
            step=step,
            on_verified=on_verified,
            prepared_result=prepared_result,
        )
    except Exception as exc:
        # Once EXECUTING, an unexpected failure leaves the target's state unknown: that is exactly what
        # reconciliation is for, so record it there rather than guess.
        logger.exception("contract %s failed unexpectedly while executing", contract.id)
        return _to_reconciliation(contract, actor, f"unexpected:{type(exc).__name__}")


def _forward(
    contract: Contract,
    adapter: Capability,
    identity: dict[str, Any],
    intent: dict[str, Any],
    snapshot: bytes,
    *,
    actor: str,
    step: Step,
    on_verified: Settled | None,
    prepared_result: bytes | None = None,
) -> Contract:
    try:
        observed = adapter.read(identity)
    except TargetMissing:
        return transition(contract, S.FAILED, actor=actor, reason="target_missing")
    if observed.fingerprint != contract.precondition_fingerprint:
        return transition(contract, S.FAILED, actor=actor, reason="target_drift")
    result = prepared_result
    if result is None or adapter.fingerprint(result) != contract.expected_post_fingerprint:
        result = adapter.forward(identity, contract.method, snapshot, intent)
    if adapter.fingerprint(result) != contract.expected_post_fingerprint:
        return transition(contract, S.FAILED, actor=actor, reason="result_changed")
    return _write_and_verify(
        contract,
        adapter,
        identity,
        result,
        actor=actor,
        step=step,
        before=contract.precondition_fingerprint,
        after=contract.expected_post_fingerprint,
        intent=intent,
        on_verified=on_verified,
    )


def _write_and_verify(
    contract: Contract,
    adapter: Capability,
    identity: dict[str, Any],
    content: bytes,
    *,
    actor: str,
    step: Step,
    before: str,
    after: str,
    intent: Mapping[str, Any] | None = None,
    on_verified: Settled | None = None,
) -> Contract:
    """Write `content` over the target (forward or rollback alike) and verify that it reads as `after`. A write
    that raised is judged by a re-read: still `before` proves it untouched, anything else goes to
    reconciliation."""
    step("before_write")
    try:
        adapter.write(identity, content, step)
    except OSError:
        return _after_failed_write(contract, adapter, identity, actor, proof=before)
    return _verify(
        contract, adapter, identity, actor=actor, step=step, expected=after, intent=intent, on_verified=on_verified
    )


def _after_failed_write(
    contract: Contract, adapter: Capability, identity: dict[str, Any], actor: str, *, proof: str
) -> Contract:
    """A write that raised: FAILED only if a re-read proves the target untouched, else reconciliation."""
    failed = S.FAILED if contract.state == S.EXECUTING else S.ROLLBACK_FAILED
    try:
        unchanged = adapter.read(identity).fingerprint == proof
    except ExecutionRefused:
        unchanged = False
    if unchanged:
        return transition(contract, failed, actor=actor, reason="write_failed")
    return _to_reconciliation(contract, actor, "write_interrupted")


def _verify(
    contract: Contract,
    adapter: Capability,
    identity: dict[str, Any],
    *,
    actor: str,
    step: Step,
    expected: str,
    intent: Mapping[str, Any] | None = None,
    on_verified: Settled | None = None,
) -> Contract:
    try:
        read_back = adapter.read(identity).fingerprint
    except ExecutionRefused:
        read_back = ""
    if read_back != expected:
        return _to_reconciliation(contract, actor, "readback_mismatch")
    step("before_verified")
    done = S.VERIFIED if contract.state == S.EXECUTING else S.ROLLED_BACK
    settled: dict[str, Any] = {}

    def settle(current: Contract) -> None:
        forward_intent = intent if done == S.VERIFIED else None
        settled.update(
            adapter.settle(
                identity, read_back, actor=actor, label=current.label, method=current.method, intent=forward_intent
            )
        )
        if on_verified is not None:
            on_verified(current, settled)

    changes = {"post_fingerprint": read_back} if done == S.VERIFIED else {}
    contract = transition(contract, done, actor=actor, reason="verified", changes=changes, inside=settle)
    contract.settled = settled  # type: ignore[attr-defined]
    return contract


def _to_reconciliation(contract: Contract, actor: str, reason: str) -> Contract:
    current = load(contract.pk)
    if current.state == S.RECONCILIATION:
        return current
    return transition(current, S.RECONCILIATION, actor=actor, reason=reason)


# --- rollback, reconciliation, recovery ---------------------------------------------------------------


def check_typed_id(contract: Contract, typed_id: str) -> None:
    if normalize_typed_id(typed_id) != contract.memorable_id:
        raise ExecutionRefused(
            "typed_id", f"type the contract's memorable ID ({contract.memorable_id}) exactly to confirm"
        )


def rollback(contract: Contract, *, actor: str, typed_id: str, step: Step = no_step) -> Contract:
    """Restore a VERIFIED contract's snapshot, refused (nothing changed) when the target drifted since."""
    contract = load(contract.pk)
    check_typed_id(contract, typed_id)
    if contract.state != S.VERIFIED:
        raise ExecutionRefused("state", f"only a VERIFIED contract can be rolled back; this one is {contract.state}")
    adapter, identity, _intent = _opened(contract)
    if not getattr(adapter, "reversible", True):
        raise ExecutionRefused(
            "irreversible", f"{contract.capability} changes are never rolled back; make a new change that undoes it"
        )
    snapshot = _snapshot(contract)
    try:
        current = adapter.read(identity).fingerprint
    except TargetMissing as missing:
        raise ExecutionRefused("target_missing", missing.clause) from None
    if current != contract.post_fingerprint:
        raise ExecutionRefused(
            "target_drift",
            "the target changed after this contract was carried out; rolling it back would undo those changes "
            "too, so nothing was done",
        )
    # Record who rolls back: recovery judges an in-flight contract by this process, not the forward one's.
    transition(contract, S.ROLLING_BACK, actor=actor, reason="rollback", changes={"executor": executor_identity()})
    try:
        if adapter.read(identity).fingerprint != contract.post_fingerprint:
            return transition(contract, S.ROLLBACK_FAILED, actor=actor, reason="target_drift")
        return _write_and_verify(
            contract,
            adapter,
            identity,
            snapshot,
            actor=actor,
            step=step,
            before=contract.post_fingerprint,
            after=contract.precondition_fingerprint,
        )
    except Exception as exc:
        logger.exception("contract %s failed unexpectedly while rolling back", contract.id)
        return _to_reconciliation(contract, actor, f"unexpected:{type(exc).__name__}")


def resolve(contract: Contract, conclusion: str, *, actor: str) -> Contract:
    """An operator's conclusion about a contract in RECONCILIATION: applied, not applied, rolled back by hand."""
    contract = load(contract.pk)
    if contract.state != S.RECONCILIATION:
        raise ExecutionRefused("state", f"contract {contract.memorable_id} is {contract.state}, not in RECONCILIATION")
    if conclusion not in RESOLUTIONS:
        raise ExecutionRefused("conclusion", f"conclude with one of {', '.join(RESOLUTIONS)}")
    if contract.post_fingerprint:
        # It was VERIFIED once, so this reconciliation is a rollback's: "applied" means the rollback took
        # effect; "not applied" returns it to VERIFIED with the fingerprint sealed then.
        to: str = S.VERIFIED if conclusion == "not_applied" else S.ROLLED_BACK
        changes: dict[str, Any] = {}
    else:
        to = RESOLUTIONS[conclusion]
        # "applied" seals the result the contract meant to produce, so a later rollback refuses unless
        # the target really is in that state.
        changes = {"post_fingerprint": contract.expected_post_fingerprint} if to == S.VERIFIED else {}
    settle = _settle_if_applied(contract) if to == S.VERIFIED and not contract.post_fingerprint else None
    return transition(
        contract, to, actor=actor, reason=f"resolved:{conclusion}", changes=changes, resolution=True, inside=settle
    )


def _settle_if_applied(contract: Contract) -> Callable[[Contract], None]:
    """For a forward change concluded "applied": when the target does read as the change's result, the owning
    app records it as it would have after VERIFIED (a certificate issued, a revision accepted)."""
    adapter, identity, intent = _opened(contract)

    def settle(current: Contract) -> None:
        try:
            now = adapter.read(identity).fingerprint
        except ExecutionRefused:
            return
        if now == current.expected_post_fingerprint:
            adapter.settle(
                identity, now, actor=current.executor, label=current.label, method=current.method, intent=intent
            )

    return settle


def evidence(contract: Contract) -> dict[str, Any]:
    """What the target looks like now next to the contract's fingerprints, for a reconciliation screen."""
    adapter, identity, _intent = _opened(contract)
    try:
        now = adapter.read(identity).fingerprint
    except ExecutionRefused:
        now = ""
    return {
        "current_fingerprint": now,
        "matches_before": bool(now) and now == contract.precondition_fingerprint,
        "matches_result": bool(now) and now == contract.expected_post_fingerprint,
    }


def _abandoned(contract: Contract, lease: timedelta) -> bool:
    """Whether the process that last moved an in-flight contract is gone (or silent past the lease)."""
    host, _, pid = contract.executor.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        # On this host the process table is the truth: a live executor keeps its contract however long
        # it takes; the lease is only for processes on other hosts, which cannot be asked.
        if int(pid) == os.getpid():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    return contract.updated_at <= timezone.now() - lease


def recover_interrupted(*, actor: str = "recovery") -> list[Contract]:
    """At start-up: settle every contract an ended process left in flight. EXECUTING and ROLLING_BACK go
    to RECONCILIATION and are never re-sent; PREPARING becomes FAILED and PREPARED EXPIRED (nothing was
    written in either)."""
    lease = timedelta(seconds=settings.FORGE_EXECUTOR_LEASE_SECONDS)
    moved = []
    pending = [S.PREPARING, S.PREPARED, *IN_FLIGHT_STATES]
    settled_as: dict[str, str] = {S.PREPARING: S.FAILED, S.PREPARED: S.EXPIRED}  # the rest: RECONCILIATION
    for contract in Contract.objects.filter(state__in=pending).order_by("created_at"):
        if not _abandoned(contract, lease):
            continue
        to = settled_as.get(contract.state, S.RECONCILIATION)
        try:
            moved.append(transition(contract, to, actor=actor, reason="interrupted"))
        except (StaleContract, sealing.ContractTampered) as exc:
            logger.error("contract %s was not recovered: %s", contract.id, exc)
    return moved


def carry_out(
    *,
    capability: str,
    method: str,
    target: Mapping[str, Any],
    intent: Mapping[str, Any],
    idempotency_key: str,
    approval: Mapping[str, Any],
    actor: str,
    label: str,
    expected_fingerprint: str = "",
    expected_result: str = "",
) -> Outcome:
    """Prepare and execute a change a person approved on the spot (no pending confirmation: the caretaker in
    the console); the entry point `forge_core.execution` names. Refusals are raised as they are."""
    with one_change(capability):
        contract = prepare(
            capability_name=capability,
            method=method,
            target=target,
            intent=intent,
            idempotency_key=idempotency_key,
            approval=approval,
            actor=actor,
            label=label,
            expected_fingerprint=expected_fingerprint,
            expected_result=expected_result,
        )
        contract = execute(contract, actor=actor)
    return Outcome(
        state=contract.state,
        contract=str(contract.id),
        memorable_id=contract.memorable_id,
        detail=contract.detail,
        settled=dict(getattr(contract, "settled", {})),
    )
