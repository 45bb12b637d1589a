"""The two declared state machines (confirmations.models) and the one transition function that enforces the
contract's (confirmations.executor.transition): every pair of states is either declared and allowed or
refused, a refused or stale transition changes nothing, and RECONCILIATION is left only through an
operator's resolution."""

from __future__ import annotations

import itertools
import os

import pytest

from audit.models import AuditEvent, EventKind
from confirmations import executor
from confirmations.models import (
    CONFIRMATION_TRANSITIONS,
    CONTRACT_TRANSITIONS,
    RESOLUTIONS,
    ConfirmationState,
    Contract,
    ContractState,
    PendingConfirmation,
    TargetReservation,
    TransitionRefused,
)
from forge_core.capabilities import ExecutionRefused
from tests.confirmations.helpers import ACTOR, event_states, left_in_flight_by, prepare, project_file, stored

S = ContractState


def pairs(states, table, *, declared: bool) -> list:
    return [
        pytest.param(a, b, id=f"{a}->{b}")
        for a, b in itertools.product(states, repeat=2)
        if (b in table.get(a, frozenset())) == declared
    ]


# --- the tables -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("current", "to"), pairs(ConfirmationState, CONFIRMATION_TRANSITIONS, declared=False))
def test_a_confirmation_transition_that_is_not_declared_is_refused(current, to):
    with pytest.raises(TransitionRefused):
        PendingConfirmation.check_transition(current, to)


@pytest.mark.parametrize(("current", "to"), pairs(ConfirmationState, CONFIRMATION_TRANSITIONS, declared=True))
def test_a_declared_confirmation_transition_passes(current, to):
    PendingConfirmation.check_transition(current, to)


@pytest.mark.parametrize(("current", "to"), pairs(ContractState, CONTRACT_TRANSITIONS, declared=False))
def test_a_contract_transition_that_is_not_declared_is_refused(current, to):
    with pytest.raises(TransitionRefused):
        Contract.check_transition(current, to)


@pytest.mark.parametrize(("current", "to"), pairs(ContractState, CONTRACT_TRANSITIONS, declared=True))
def test_a_declared_contract_transition_passes(current, to):
    Contract.check_transition(current, to)


def test_the_contract_machine_is_the_one_reference_001_draws():
    assert {a: set(b) for a, b in CONTRACT_TRANSITIONS.items()} == {
        S.PREPARING: {S.PREPARED, S.FAILED},
        S.PREPARED: {S.EXECUTING, S.EXPIRED},
        S.EXECUTING: {S.VERIFIED, S.FAILED, S.RECONCILIATION},
        S.VERIFIED: {S.ROLLING_BACK},
        S.ROLLING_BACK: {S.ROLLED_BACK, S.ROLLBACK_FAILED, S.RECONCILIATION},
    }
    assert RESOLUTIONS == {"applied": S.VERIFIED, "not_applied": S.FAILED, "rolled_back_by_hand": S.ROLLED_BACK}


# --- through executor.transition on a real contract ----------------------------------------------


@pytest.fixture
def prepared(project) -> Contract:
    return prepare(project)


@pytest.fixture
def in_reconciliation(prepared) -> Contract:
    contract = left_in_flight_by(prepared, pid=os.getpid())
    return executor.transition(contract, S.RECONCILIATION, actor=ACTOR, reason="readback_mismatch")


@pytest.mark.parametrize("to", [S.PREPARING, S.PREPARED, S.VERIFIED, S.RECONCILIATION, S.ROLLED_BACK, S.FAILED])
def test_an_illegal_transition_of_a_stored_contract_is_refused_and_changes_nothing(prepared, project, root, to):
    before = stored(prepared, project_file(project, root))
    with pytest.raises(TransitionRefused):
        executor.transition(prepared, to, actor=ACTOR, reason="test")
    assert stored(prepared, project_file(project, root)) == before
    assert Contract.objects.get(pk=prepared.pk).state == S.PREPARED


def test_a_transition_from_a_stale_state_and_version_is_refused_and_changes_nothing(prepared):
    stale = Contract.objects.get(pk=prepared.pk)
    executor.transition(prepared, S.EXPIRED, actor=ACTOR, reason="expired")
    before = stored(prepared)
    with pytest.raises(executor.StaleContract) as refused:
        executor.transition(stale, S.EXECUTING, actor=ACTOR, reason="acquired")
    assert refused.value.reason == "stale"
    assert stored(prepared) == before
    assert (before.state, before.version) == (S.EXPIRED, 3)


