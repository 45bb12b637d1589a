"""An approval binds exactly what the operator reviewed (reference 001): a confirmation is sealed when it is
made (operations, preview, base and result by digest) and again when it is approved, with a key outside the
database. Whoever edits the stored record afterwards, without the key, gets a refusal that writes nothing.

The attacker here has write access to the database and nothing else: each test edits rows with
`QuerySet.update`, which skips the services, as a SQL client would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from audit.models import AuditEvent, EventKind
from confirmations import services
from confirmations.models import ConfirmationState, Contract, ContractState, PendingConfirmation
from confirmations.services import DecisionRefused, do_approve_confirmation, do_deny_confirmation, is_authentic
from projects import capability
from projects.capability import apply_intent, intent_for
from projects.models import Project
from projects.plcopen import documents
from projects.preview import preview_change
from projects.recent import RecentValues
from tests.confirmations.helpers import STAMP, project_file, propose_write
from tests.confirmations.operator_helpers import ask

pytestmark = pytest.mark.django_db

C = ConfirmationState
INNOCENT = {"op": "add_variable", "scope": "pou/LineMain", "section": "localVars", "name": "InnocentVar", "type": "INT"}
HOSTILE = {"op": "remove_pou", "id": "pou/FlowTotal"}


def propose(cast, project: Project, op: dict[str, Any] = INNOCENT) -> PendingConfirmation:
    """What a write tool does: preview the operation on the file as it is, and suspend it for a decision."""
    return propose_write(
        cast.caretaker,
        project,
        [op],
        tool="project.write.add_variable",
        question=f"carla asks to add variable InnocentVar to LineMain in {project.slug}.",
        label="add InnocentVar",
    )


def edit(confirmation: PendingConfirmation, **columns: Any) -> None:
    PendingConfirmation.objects.filter(pk=confirmation.pk).update(**columns)


def outcomes(confirmation: PendingConfirmation) -> list[str]:
    rows = AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED, arguments_json__contains=str(confirmation.pk))
    return list(rows.order_by("seq").values_list("outcome", flat=True))


@pytest.fixture
def path(project) -> Path:
    return project_file(project)


def test_a_confirmation_is_sealed_when_made_and_its_approval_when_approved(cast, project, path):
    confirmation = propose(cast, project)
    assert is_authentic(confirmation) and confirmation.seal and not confirmation.decision_seal
    assert confirmation.result_digest == documents.fingerprint(
        preview_change(path.read_bytes(), confirmation.intent, name=project.path).result
    )
    decided = do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert decided.state == C.EXECUTED
    assert PendingConfirmation.objects.get(pk=confirmation.pk).decision_seal
    assert documents.fingerprint(path.read_bytes()) == confirmation.result_digest


def test_an_operation_edited_before_the_decision_is_refused_at_approval_and_nothing_is_written(cast, project, path):
    confirmation = propose(cast, project)
    before = path.read_bytes()
    edit(confirmation, intent=intent_for([HOSTILE], STAMP))
    with pytest.raises(DecisionRefused) as refused:
        do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert refused.value.code == "FORGE_ERR_INTEGRITY"
    assert "edited outside Forge" in refused.value.message
    stored = PendingConfirmation.objects.get(pk=confirmation.pk)
    assert stored.state == C.PENDING and stored.decided_by is None
    assert not Contract.objects.filter(confirmation=confirmation).exists()
    assert path.read_bytes() == before
    assert outcomes(confirmation) == ["refused: integrity"]


@pytest.mark.parametrize(
    "columns",
    [
        {"preview": {"diff": "+ nothing to see", "result": {}}},
        {"base_fingerprint": "0" * 64},
        {"result_digest": "0" * 64},
        {"target": {"project": "other"}},
        {"question": "Add a harmless variable?"},
    ],
    ids=["preview", "base_fingerprint", "result_digest", "target", "question"],
)
def test_any_reviewed_field_edited_makes_the_record_unapprovable(cast, project, path, columns):
    confirmation = propose(cast, project)
    before = path.read_bytes()
    edit(confirmation, **columns)
    assert not is_authentic(PendingConfirmation.objects.get(pk=confirmation.pk))
    with pytest.raises(DecisionRefused, match="edited outside Forge"):
        do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert path.read_bytes() == before


def test_an_operation_edited_after_approval_is_refused_at_execute_and_nothing_is_written(
    cast, project, path, monkeypatch
):
    """The edit lands between the approval's commit and the executor: the decision seal catches it."""
    confirmation = propose(cast, project)
    before = path.read_bytes()
    carry_out = services._carry_out

    def edited_first(approved: PendingConfirmation, actor: str) -> PendingConfirmation:
        edit(approved, intent=intent_for([HOSTILE], STAMP))
        return carry_out(approved, actor)

    monkeypatch.setattr(services, "_carry_out", edited_first)
    decided = do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert decided.state == C.FAILED
    assert decided.outcome["error"] == "FORGE_ERR_INTEGRITY"
    assert path.read_bytes() == before
    assert "FlowTotal" in path.read_text(encoding="utf-8")
    assert not Contract.objects.filter(confirmation=confirmation).exists()
    assert outcomes(confirmation) == ["approved", "failed"]


