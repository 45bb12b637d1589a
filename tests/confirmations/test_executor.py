"""The one executor (confirmations.executor) carrying out project-file changes under a recovery contract:
the forward path and its record, every refusal and where it leaves the contract and the file, rollback,
the evidence shown for a reconciliation, tampering with the stored records, and recovery at start-up.

Contracts are prepared and executed against the main fixture project file in a temporary projects root;
failures are provoked at the adapter's own seams (the `step` callbacks of an atomic write), never by
replacing the executor."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from confirmations import executor, sealing
from confirmations.models import Contract, ContractEvent, ContractState, TargetReservation
from forge_core.capabilities import ExecutionRefused
from forge_core.errors import AuditUnavailable
from projects.capability import ProjectFileCapability, apply_intent, intent_for
from projects.models import Project
from projects.plcopen import documents, queries
from projects.services import do_import_project
from tests.confirmations.conftest import FIXTURE_FILE
from tests.confirmations.helpers import (
    ACTOR,
    NEW_VARIABLE,
    STAMP,
    add_variable,
    add_variable_intent,
    contract_audit_rows,
    event_states,
    finished_pid,
    left_in_flight_by,
    prepare,
    project_file,
    reservation_holder,
    schema_errors,
    stored,
    temp_files,
)
from tests.projects.conftest import fixture_bytes

S = ContractState


@pytest.fixture
def path(project, root) -> Path:
    return project_file(project, root)


@pytest.fixture
def old(path) -> bytes:
    return path.read_bytes()


def other_content(data: bytes, name: str = "SomeoneElsesVariable") -> bytes:
    """Another valid version of the file, as another tool (or person) would have saved it."""
    return apply_intent(data, intent_for([add_variable(name)], STAMP))


def executed(project: Project, **kwargs: Any) -> Contract:
    return executor.execute(prepare(project, **kwargs), actor=ACTOR)


def at(boundary: str, action: Callable[[], None]) -> Callable[[str], None]:
    """A step callback that acts at one write boundary."""

    def step(name: str) -> None:
        if name == boundary:
            action()

    return step


# --- the forward path -------------------------------------------------------------------------------


def test_an_add_variable_intent_prepared_and_executed_ends_verified(project):
    contract = executed(project)
    row = executor.load(contract.pk)
    assert (row.state, row.detail, row.version) == (S.VERIFIED, "verified", 4)


def test_an_executed_add_variable_leaves_a_schema_valid_file_holding_the_variable(project, path, old):
    contract = executed(project)
    data = path.read_bytes()
    assert data != old
    assert schema_errors(data) == []
    assert queries.get_element(documents.load(data), f"pou/LineMain/var/{NEW_VARIABLE}")["name"] == NEW_VARIABLE
    row = executor.load(contract.pk)
    assert documents.fingerprint(data) == row.expected_post_fingerprint == row.post_fingerprint
    assert row.precondition_fingerprint == documents.fingerprint(old)


def test_the_written_bytes_are_exactly_the_result_computed_at_preparation(project, path, old):
    executed(project)
    assert path.read_bytes() == apply_intent(old, add_variable_intent())


def test_an_executed_change_is_the_projects_next_accepted_revision(project, path):
    contract = executed(project)
    project.refresh_from_db()
    assert project.accepted_revision == 2
    assert project.fingerprint == documents.fingerprint(path.read_bytes())
    assert contract.settled == {"accepted_revision": 2}


def test_an_executed_contract_records_preparing_to_verified_as_a_mac_chain(project):
    contract = executed(project)
    events = list(ContractEvent.objects.filter(contract=contract).order_by("version"))
    assert [(e.version, e.from_state, e.to_state) for e in events] == [
        (1, "", S.PREPARING),
        (2, S.PREPARING, S.PREPARED),
        (3, S.PREPARED, S.EXECUTING),
        (4, S.EXECUTING, S.VERIFIED),
    ]
    assert [e.prev_mac for e in events] == ["", *[e.mac for e in events[:-1]]]
    for event in events:
        assert event.mac == sealing.mac(event.mac_parts())


def test_an_executed_contract_releases_the_target_reservation(project):
    executed(project)
    assert not TargetReservation.objects.exists()


def test_each_transition_is_audited_without_any_project_content(project, old):
    contract = executed(project)
    rows = contract_audit_rows()
    assert [(row.arguments["from"], row.arguments["to"]) for row in rows] == [
        ("", S.PREPARING),
        (S.PREPARING, S.PREPARED),
        (S.PREPARED, S.EXECUTING),
        (S.EXECUTING, S.VERIFIED),
    ]
    assert {row.arguments["contract"] for row in rows} == {str(contract.id)}
    for row in rows:
        assert NEW_VARIABLE not in row.arguments_json
        assert "<" not in row.arguments_json and "LineMain" not in row.arguments_json
        assert documents.fingerprint(old) not in row.arguments_json


def test_the_stored_contract_holds_target_intent_and_snapshot_only_encrypted(project):
    contract = executor.load(executed(project).pk)
    for sealed in (contract.target_sealed, contract.intent_sealed, contract.snapshot_sealed):
        assert NEW_VARIABLE.encode() not in bytes(sealed)
        assert b"<project" not in bytes(sealed) and b"steps" not in bytes(sealed)
    assert all(NEW_VARIABLE not in str(value) for value in contract.mac_parts().values())


def test_the_same_idempotency_key_is_refused_a_second_time_and_nothing_is_written_again(project, path):
    executed(project, key="once")
    after_first = path.read_bytes()
    with pytest.raises(ExecutionRefused) as refused:
        prepare(project, key="once", intent=add_variable_intent("AnotherOne"))
    assert refused.value.reason == "duplicate"
    assert Contract.objects.count() == 1
    assert path.read_bytes() == after_first


def test_a_second_execute_of_a_verified_contract_is_refused(project, path):
    contract = executed(project)
    after = stored(contract, path)
    with pytest.raises(ExecutionRefused) as refused:
        executor.execute(contract, actor=ACTOR)
    assert refused.value.reason == "state"
    assert stored(contract, path) == after


def test_executing_a_contract_that_failed_in_preparation_is_refused_as_not_prepared(project, path):
    with pytest.raises(ExecutionRefused):
        prepare(project, intent=intent_for([add_variable(scope="pou/no_such_pou")], STAMP))
    failed = Contract.objects.get()
    before = stored(failed, path)
    with pytest.raises(ExecutionRefused) as refused:
        executor.execute(failed, actor=ACTOR)
    assert refused.value.reason == "state"
    assert stored(failed, path) == before


# --- refusals and failures --------------------------------------------------------------------------


def test_a_file_changed_between_prepare_and_execute_fails_with_target_drift_and_is_left_alone(project, path, old):
    contract = prepare(project)
    theirs = other_content(old)
    path.write_bytes(theirs)
    result = executor.execute(contract, actor=ACTOR)
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.FAILED, "target_drift")
    assert path.read_bytes() == theirs
    assert event_states(row) == [S.PREPARING, S.PREPARED, S.EXECUTING, S.FAILED]
    assert not TargetReservation.objects.exists()
    assert temp_files(path.parent) == []


def test_a_file_changed_before_prepare_fails_with_target_drift_and_is_left_alone(project, path, old):
    theirs = other_content(old)
    path.write_bytes(theirs)
    with pytest.raises(ExecutionRefused) as refused:
        prepare(project, expected_fingerprint=documents.fingerprint(old))
    assert refused.value.reason == "target_drift"
    row = executor.load(Contract.objects.get().pk)
    assert (row.state, row.detail) == (S.FAILED, "target_drift")
    assert event_states(row) == [S.PREPARING, S.FAILED]
    assert path.read_bytes() == theirs


def test_an_intent_that_does_not_apply_fails_with_intent_refused_and_writes_nothing(project, path, old):
    with pytest.raises(ExecutionRefused) as refused:
        prepare(project, intent=intent_for([add_variable(scope="pou/no_such_pou")], STAMP))
    assert refused.value.reason == "intent_refused"
    row = executor.load(Contract.objects.get().pk)
    assert (row.state, row.detail) == (S.FAILED, "intent_refused")
    assert path.read_bytes() == old


def test_a_method_the_policy_does_not_list_is_refused_before_any_record_is_made(project, path, old):
    audit_rows = AuditEvent.objects.count()
    with pytest.raises(ExecutionRefused) as refused:
        executor.prepare(
            capability_name="project.file",
            method="delete_file",
            target={"project": project.slug},
            intent=add_variable_intent(),
            idempotency_key="k",
            approval={},
            actor=ACTOR,
        )
    assert refused.value.reason == "policy"
    assert not Contract.objects.exists()
    assert AuditEvent.objects.count() == audit_rows
    assert path.read_bytes() == old


def test_a_capability_whose_rule_was_taken_out_of_the_policy_is_refused_before_any_record_is_made(
    settings, project, path, old
):
    settings.FORGE_EXECUTOR_POLICY = frozenset({("project.file", "project_file", "some_other_method")})
    audit_rows = AuditEvent.objects.count()
    with pytest.raises(ExecutionRefused) as refused:
        prepare(project)
    assert refused.value.reason == "policy"
    assert not Contract.objects.exists()
    assert AuditEvent.objects.count() == audit_rows
    assert path.read_bytes() == old


def test_a_prepared_contract_whose_rule_was_taken_out_of_the_policy_is_not_executed(settings, project, path, old):
    contract = prepare(project)
    settings.FORGE_EXECUTOR_POLICY = frozenset()
    before = stored(contract, path)
    with pytest.raises(ExecutionRefused) as refused:
        executor.execute(contract, actor=ACTOR)
    assert refused.value.reason == "policy"
    assert stored(contract, path) == before


def test_an_unknown_capability_is_refused_before_any_record_is_made(project):
    with pytest.raises(ExecutionRefused) as refused:
        executor.prepare(
            capability_name="project.*",
            method="apply_operations",
            target={"project": project.slug},
            intent={},
            idempotency_key="k",
            approval={},
            actor=ACTOR,
        )
    assert refused.value.reason == "policy"
    assert not Contract.objects.exists()


def test_a_float_in_an_intent_is_refused_before_any_record_is_made(project):
    with pytest.raises(sealing.NotCanonical):
        prepare(project, intent={**add_variable_intent(), "weight": 0.5})
    assert not Contract.objects.exists()


def test_a_target_held_by_a_reconciliation_expires_the_new_contract_as_target_busy(project, path, old):
    theirs = other_content(old)
    holder = executor.execute(
        prepare(project, key="first"), actor=ACTOR, step=at("after_rename", lambda: path.write_bytes(theirs))
    )
    assert holder.state == S.RECONCILIATION
    contract = prepare(project, key="second", intent=add_variable_intent("Second"))
    with pytest.raises(executor.TargetBusy) as refused:
        executor.execute(contract, actor=ACTOR)
    assert refused.value.reason == "target_busy"
    assert refused.value.holder_state == S.RECONCILIATION
    row = executor.load(contract.pk)
    assert (row.state, row.detail) == (S.EXPIRED, "target_busy")
    assert S.EXECUTING not in event_states(row)
    assert reservation_holder(row) == holder.pk
    assert path.read_bytes() == theirs


def test_a_prepared_contract_past_its_validity_expires_instead_of_executing(monkeypatch, project, path, old):
    monkeypatch.setattr(executor, "PREPARED_VALIDITY", timedelta(0))
    contract = prepare(project)
    result = executor.execute(contract, actor=ACTOR)
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.EXPIRED, "expired")
    assert event_states(row) == [S.PREPARING, S.PREPARED, S.EXPIRED]
    assert path.read_bytes() == old


def test_a_write_that_fails_before_the_rename_fails_the_contract_and_leaves_the_file_and_no_temp_files(
    project, path, old
):
    def fail() -> None:
        raise OSError(28, "No space left on device")

    result = executor.execute(prepare(project), actor=ACTOR, step=at("after_temp_write", fail))
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.FAILED, "write_failed")
    assert path.read_bytes() == old
    assert temp_files(path.parent) == []
    assert not TargetReservation.objects.exists()
    project.refresh_from_db()
    assert project.accepted_revision == 1


def test_a_read_back_that_matches_neither_before_nor_after_goes_to_reconciliation_keeping_the_target(
    project, path, old
):
    theirs = other_content(old)
    result = executor.execute(prepare(project), actor=ACTOR, step=at("after_rename", lambda: path.write_bytes(theirs)))
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.RECONCILIATION, "readback_mismatch")
    assert reservation_holder(row) == row.pk
    assert row.post_fingerprint == ""
    assert path.read_bytes() == theirs


def test_an_unexpected_error_while_executing_goes_to_reconciliation(project, path):
    def crash() -> None:
        raise RuntimeError("the disk controller said something odd")

    result = executor.execute(prepare(project), actor=ACTOR, step=at("before_verified", crash))
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.RECONCILIATION, "unexpected:RuntimeError")
    assert reservation_holder(row) == row.pk


def test_a_target_removed_between_prepare_and_execute_fails_with_target_missing(project, path):
    contract = prepare(project)
    path.unlink()
    result = executor.execute(contract, actor=ACTOR)
    assert (executor.load(result.pk).state, result.detail) == (S.FAILED, "target_missing")
    assert not path.exists()


# --- rollback ---------------------------------------------------------------------------------------


def test_rollback_of_a_verified_contract_restores_the_exact_old_bytes(project, path, old):
    contract = executed(project)
    result = executor.rollback(contract, actor="oscar", typed_id=contract.memorable_id)
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.ROLLED_BACK, "verified")
    assert path.read_bytes() == old
    assert event_states(row)[-3:] == [S.VERIFIED, S.ROLLING_BACK, S.ROLLED_BACK]
    assert not TargetReservation.objects.exists()
    project.refresh_from_db()
    assert (project.accepted_revision, project.fingerprint) == (3, documents.fingerprint(old))


def test_rollback_accepts_the_memorable_id_typed_in_upper_case_with_spaces(project, path, old):
    contract = executed(project)
    executor.rollback(contract, actor="oscar", typed_id=f"  {contract.memorable_id.upper().replace('-', '  ')} ")
    assert path.read_bytes() == old


def test_rollback_is_refused_as_target_drift_when_the_file_changed_after_verified(project, path):
    contract = executed(project)
    theirs = other_content(path.read_bytes())
    path.write_bytes(theirs)
    before = stored(contract, path)
    with pytest.raises(ExecutionRefused) as refused:
        executor.rollback(contract, actor="oscar", typed_id=contract.memorable_id)
    assert refused.value.reason == "target_drift"
    assert stored(contract, path) == before
    assert path.read_bytes() == theirs


def test_rollback_is_refused_with_a_wrong_typed_memorable_id(project, path):
    contract = executed(project)
    before = stored(contract, path)
    with pytest.raises(ExecutionRefused) as refused:
        executor.rollback(contract, actor="oscar", typed_id="abandon-ability-able-about")
    assert refused.value.reason == "typed_id"
    assert stored(contract, path) == before


def test_rollback_of_a_contract_that_is_not_verified_is_refused(project, path):
    contract = prepare(project)
    before = stored(contract, path)
    with pytest.raises(ExecutionRefused) as refused:
        executor.rollback(contract, actor="oscar", typed_id=contract.memorable_id)
    assert refused.value.reason == "state"
    assert stored(contract, path) == before


def test_rollback_is_refused_as_target_busy_while_another_contract_holds_the_target(project, path):
    first = executed(project, key="first")
    result = path.read_bytes()
    # The second change's read-back finds the first's result again: it awaits reconciliation, holding
    # the target, while the file is exactly what the first contract sealed.
    second = executor.execute(
        prepare(project, key="second", intent=add_variable_intent("Second")),
        actor=ACTOR,
        step=at("after_rename", lambda: path.write_bytes(result)),
    )
    assert second.state == S.RECONCILIATION
    before = stored(first, path)
    with pytest.raises(executor.TargetBusy) as refused:
        executor.rollback(first, actor="oscar", typed_id=first.memorable_id)
    assert refused.value.reason == "target_busy"
    assert stored(first, path) == before
    assert reservation_holder(first) == second.pk


def test_a_rollback_write_that_fails_before_the_rename_is_rollback_failed_with_the_file_unchanged(project, path):
    contract = executed(project)
    after = path.read_bytes()

    def fail() -> None:
        raise OSError(5, "Input/output error")

    result = executor.rollback(
        contract, actor="oscar", typed_id=contract.memorable_id, step=at("after_temp_write", fail)
    )
    row = executor.load(result.pk)
    assert (row.state, row.detail) == (S.ROLLBACK_FAILED, "write_failed")
    assert path.read_bytes() == after
    assert temp_files(path.parent) == []


def test_a_rollback_in_flight_records_the_process_rolling_back_as_its_executor(monkeypatch, project):
    dead = f"{socket.gethostname()}:{finished_pid()}"
    monkeypatch.setattr(executor, "executor_identity", lambda: dead)
    contract = executed(project)
    monkeypatch.undo()
    seen: list[str] = []
    executor.rollback(
        contract,
        actor="oscar",
        typed_id=contract.memorable_id,
        step=at("before_write", lambda: seen.append(Contract.objects.get(pk=contract.pk).executor)),
    )
    assert seen == [executor.executor_identity()]


def test_recovery_leaves_alone_a_rollback_in_flight_in_a_live_process(monkeypatch, project, path, old):
    # The forward change ran in a process that has ended since; the rollback runs in this one.
    dead = f"{socket.gethostname()}:{finished_pid()}"
    monkeypatch.setattr(executor, "executor_identity", lambda: dead)
    contract = executed(project)
    monkeypatch.undo()
    recovered: list[list[Contract]] = []
    result = executor.rollback(
        contract,
        actor="oscar",
        typed_id=contract.memorable_id,
        step=at("before_write", lambda: recovered.append(executor.recover_interrupted())),
    )
    assert recovered == [[]]
    assert executor.load(result.pk).state == S.ROLLED_BACK
    assert path.read_bytes() == old


# --- evidence for a reconciliation -----------------------------------------------------------------


def test_evidence_matches_before_while_the_file_is_as_prepared(project, path):
    contract = prepare(project)
    assert executor.evidence(contract) == {
        "current_fingerprint": documents.fingerprint(path.read_bytes()),
        "matches_before": True,
        "matches_result": False,
    }


def test_evidence_matches_the_result_once_the_file_holds_it(project, path):
    contract = executed(project)
    evidence = executor.evidence(contract)
    assert (evidence["matches_before"], evidence["matches_result"]) == (False, True)
    assert evidence["current_fingerprint"] == documents.fingerprint(path.read_bytes())


def test_evidence_matches_neither_when_the_file_holds_something_else(project, path, old):
    theirs = other_content(old)
    contract = executor.execute(
        prepare(project), actor=ACTOR, step=at("after_rename", lambda: path.write_bytes(theirs))
    )
    evidence = executor.evidence(contract)
    assert (evidence["matches_before"], evidence["matches_result"]) == (False, False)
    assert evidence["current_fingerprint"] == documents.fingerprint(theirs)


def test_evidence_of_a_missing_file_matches_nothing(project, path):
    contract = prepare(project)
    path.unlink()
    assert executor.evidence(contract) == {"current_fingerprint": "", "matches_before": False, "matches_result": False}


# --- tampering --------------------------------------------------------------------------------------


def flipped(data: Any) -> bytes:
    raw = bytearray(bytes(data))
    raw[-1] ^= 1
    return bytes(raw)


# A change to each column of the record, as someone editing the database would make it.
TAMPERING: dict[str, Callable[[Contract], Any]] = {
    "operation_id": lambda c: uuid.uuid4(),
    "idempotency_digest": lambda c: "0" * 64,
    "capability": lambda c: "project.other",
    "target_kind": lambda c: "other_file",
    "method": lambda c: "other_method",
    "target_sealed": lambda c: flipped(c.target_sealed),
    "target_digest": lambda c: "1" * 64,
    "precondition_fingerprint": lambda c: "2" * 64,
    "intent_sealed": lambda c: flipped(c.intent_sealed),
    "intent_digest": lambda c: "3" * 64,
    "snapshot_sealed": lambda c: flipped(c.snapshot_sealed),
    "snapshot_digest": lambda c: "4" * 64,
    "rollback_plan_version": lambda c: c.rollback_plan_version + 1,
    "confirmation_digest": lambda c: "5" * 64,
    "expected_post_fingerprint": lambda c: "6" * 64,
    "post_fingerprint": lambda c: "7" * 64,
    "label": lambda c: "something harmless",
    "executor": lambda c: "elsewhere:1",
    "detail": lambda c: "verified",
    "state": lambda c: S.EXPIRED if c.state == S.VERIFIED else S.VERIFIED,
    "version": lambda c: c.version + 1,
    "created_at": lambda c: c.created_at - timedelta(seconds=1),
    "expires_at": lambda c: c.expires_at + timedelta(hours=1),
    "updated_at": lambda c: c.updated_at + timedelta(seconds=1),
}


def tamper(contract: Contract, column: str) -> None:
    Contract.objects.filter(pk=contract.pk).update(**{column: TAMPERING[column](contract)})


def test_every_column_of_a_contract_but_its_keys_and_mac_is_covered_by_a_tampering_case():
    columns = {field.name for field in Contract._meta.concrete_fields}
    assert columns - set(TAMPERING) == {"id", "mac", "confirmation"}


@pytest.mark.parametrize("column", list(TAMPERING))
def test_a_contract_changed_in_the_database_does_not_load(project, column):
    contract = prepare(project)
    tamper(contract, column)
    with pytest.raises(sealing.ContractTampered):
        executor.load(contract.pk)


def test_a_contract_moved_to_another_confirmation_does_not_load(cast, project):
    from confirmations.services import do_create_confirmation

    contract = prepare(project)
    confirmation = do_create_confirmation(
        tool="project.write",
        arguments={},
        question="?",
        preview={},
        principal=cast.operator.user,
        session_id="s",
        client_label="c",
        project=project.slug,
        capability="project.file",
        method="apply_operations",
        target={"project": project.slug},
        intent={},
        base_fingerprint="",
        result_digest="",
        label="",
    )
    Contract.objects.filter(pk=contract.pk).update(confirmation=confirmation)
    with pytest.raises(sealing.ContractTampered):
        executor.load(contract.pk)


@pytest.mark.parametrize("column", ["state", "label", "target_digest", "precondition_fingerprint", "expires_at"])
def test_execute_refuses_a_tampered_contract_and_writes_nothing(project, path, old, column):
    contract = prepare(project)
    tamper(contract, column)
    with pytest.raises(sealing.ContractTampered):
        executor.execute(contract, actor=ACTOR)
    assert path.read_bytes() == old
    assert event_states(contract) == [S.PREPARING, S.PREPARED]
    assert not TargetReservation.objects.exists()


@pytest.mark.parametrize("column", ["post_fingerprint", "state", "label", "snapshot_digest"])
def test_rollback_refuses_a_tampered_contract_and_writes_nothing(project, path, column):
    contract = executed(project)
    after = path.read_bytes()
    tamper(contract, column)
    with pytest.raises(sealing.ContractTampered):
        executor.rollback(contract, actor="oscar", typed_id=contract.memorable_id)
    assert path.read_bytes() == after
    assert event_states(contract)[-1] == S.VERIFIED


@pytest.mark.parametrize(
    "change",
    [
        {"reason": "expired"},
        {"actor": "mallory"},
        {"to_state": S.EXPIRED},
        {"prev_mac": "0" * 64},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_contract_whose_event_was_changed_in_the_database_is_refused(project, path, old, change):
    contract = prepare(project)
    ContractEvent.objects.filter(contract=contract, version=1).update(**change)
    with pytest.raises(sealing.ContractTampered):
        executor.load(contract.pk)
    with pytest.raises(sealing.ContractTampered):
        executor.execute(contract, actor=ACTOR)
    assert path.read_bytes() == old


def test_a_contract_whose_last_event_was_deleted_is_refused(project):
    contract = prepare(project)
    ContractEvent.objects.filter(contract=contract, version=contract.version).delete()
    with pytest.raises(sealing.ContractTampered):
        executor.load(contract.pk)


def test_swapping_the_sealed_snapshots_of_two_contracts_is_refused(project, path, old):
    first = prepare(project, key="first")
    second = prepare(project, key="second")
    Contract.objects.filter(pk=first.pk).update(snapshot_sealed=bytes(second.snapshot_sealed))
    Contract.objects.filter(pk=second.pk).update(snapshot_sealed=bytes(first.snapshot_sealed))
    for contract in (first, second):
        with pytest.raises(sealing.ContractTampered):
            executor.execute(contract, actor=ACTOR)
    assert path.read_bytes() == old


def test_a_snapshot_moved_from_another_contract_does_not_open_even_under_a_valid_record_mac(project, path, old):
    first = prepare(project, key="first")
    second = prepare(project, key="second")
    moved = Contract.objects.get(pk=first.pk)
    moved.snapshot_sealed = bytes(second.snapshot_sealed)
    moved.snapshot_digest = second.snapshot_digest
    # Someone who could also forge the record's MAC still cannot move a ciphertext between contracts.
    Contract.objects.filter(pk=first.pk).update(
        snapshot_sealed=moved.snapshot_sealed, mac=sealing.mac(moved.mac_parts())
    )
    executor.load(first.pk)
    with pytest.raises(sealing.ContractTampered, match="does not open"):
        executor.execute(first, actor=ACTOR)
    assert path.read_bytes() == old


@pytest.fixture
def secrets_elsewhere(settings, tmp_path) -> Iterator[Callable[[bool], None]]:
    """Point FORGE_SECRETS_DIR at a fresh folder, optionally with this store's keys but not its id."""
    original = Path(settings.FORGE_SECRETS_DIR)

    def move(keep_keys: bool) -> None:
        folder = tmp_path / "other-secrets"
        folder.mkdir(mode=0o700)
        if keep_keys:
            for name in ("contract-hmac-key", "artifact-key"):
                shutil.copy2(original / name, folder / name)
        settings.FORGE_SECRETS_DIR = folder
        sealing.clear_key_cache()

    yield move
    sealing.clear_key_cache()


