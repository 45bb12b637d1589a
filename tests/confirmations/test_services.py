"""Pending confirmations (confirmations.services): created by a write call, decided by an operator, carried
out through the executor, refused with a code and nothing changed, expired, cancelled with their session,
settled after a crash, and announced on the channel layer once committed.

Carla stands for the AI client's owner (no confirmation rights); Olivia and Oscar are operators."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from guardian.shortcuts import assign_perm

from audit.models import AuditEvent, EventKind
from caretaker.fingerprint import memorable_id
from confirmations import executor, services
from confirmations.models import ConfirmationState, Contract, ContractState, PendingConfirmation
from confirmations.services import (
    DecisionRefused,
    do_approve_confirmation,
    do_cancel_confirmations,
    do_create_confirmation,
    do_deny_confirmation,
    expire_due,
    outcome_of,
)
from projects.capability import APPLY_OPERATIONS, ProjectFileCapability, apply_intent
from projects.models import Project
from projects.plcopen import documents
from tests.confirmations.helpers import (
    NEW_VARIABLE,
    add_variable,
    add_variable_intent,
    finished_pid,
    prepare,
    previewed_result,
    project_file,
)

pytestmark = pytest.mark.django_db

C = ConfirmationState
TOOL = "project.write"


@pytest.fixture
def path(project, root) -> Path:
    return project_file(project, root)


@pytest.fixture
def old(path) -> bytes:
    return path.read_bytes()


def ask(cast, project: Project, *, session: str = "session-1", **overrides: Any) -> PendingConfirmation:
    """What a write call does: suspend an add_variable change until an operator decides."""
    intent = add_variable_intent()
    fields: dict[str, Any] = {
        "tool": TOOL,
        "arguments": {"project": project.slug, "operations": [add_variable()]},
        "question": f"Add the variable {NEW_VARIABLE} to LineMain?",
        "preview": {"diff": "+ <variable ...>", "result": {"changed_ids": [f"pou/LineMain/var/{NEW_VARIABLE}"]}},
        "principal": cast.caretaker.user,
        "session_id": session,
        "client_label": "carla-client",
        "project": project.slug,
        "capability": "project.file",
        "method": APPLY_OPERATIONS,
        "target": {"project": project.slug},
        "intent": intent,
        "base_fingerprint": project.fingerprint,
        "label": f"add {NEW_VARIABLE}",
    }
    fields.update(overrides)
    fields.setdefault("result_digest", previewed_result(project, fields["intent"]))
    return do_create_confirmation(**fields)


def decided_rows(confirmation: PendingConfirmation) -> list[tuple[str, str]]:
    return [
        (row.outcome, row.called_by)
        for row in AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED).order_by("seq")
        if row.arguments["confirmation"] == str(confirmation.id)
    ]


def make_due(confirmation: PendingConfirmation) -> None:
    PendingConfirmation.objects.filter(pk=confirmation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def reloaded(confirmation: PendingConfirmation) -> PendingConfirmation:
    return PendingConfirmation.objects.get(pk=confirmation.pk)


# --- creating ---------------------------------------------------------------------------------------


def test_a_created_confirmation_is_pending(cast, project):
    confirmation = reloaded(ask(cast, project))
    assert confirmation.state == C.PENDING
    assert confirmation.options == ["approve", "deny"]
    assert confirmation.decided_by is None and confirmation.outcome == {}


def test_a_created_confirmation_expires_after_the_tools_expiry(settings, cast, project):
    settings.FORGE_CONFIRM_EXPIRY_BY_TOOL = {TOOL: 120.0}
    confirmation = reloaded(ask(cast, project))
    assert timedelta(seconds=119) < confirmation.expires_at - confirmation.created_at <= timedelta(seconds=120)


def test_a_tool_without_its_own_expiry_gets_the_default_expiry(settings, cast, project):
    settings.FORGE_CONFIRM_EXPIRY_SECONDS = 30.0
    settings.FORGE_CONFIRM_EXPIRY_BY_TOOL = {"some.other.tool": 600.0}
    confirmation = reloaded(ask(cast, project))
    assert timedelta(seconds=29) < confirmation.expires_at - confirmation.created_at <= timedelta(seconds=30)


def test_a_created_confirmation_has_the_memorable_id_of_its_id(cast, project):
    confirmation = ask(cast, project)
    assert confirmation.memorable_id == memorable_id(str(confirmation.id))
    assert len(confirmation.memorable_id.split("-")) == 4


def test_creating_a_confirmation_is_audited_with_its_digest_not_its_arguments(cast, project):
    confirmation = ask(cast, project)
    row = AuditEvent.objects.get(kind=EventKind.CONFIRMATION_CREATED)
    assert (row.outcome, row.called_by, row.session, row.project) == ("pending", "carla", "session-1", "steps")
    assert row.arguments == {
        "confirmation": str(confirmation.id),
        "memorable_id": confirmation.memorable_id,
        "arguments_digest": services.arguments_digest(confirmation.arguments),
    }
    assert NEW_VARIABLE not in row.arguments_json


def test_the_arguments_digest_is_the_sha256_of_the_arguments_in_canonical_json():
    # The audit log's form (forge_core.canonical): text as UTF-8 characters, not \u escapes.
    digest = services.arguments_digest({"name": "Förderband", "op": "add_pou"})
    assert digest == hashlib.sha256('{"name":"Förderband","op":"add_pou"}'.encode()).hexdigest()


# --- approving --------------------------------------------------------------------------------------


def test_approval_by_an_operator_carries_the_change_out_and_ends_executed(cast, project, path, old):
    confirmation = do_approve_confirmation(ask(cast, project).id, acting_user=cast.operator.user)
    stored = reloaded(confirmation)
    assert stored.state == C.EXECUTED
    assert stored.decided_by == cast.operator.user
    assert stored.decided_at is not None and stored.finished_at is not None
    assert path.read_bytes() == apply_intent(old, add_variable_intent())


def test_an_executed_confirmation_reports_its_contract_and_the_new_accepted_revision(cast, project):
    confirmation = ask(cast, project)
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    contract = Contract.objects.get(confirmation=confirmation)
    assert contract.state == ContractState.VERIFIED
    assert reloaded(confirmation).outcome == {
        "state": C.EXECUTED,
        "result": {
            "changed_ids": [f"pou/LineMain/var/{NEW_VARIABLE}"],
            "accepted_revision": 2,
            "contract": str(contract.id),
            "contract_memorable_id": contract.memorable_id,
        },
    }
    project.refresh_from_db()
    assert project.accepted_revision == 2


def test_approval_and_execution_are_audited_as_decisions(cast, project):
    confirmation = ask(cast, project)
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    assert decided_rows(confirmation) == [("approved", "olivia"), ("executed", "executor")]


def test_the_verified_move_appends_the_contracts_the_projects_and_the_confirmations_rows_as_one_batch(cast, project):
    confirmation = ask(cast, project)
    with CaptureQueriesContext(connection) as queries:
        do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)

    last = list(AuditEvent.objects.order_by("-seq")[:3])[::-1]
    assert [(row.kind, row.outcome) for row in last] == [
        (EventKind.CONTRACT_TRANSITION, ContractState.VERIFIED),
        (EventKind.PROJECT_WRITTEN, "new accepted revision"),
        (EventKind.CONFIRMATION_DECIDED, C.EXECUTED),
    ]
    # One INSERT of audit rows per transaction: the decision, prepare, EXECUTING and VERIFIED.
    appends = [query for query in queries.captured_queries if 'INSERT INTO "audit_auditevent"' in query["sql"]]
    assert len(appends) == 4


def test_a_confirmation_that_left_approved_while_its_change_was_carried_out_is_not_executed_over(
    monkeypatch, cast, project, path
):
    confirmation = ask(cast, project)
    settle = ProjectFileCapability.settle

    def settled_elsewhere_meanwhile(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # As a recovery would leave it (in this transaction, which the refused move then rolls back).
        PendingConfirmation.objects.filter(pk=confirmation.pk).update(state=C.FAILED)
        return settle(self, *args, **kwargs)

    monkeypatch.setattr(ProjectFileCapability, "settle", settled_elsewhere_meanwhile)
    done = do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)

    contract = Contract.objects.get(confirmation=confirmation)
    assert contract.state == ContractState.RECONCILIATION
    assert (done.state, done.outcome["reason"]) == (C.FAILED, "reconciliation")
    assert reloaded(confirmation).state == C.FAILED
    assert decided_rows(confirmation) == [("approved", "olivia"), ("failed", "executor")]
    assert not AuditEvent.objects.filter(kind=EventKind.PROJECT_WRITTEN).exists()  # rolled back with VERIFIED


def test_outcome_of_an_executed_confirmation_is_its_result(cast, project):
    confirmation = do_approve_confirmation(ask(cast, project).id, acting_user=cast.operator.user)
    outcome = outcome_of(reloaded(confirmation))
    assert outcome["state"] == C.EXECUTED and outcome["pending_id"] == str(confirmation.id)
    assert outcome["result"]["accepted_revision"] == 2


def test_outcome_of_a_pending_confirmation_says_when_it_expires(cast, project):
    confirmation = ask(cast, project)
    assert outcome_of(confirmation) == {
        "pending_id": str(confirmation.id),
        "memorable_id": confirmation.memorable_id,
        "tool": TOOL,
        "state": C.PENDING,
        "expires_at": confirmation.expires_at.isoformat(),
    }


def test_a_second_approval_is_refused_as_already_decided_and_the_file_is_written_once(cast, project, path):
    confirmation = ask(cast, project)
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    written = path.read_bytes()
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.id, acting_user=cast.other_operator.user)
    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_ALREADY_DECIDED", 409)
    assert reloaded(confirmation).decided_by == cast.operator.user
    assert Contract.objects.count() == 1
    assert path.read_bytes() == written
    project.refresh_from_db()
    assert project.accepted_revision == 2


def test_a_denied_confirmation_cannot_be_approved_afterwards(cast, project, path, old):
    confirmation = ask(cast, project)
    do_deny_confirmation(confirmation.id, acting_user=cast.operator.user)
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.id, acting_user=cast.other_operator.user)
    assert refused.value.code == "FORGE_ERR_ALREADY_DECIDED"
    assert reloaded(confirmation).state == C.DENIED
    assert path.read_bytes() == old


def test_an_unknown_confirmation_is_not_found(cast, db):
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation("not-a-uuid", acting_user=cast.operator.user)
    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_NOT_FOUND", 404)


def test_approval_after_the_expiry_is_refused_and_expires_the_confirmation(cast, project, path, old):
    confirmation = ask(cast, project)
    make_due(confirmation)
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_EXPIRED", 409)
    stored = reloaded(confirmation)
    assert stored.state == C.EXPIRED
    assert stored.outcome["error"] == "FORGE_ERR_CONFIRMATION_EXPIRED"
    assert decided_rows(confirmation) == [("expired", "olivia")]
    assert not Contract.objects.exists()
    assert path.read_bytes() == old


def test_a_user_without_the_decide_permission_is_refused_and_the_refusal_is_audited(cast, project, path, old):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()
    assign_perm("projects.view_project", carla, project)  # she sees it: what she lacks is the permission to decide
    confirmation = ask(cast, project)
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.id, acting_user=carla)
    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_PERMISSION_DENIED", 403)
    assert decided_rows(confirmation) == [("refused: approve without permission", "carla")]
    assert reloaded(confirmation).state == C.PENDING
    assert path.read_bytes() == old


def test_a_user_without_the_decide_permission_cannot_deny_either(cast, project):
    assign_perm("projects.view_project", cast.caretaker.user, project)
    confirmation = ask(cast, project)
    with pytest.raises(DecisionRefused) as refused:
        do_deny_confirmation(confirmation.id, acting_user=cast.caretaker.user)
    assert refused.value.status == 403
    assert decided_rows(confirmation) == [("refused: deny without permission", "carla")]
    assert reloaded(confirmation).state == C.PENDING


def test_a_wrong_typed_id_is_refused_when_the_confirmation_requires_one(cast, project, path, old):
    confirmation = ask(cast, project, requires_typed_id=True)
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.id, acting_user=cast.operator.user, typed_id="abandon-ability-able-about")
    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_TYPED_ID_MISMATCH", 400)
    assert reloaded(confirmation).state == C.PENDING
    assert path.read_bytes() == old


def test_a_decided_confirmation_is_refused_as_decided_whatever_id_is_typed(cast, project):
    confirmation = ask(cast, project, requires_typed_id=True)
    do_deny_confirmation(confirmation.id, acting_user=cast.operator.user)
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.id, acting_user=cast.operator.user, typed_id="wrong-words-typed-here")
    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_ALREADY_DECIDED", 409)


def test_the_confirmations_memorable_id_typed_loosely_approves_it(cast, project):
    confirmation = ask(cast, project, requires_typed_id=True)
    typed = confirmation.memorable_id.upper().replace("-", " ")
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user, typed_id=typed)
    assert reloaded(confirmation).state == C.EXECUTED


def test_where_a_key_is_involved_its_memorable_id_must_be_typed_not_the_confirmations(cast, project):
    key_id = memorable_id(b"a public key")
    confirmation = ask(cast, project, requires_typed_id=True, key_memorable_id=key_id)
    with pytest.raises(DecisionRefused):
        do_approve_confirmation(confirmation.id, acting_user=cast.operator.user, typed_id=confirmation.memorable_id)
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user, typed_id=key_id)
    assert reloaded(confirmation).state == C.EXECUTED


def test_a_project_changed_between_preview_and_approval_fails_with_target_drift_and_is_left_alone(
    cast, project, path, old
):
    confirmation = ask(cast, project)
    theirs = apply_intent(old, add_variable_intent("SomeoneElsesVariable"))
    path.write_bytes(theirs)
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    stored = reloaded(confirmation)
    assert stored.state == C.FAILED
    assert (stored.outcome["error"], stored.outcome["reason"]) == ("FORGE_ERR_TARGET_DRIFT", "target_drift")
    contract = Contract.objects.get(confirmation=confirmation)
    assert (contract.state, contract.detail) == (ContractState.FAILED, "target_drift")
    assert stored.outcome["contract"] == str(contract.id)
    assert path.read_bytes() == theirs


def test_approval_while_the_project_awaits_a_reconciliation_fails_and_writes_nothing(cast, project, path, old):
    theirs = apply_intent(old, add_variable_intent("SomeoneElsesVariable"))

    def overwrite(name: str) -> None:
        if name == "after_rename":
            path.write_bytes(theirs)

    holder = executor.execute(prepare(project, key="earlier"), actor="oscar", step=overwrite)
    assert holder.state == ContractState.RECONCILIATION
    confirmation = ask(cast, project, base_fingerprint=documents.fingerprint(theirs))
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    stored = reloaded(confirmation)
    assert stored.state == C.FAILED
    assert (stored.outcome["error"], stored.outcome["reason"]) == ("FORGE_ERR_RECONCILIATION", "target_busy")
    assert Contract.objects.get(confirmation=confirmation).state == ContractState.EXPIRED
    assert path.read_bytes() == theirs


# --- denying, expiring, cancelling ------------------------------------------------------------------


def test_a_denied_confirmation_ends_denied_with_the_denial_code_and_writes_nothing(cast, project, path, old):
    confirmation = ask(cast, project)
    do_deny_confirmation(confirmation.id, acting_user=cast.operator.user, reason="not on a Friday")
    stored = reloaded(confirmation)
    assert stored.state == C.DENIED
    assert stored.decided_by == cast.operator.user
    assert stored.outcome["error"] == "FORGE_ERR_CONFIRMATION_DENIED"
    assert stored.outcome["reason"] == "denied"
    assert decided_rows(confirmation) == [("denied", "olivia")]
    assert not Contract.objects.exists()
    assert path.read_bytes() == old


def test_a_denial_after_the_expiry_is_refused_and_expires_the_confirmation(cast, project):
    confirmation = ask(cast, project)
    make_due(confirmation)
    with pytest.raises(DecisionRefused) as refused:
        do_deny_confirmation(confirmation.id, acting_user=cast.operator.user)
    assert refused.value.code == "FORGE_ERR_EXPIRED"
    assert reloaded(confirmation).state == C.EXPIRED


def test_expire_due_expires_only_the_pending_confirmations_past_their_time(cast, project):
    due = ask(cast, project)
    not_due = ask(cast, project)
    decided = ask(cast, project)
    do_deny_confirmation(decided.id, acting_user=cast.operator.user)
    make_due(due)
    make_due(decided)
    assert expire_due() == 1
    assert [reloaded(c).state for c in (due, not_due, decided)] == [C.EXPIRED, C.PENDING, C.DENIED]
    assert reloaded(due).outcome["error"] == "FORGE_ERR_CONFIRMATION_EXPIRED"
    assert decided_rows(due) == [("expired", "expiry")]


def test_cancelling_a_sessions_confirmations_cancels_only_its_pending_ones(cast, project):
    first = ask(cast, project, session="ending")
    second = ask(cast, project, session="ending")
    denied = ask(cast, project, session="ending")
    do_deny_confirmation(denied.id, acting_user=cast.operator.user)
    other = ask(cast, project, session="staying")
    assert do_cancel_confirmations("session_ended", sessions=["ending"], acting_user="session-end") == 2
    assert [reloaded(c).state for c in (first, second, denied, other)] == [
        C.CANCELLED,
        C.CANCELLED,
        C.DENIED,
        C.PENDING,
    ]
    outcome = reloaded(first).outcome
    assert (outcome["error"], outcome["reason"], outcome["cause"]) == (
        "FORGE_ERR_CONFIRMATION_CANCELLED",
        "cancelled",
        "session_ended",
    )
    assert decided_rows(first) == [("cancelled: session_ended", "session-end")]


# --- recovery after a crash -------------------------------------------------------------------------


class ProcessDied(BaseException):
    """The approving process stopped here (as on SIGKILL): no handler below the top runs."""


@pytest.fixture
def approve_in_a_process_that_dies(monkeypatch, cast):
    """Approve as a process (pid of one that has ended) that dies at the adapter's `where` call."""

    def approve(confirmation: PendingConfirmation, where: str) -> None:
        def die(*args: Any, **kwargs: Any) -> None:
            raise ProcessDied

        with monkeypatch.context() as patch:
            patch.setattr(executor, "executor_identity", lambda: f"{socket.gethostname()}:{finished_pid()}")
            patch.setattr(ProjectFileCapability, where, die)
            with pytest.raises(ProcessDied):
                do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)

    return approve