def test_a_legal_transition_moves_state_and_version_and_appends_one_chained_event(prepared):
    audit_before = AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION).count()
    moved = executor.transition(prepared, S.EXPIRED, actor=ACTOR, reason="expired")
    row = executor.load(moved.pk)
    assert (row.state, row.version, row.detail) == (S.EXPIRED, 3, "expired")
    assert event_states(row) == [S.PREPARING, S.PREPARED, S.EXPIRED]
    assert AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION).count() == audit_before + 1


def test_entering_executing_reserves_the_target_for_that_contract(prepared):
    left_in_flight_by(prepared, pid=os.getpid())
    assert TargetReservation.objects.get(target_digest=prepared.target_digest).contract_id == prepared.pk


@pytest.mark.parametrize("to", list(ContractState))
def test_reconciliation_cannot_be_left_through_a_plain_transition(in_reconciliation, to):
    before = stored(in_reconciliation)
    with pytest.raises(TransitionRefused):
        executor.transition(in_reconciliation, to, actor=ACTOR, reason="test")
    assert stored(in_reconciliation) == before
    assert before.reservation == in_reconciliation.pk


def test_the_resolution_flag_does_not_open_an_undeclared_transition_outside_reconciliation(prepared):
    before = stored(prepared)
    with pytest.raises(TransitionRefused):
        executor.transition(prepared, S.VERIFIED, actor=ACTOR, reason="resolved:applied", resolution=True)
    assert stored(prepared) == before


@pytest.mark.parametrize(("conclusion", "to"), list(RESOLUTIONS.items()))
def test_resolve_leaves_reconciliation_for_the_concluded_state_audited_and_releases_the_target(
    in_reconciliation, conclusion, to
):
    resolved = executor.resolve(in_reconciliation, conclusion, actor="oscar")
    row = executor.load(resolved.pk)
    assert (row.state, row.detail) == (to, f"resolved:{conclusion}")
    assert event_states(row)[-2:] == [S.RECONCILIATION, to]
    assert not TargetReservation.objects.filter(target_digest=row.target_digest).exists()
    audit = AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION).order_by("-seq").first()
    assert audit.called_by == "oscar"
    assert audit.arguments["from"] == S.RECONCILIATION
    assert audit.arguments["to"] == to
    assert audit.arguments["reason"] == f"resolved:{conclusion}"


def test_resolving_as_applied_seals_the_intended_result_as_the_post_forward_fingerprint(in_reconciliation):
    resolved = executor.resolve(in_reconciliation, "applied", actor="oscar")
    assert executor.load(resolved.pk).post_fingerprint == in_reconciliation.expected_post_fingerprint


def test_resolve_refuses_a_contract_that_is_not_in_reconciliation(prepared):
    before = stored(prepared)
    with pytest.raises(ExecutionRefused) as refused:
        executor.resolve(prepared, "applied", actor="oscar")
    assert refused.value.reason == "state"
    assert stored(prepared) == before


def test_resolve_refuses_a_conclusion_it_does_not_know(in_reconciliation):
    before = stored(in_reconciliation)
    with pytest.raises(ExecutionRefused) as refused:
        executor.resolve(in_reconciliation, "expired", actor="oscar")
    assert refused.value.reason == "conclusion"
    assert stored(in_reconciliation) == before


@pytest.fixture
def rollback_in_reconciliation(prepared) -> Contract:
    """A contract carried out (VERIFIED), whose rollback then ended in reconciliation."""
    verified = executor.execute(prepared, actor=ACTOR)
    assert verified.state == S.VERIFIED
    rolling = executor.transition(verified, S.ROLLING_BACK, actor=ACTOR, reason="rollback")
    return executor.transition(rolling, S.RECONCILIATION, actor=ACTOR, reason="readback_mismatch")


def test_a_rollbacks_reconciliation_concluded_applied_is_rolled_back(rollback_in_reconciliation):
    resolved = executor.resolve(rollback_in_reconciliation, "applied", actor="oscar")
    assert executor.load(resolved.pk).state == S.ROLLED_BACK


def test_a_rollbacks_reconciliation_concluded_not_applied_is_verified_again_with_its_sealed_fingerprint(
    rollback_in_reconciliation,
):
    sealed = rollback_in_reconciliation.post_fingerprint
    resolved = executor.resolve(rollback_in_reconciliation, "not_applied", actor="oscar")
    row = executor.load(resolved.pk)
    assert (row.state, row.post_fingerprint) == (S.VERIFIED, sealed)