def test_a_contract_copied_into_another_deployment_is_refused(project, path, old, secrets_elsewhere):
    contract = prepare(project)
    secrets_elsewhere(False)
    with pytest.raises(sealing.ContractTampered):
        executor.load(contract.pk)
    with pytest.raises(sealing.ContractTampered):
        executor.execute(contract, actor=ACTOR)
    assert path.read_bytes() == old


def test_a_contract_from_a_store_with_another_id_is_refused_even_with_the_same_keys(project, secrets_elsewhere):
    contract = prepare(project)
    store = sealing.store_id()
    secrets_elsewhere(True)
    assert sealing.store_id() != store
    with pytest.raises(sealing.ContractTampered):
        executor.load(contract.pk)


# --- recovery at start-up ---------------------------------------------------------------------------


def test_a_contract_left_executing_by_a_dead_process_goes_to_reconciliation_and_is_never_rewritten(project, path, old):
    contract = left_in_flight_by(prepare(project), finished_pid())
    moved = executor.recover_interrupted()
    assert [c.pk for c in moved] == [contract.pk]
    row = executor.load(contract.pk)
    assert (row.state, row.detail) == (S.RECONCILIATION, "interrupted")
    assert reservation_holder(row) == row.pk
    assert path.read_bytes() == old
    with pytest.raises(ExecutionRefused):
        executor.execute(row, actor=ACTOR)
    assert event_states(row).count(S.EXECUTING) == 1
    assert path.read_bytes() == old