def test_recovery_settles_an_approval_whose_contract_went_to_reconciliation_as_failed(
    cast, project, path, old, approve_in_a_process_that_dies
):
    confirmation = ask(cast, project)
    approve_in_a_process_that_dies(confirmation, "write")
    assert reloaded(confirmation).state == C.APPROVED
    contract = Contract.objects.get(confirmation=confirmation)
    assert contract.state == ContractState.EXECUTING
    services.recover()
    assert executor.load(contract.pk).state == ContractState.RECONCILIATION
    stored = reloaded(confirmation)
    assert stored.state == C.FAILED
    assert (stored.outcome["error"], stored.outcome["reason"]) == ("FORGE_ERR_RECONCILIATION", "reconciliation")
    assert stored.outcome["contract_memorable_id"] == contract.memorable_id
    assert path.read_bytes() == old


def test_recovery_leaves_an_approval_made_moments_ago_without_a_contract_alone(
    cast, project, approve_in_a_process_that_dies
):
    confirmation = ask(cast, project)
    approve_in_a_process_that_dies(confirmation, "identity")
    assert not Contract.objects.exists()
    services.recover()
    assert reloaded(confirmation).state == C.APPROVED


def test_recovery_settles_an_old_approval_that_never_got_a_contract_as_interrupted(
    settings, cast, project, approve_in_a_process_that_dies
):
    confirmation = ask(cast, project)
    approve_in_a_process_that_dies(confirmation, "identity")
    settings.FORGE_EXECUTOR_LEASE_SECONDS = 0
    services.recover()
    stored = reloaded(confirmation)
    assert stored.state == C.FAILED
    assert (stored.outcome["error"], stored.outcome["reason"]) == ("FORGE_ERR_CONFIRMATION_EXPIRED", "interrupted")