def test_an_approval_moved_to_another_approver_is_refused_at_execute(cast, project, path, monkeypatch):
    confirmation = propose(cast, project)
    before = path.read_bytes()
    carry_out = services._carry_out

    def reattributed(approved: PendingConfirmation, actor: str) -> PendingConfirmation:
        edit(approved, decided_by=cast.caretaker.user)
        return carry_out(approved, actor)

    monkeypatch.setattr(services, "_carry_out", reattributed)
    decided = do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert decided.state == C.FAILED and decided.outcome["error"] == "FORGE_ERR_INTEGRITY"
    assert path.read_bytes() == before


def test_the_executor_refuses_a_result_that_is_not_the_bytes_previewed(cast, project, path, monkeypatch):
    """Even a record that authenticates is carried out only if it produces the reviewed bytes: here the
    operations mean something else by the time they run (an adapter that computes differently)."""
    confirmation = propose(cast, project)
    before = path.read_bytes()
    from confirmations import executor

    adapter = executor.capability("project.file")
    forward = adapter.forward
    monkeypatch.setattr(adapter, "forward", lambda *args: forward(*args) + b"\n<!-- and something else -->")
    decided = do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert decided.state == C.FAILED and decided.outcome["error"] == "FORGE_ERR_INTEGRITY"
    contract = Contract.objects.get(confirmation=confirmation)
    assert contract.state == ContractState.FAILED and contract.detail == "integrity"
    assert path.read_bytes() == before


def test_a_record_made_before_decisions_were_sealed_cannot_be_approved(cast, project, path):
    confirmation = propose(cast, project)
    edit(confirmation, seal="")
    with pytest.raises(DecisionRefused, match="edited outside Forge"):
        do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    assert PendingConfirmation.objects.get(pk=confirmation.pk).state == C.PENDING


# --- the bytes the preview made, carried out in another process -------------------------------------


@pytest.fixture
def in_another_process(monkeypatch):
    """The approval is carried out by a process that did not make the preview: nothing of it in memory."""
    monkeypatch.setattr(capability, "_results", RecentValues(capability.RESULTS_KEPT))


def test_an_approval_writes_the_bytes_the_preview_made_without_applying_the_operations_again(
    cast, project, path, monkeypatch, in_another_process
):
    confirmation = ask(cast.caretaker, project)
    previewed = bytes(PendingConfirmation.objects.defer(None).get(pk=confirmation.pk).reviewed_result)

    def never(*args, **kwargs):
        raise AssertionError("the operations were applied again")

    monkeypatch.setattr(capability.ProjectFileCapability, "forward", never)
    decided = do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)

    assert decided.state == C.EXECUTED, decided.outcome
    assert path.read_bytes() == previewed


def test_preview_bytes_edited_in_the_database_are_not_written_the_change_is_computed_anew(
    cast, project, path, in_another_process
):
    confirmation = ask(cast.caretaker, project)
    expected = apply_intent(path.read_bytes(), confirmation.intent)
    PendingConfirmation.objects.filter(pk=confirmation.pk).update(reviewed_result=expected.replace(b"zz", b"yy"))

    decided = do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)

    assert decided.state == C.EXECUTED, decided.outcome
    assert path.read_bytes() == expected
    assert documents.fingerprint(expected) == confirmation.result_digest


@pytest.mark.parametrize("decide", ["approve", "deny"])
def test_the_bytes_the_preview_made_are_kept_only_while_the_confirmation_is_pending(cast, project, decide):
    confirmation = ask(cast.caretaker, project)
    assert PendingConfirmation.objects.defer(None).get(pk=confirmation.pk).reviewed_result
    assert "reviewed_result" in PendingConfirmation.objects.get(pk=confirmation.pk).get_deferred_fields()

    if decide == "approve":
        do_approve_confirmation(confirmation.pk, acting_user=cast.operator.user)
    else:
        do_deny_confirmation(confirmation.pk, acting_user=cast.operator.user)

    assert bytes(PendingConfirmation.objects.defer(None).get(pk=confirmation.pk).reviewed_result) == b""