@pytest.fixture
def live_pid() -> Iterator[int]:
    """A process of this host that stays alive until the test ends."""
    process = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    yield process.pid
    process.stdin.close()
    process.wait(timeout=10)


def test_a_contract_executing_in_a_live_process_within_the_lease_is_left_alone(project, live_pid):
    contract = left_in_flight_by(prepare(project), live_pid)
    before = stored(contract)
    assert executor.recover_interrupted() == []
    assert stored(contract) == before


def test_a_contract_of_a_live_process_of_this_host_is_left_alone_even_past_the_lease(settings, project, live_pid):
    contract = left_in_flight_by(prepare(project), live_pid)
    settings.FORGE_EXECUTOR_LEASE_SECONDS = 0
    assert executor.recover_interrupted() == []
    assert executor.load(contract.pk).state == S.EXECUTING


def test_a_contract_of_another_host_silent_past_the_lease_goes_to_reconciliation(settings, project):
    contract = executor.transition(
        prepare(project), S.EXECUTING, actor=ACTOR, reason="acquired", changes={"executor": "elsewhere:4242"}
    )
    assert executor.recover_interrupted() == []
    settings.FORGE_EXECUTOR_LEASE_SECONDS = 0
    assert [c.pk for c in executor.recover_interrupted()] == [contract.pk]
    assert executor.load(contract.pk).state == S.RECONCILIATION