def test_recovery_leaves_an_executed_confirmation_as_it_is(cast, project):
    confirmation = do_approve_confirmation(ask(cast, project).id, acting_user=cast.operator.user)
    before = reloaded(confirmation)
    services.recover()
    after = reloaded(confirmation)
    assert (after.state, after.outcome, after.finished_at) == (before.state, before.outcome, before.finished_at)


# --- announcements on the channel layer -------------------------------------------------------------


@pytest.fixture
def channel_layer(settings) -> Iterator[Any]:
    # The in-memory layer (whatever this run's REDIS_URL) is a process-wide singleton: start from a new
    # one, leave none behind.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.pop("default", None)
    yield get_channel_layer()
    channel_layers.backends.pop("default", None)


async def _join(layer: Any, group: str) -> str:
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return channel


async def _receive(layer: Any, channel: str, count: int = 1, bound: float = 5.0) -> list[dict[str, Any]]:
    async with asyncio.timeout(bound):
        return [await layer.receive(channel) for _ in range(count)]


@pytest.mark.django_db(transaction=True)
def test_approval_announces_the_final_outcome_on_the_confirmations_group_after_commit(cast, project, channel_layer):
    confirmation = ask(cast, project)
    channel = async_to_sync(_join)(channel_layer, services.confirmation_group(confirmation.id))
    done = do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    [message] = async_to_sync(_receive)(channel_layer, channel)
    assert message == {"type": "confirmation.decided", "outcome": services.outcome_of(done)}
    assert message["outcome"]["state"] == C.EXECUTED
    assert message["outcome"]["result"]["contract"] == str(done.contract.id)


@pytest.mark.django_db(transaction=True)
def test_a_decision_rolled_back_with_its_transaction_is_never_announced(cast, project, channel_layer):
    confirmation = ask(cast, project)
    channel = async_to_sync(_join)(channel_layer, services.confirmation_group(confirmation.id))

    class Abandoned(Exception):
        pass

    with pytest.raises(Abandoned), transaction.atomic():
        do_deny_confirmation(confirmation.id, acting_user=cast.operator.user)
        raise Abandoned
    assert reloaded(confirmation).state == C.PENDING
    do_approve_confirmation(confirmation.id, acting_user=cast.operator.user)
    # Had the denial been announced before its commit, it would be the first message here.
    [message] = async_to_sync(_receive)(channel_layer, channel)
    assert message["outcome"]["state"] == C.EXECUTED