def test_a_contract_executing_in_this_process_is_left_alone(project):
    contract = left_in_flight_by(prepare(project), os.getpid())
    assert executor.recover_interrupted() == []
    assert executor.load(contract.pk).state == S.EXECUTING


def test_a_process_dying_while_preparing_leaves_no_contract_and_no_change(monkeypatch, project, path, old):
    # The target is read before anything is recorded, and the record commits with its outcome (PREPARED
    # or FAILED), so a death in between leaves nothing for recovery to settle.
    class ProcessDied(BaseException):
        pass

    def die(self, identity):
        raise ProcessDied

    monkeypatch.setattr(ProjectFileCapability, "read", die)
    with pytest.raises(ProcessDied):
        prepare(project)
    monkeypatch.undo()
    assert not Contract.objects.exists()
    assert executor.recover_interrupted() == []
    assert path.read_bytes() == old


def test_a_contract_left_prepared_by_a_dead_process_expires(monkeypatch, project, path, old):
    monkeypatch.setattr(executor, "executor_identity", lambda: f"{socket.gethostname()}:{finished_pid()}")
    contract = prepare(project)
    monkeypatch.undo()
    executor.recover_interrupted()
    row = executor.load(contract.pk)
    assert (row.state, row.detail) == (S.EXPIRED, "interrupted")
    assert path.read_bytes() == old


def test_recovery_skips_a_tampered_contract_and_settles_the_others(project):
    second_project = do_import_project(fixture_bytes(FIXTURE_FILE), slug="steps-two", acting_user="tests")
    tampered = left_in_flight_by(prepare(project, key="first"), finished_pid())
    intact = left_in_flight_by(prepare(second_project, key="second"), finished_pid())
    Contract.objects.filter(pk=tampered.pk).update(label="edited")
    moved = executor.recover_interrupted()
    assert [c.pk for c in moved] == [intact.pk]
    assert Contract.objects.get(pk=tampered.pk).state == S.EXECUTING
    assert executor.load(intact.pk).state == S.RECONCILIATION


# --- canonical forms ------------------------------------------------------------------------------


def test_an_intent_with_decomposed_unicode_text_executes_as_prepared(project, path):
    documented = {**add_variable(), "documentation": "Cafe\u0301 temperature"}  # "é" as e + combining accent
    contract = executed(project, intent=intent_for([documented], STAMP))
    row = executor.load(contract.pk)
    assert (row.state, row.detail) == (S.VERIFIED, "verified")
    assert path.read_bytes().count("Caf\u00e9 temperature".encode()) == 1


def test_a_project_bound_under_a_decomposed_unicode_file_name_can_be_changed(root, db):
    from projects.services import do_bind_project

    name = "Ka\u0308se.xml"  # "Käse" as a Mac writes it: a + combining diaeresis
    (root / name).write_bytes(fixture_bytes(FIXTURE_FILE))
    bound = do_bind_project(root / name, slug="kaese", acting_user="tests")
    contract = executed(bound)
    assert (executor.load(contract.pk).state, contract.detail) == (S.VERIFIED, "verified")
    assert NEW_VARIABLE.encode() in (root / name).read_bytes()


def _counting_forward(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = ProjectFileCapability.forward

    def forward(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ProjectFileCapability, "forward", forward)
    return calls


def test_execute_right_after_prepare_writes_the_prepared_bytes_without_computing_them_again(monkeypatch, project):
    calls = _counting_forward(monkeypatch)
    contract = executor.execute(prepare(project), actor=ACTOR)
    assert contract.state == S.VERIFIED
    assert len(calls) == 1


def test_execute_of_a_contract_loaded_afresh_computes_its_result_from_the_sealed_snapshot(monkeypatch, project):
    calls = _counting_forward(monkeypatch)
    prepared = prepare(project)
    contract = executor.execute(Contract.objects.get(pk=prepared.pk), actor=ACTOR)
    assert contract.state == S.VERIFIED
    assert len(calls) == 2


# --- the audit rows of a move, appended together -------------------------------------------------------


def refuse_audit_inserts(execute, sql, params, many, context):
    if "INSERT INTO" in sql and "audit_auditevent" in sql:
        raise DatabaseError("the audit table cannot be written (refused by the test)")
    return execute(sql, params, many, context)


@pytest.mark.django_db(transaction=True)
def test_the_audit_rows_of_one_transaction_are_appended_together_in_the_order_of_the_moves(project):
    with CaptureQueriesContext(connection) as queries:
        contract = prepare(project)

    appends = [query["sql"] for query in queries.captured_queries if "audit_auditevent" in query["sql"]]
    assert len(appends) == 1
    rows = contract_audit_rows()
    assert [json.loads(row.arguments_json)["to"] for row in rows] == [ContractState.PREPARING, ContractState.PREPARED]
    assert all(json.loads(row.arguments_json)["contract"] == str(contract.pk) for row in rows)


@pytest.mark.django_db(transaction=True)
def test_a_move_whose_audit_rows_cannot_be_appended_is_not_made(project):
    contract = prepare(project)

    with connection.execute_wrapper(refuse_audit_inserts), pytest.raises(AuditUnavailable):
        executor.execute(contract, actor=ACTOR)

    assert Contract.objects.get(pk=contract.pk).state == ContractState.PREPARED
    assert event_states(contract) == [ContractState.PREPARING, ContractState.PREPARED]
    assert not TargetReservation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_move_that_waited_for_another_moves_lock_is_refused_as_stale_not_as_tampered(project):
    """A move committed while another waited for the record's lock must not pass for a broken chain in the one that
    waited (a statement that read the chain with the lock would have a snapshot from before that move)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's row locks: SQLite's transactions wait for its one write lock before they read")
    contract = prepare(project)
    stale = Contract.objects.get(pk=contract.pk)
    waiting_started = threading.Event()
    outcome: list[Any] = []

    def waits_for_the_lock() -> None:
        waiting_started.set()
        try:
            executor.transition(stale, ContractState.EXPIRED, actor=ACTOR, reason="expired")
        except Exception as exc:
            outcome.append(exc)
        finally:
            connection.close()

    def hold_the_lock_until_the_other_waits(current: Contract) -> None:
        thread.start()
        waiting_started.wait(5)
        deadline = time.monotonic() + 5
        with connections["default"].cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    return
        raise AssertionError("the second move never waited for the lock")

    thread = threading.Thread(target=waits_for_the_lock)
    executor.transition(
        contract, ContractState.EXPIRED, actor=ACTOR, reason="expired", inside=hold_the_lock_until_the_other_waits
    )
    thread.join(10)

    assert len(outcome) == 1 and isinstance(outcome[0], executor.StaleContract), outcome
    assert event_states(contract) == [ContractState.PREPARING, ContractState.PREPARED, ContractState.EXPIRED]
