"""Realistic confirmations and contracts for the console and REST tests: a write asked for on the main fixture
project, approved and carried out by the executor, a target changed behind a contract's back, a contract
left in reconciliation by a failure at one of the executor's step boundaries, and a tampered record."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from confirmations import executor
from confirmations.models import Contract, ContractState, PendingConfirmation
from confirmations.services import do_approve_confirmation, do_create_confirmation
from forge_core.console import OPERATORS_GROUP
from projects.capability import apply_intent, intent_for
from projects.files import inside_root
from projects.models import Project
from tests.confirmations.helpers import previewed_result
from tests.conftest import Member

QUESTION = "Add the local variable zz : INT to LineMain?"
PREVIEW = {
    "changed_ids": ["pou/LineMain/zz"],
    "diff": "--- steps.xml (accepted)\n+++ steps.xml (after this change)\n@@ -1,2 +1,3 @@\n <localVars>\n"
    '+  <variable name="zz"><type><INT/></type></variable>\n-  <!-- gone -->',
    "new_findings": [{"code": "unused", "element_id": "pou/LineMain/zz", "message": "zz is never read"}],
    "resolved_findings": [],
    "result": {"project": "steps", "changed_ids": ["pou/LineMain/zz"]},
}


def add_variable(name: str = "zz") -> list[dict]:
    return [{"op": "add_variable", "scope": "pou/LineMain", "section": "localVars", "name": name, "type": "INT"}]


def ask(
    member: Member,
    project: Project,
    *,
    name: str = "zz",
    requires_typed_id: bool = False,
    key_memorable_id: str = "",
) -> PendingConfirmation:
    """A client (member's token) asks to add a variable to the project; it waits for an operator. The bytes its
    preview made are kept with it, as a write tool keeps them."""
    project.refresh_from_db()
    operations = add_variable(name)
    intent = intent_for(operations)
    return do_create_confirmation(
        tool="project.write.add_variable",
        arguments={"project": project.slug, "operation": operations[0]},
        question=QUESTION,
        preview=PREVIEW,
        principal=member.user,
        session_id="session-of-carla",
        client_label=member.token.label,
        project=project.slug,
        capability="project.file",
        method="apply_operations",
        target={"project": project.slug},
        intent=intent,
        base_fingerprint=project.fingerprint,
        result_digest=previewed_result(project, intent),
        result=apply_intent(project_file_of(project).read_bytes(), intent),
        label=f"add variable {name} to LineMain",
        requires_typed_id=requires_typed_id,
        key_memorable_id=key_memorable_id,
    )


def carried_out(member: Member, approver: Member, project: Project, *, name: str = "zz") -> Contract:
    """A change asked for, approved and carried out: its VERIFIED contract."""
    decided = do_approve_confirmation(ask(member, project, name=name).pk, acting_user=approver.user)
    return Contract.objects.get(pk=decided.outcome["result"]["contract"])


class Stop(Exception):
    """Stands for a crash at one of the executor's step boundaries."""


def left_in_reconciliation(project: Project, *, at: str) -> Contract:
    """A contract whose execution stopped at step `at` ("before_write": nothing written; "before_verified":
    written and read back), so the executor handed it to reconciliation."""

    def step(name: str) -> None:
        if name == at:
            raise Stop(name)

    project.refresh_from_db()
    prepared = executor.prepare(
        capability_name="project.file",
        method="apply_operations",
        target={"project": project.slug},
        intent=intent_for(add_variable(f"crash_{at}")),
        idempotency_key=f"tests:{at}",
        approval={"authority": "tests"},
        actor="tests",
        label=f"stopped at {at}",
        expected_fingerprint=project.fingerprint,
    )
    contract = executor.execute(prepared, actor="tests", step=step)
    assert contract.state == ContractState.RECONCILIATION
    return contract


def project_file_of(project: Project) -> Path:
    return inside_root(project.path)


def change_behind_its_back(project: Project) -> None:
    """Someone edits the project file outside Forge."""
    path = project_file_of(project)
    path.write_bytes(path.read_bytes() + b"\n<!-- edited by hand -->\n")


def tamper(contract: Contract) -> None:
    """Edit a contract's row in the database, as someone with database access could."""
    Contract.objects.filter(pk=contract.pk).update(label="something else")


def expire(confirmation: PendingConfirmation) -> None:
    """Its time to decide has passed."""
    PendingConfirmation.objects.filter(pk=confirmation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def withdraw_from_operators(codename: str) -> None:
    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(Permission.objects.get(codename=codename))


def rollback_left_in_reconciliation(contract: Contract) -> Contract:
    """A VERIFIED contract whose rollback stopped after writing, before it was verified: in reconciliation."""

    def step(name: str) -> None:
        if name == "before_verified":
            raise Stop(name)

    stuck = executor.rollback(contract, actor="tests", typed_id=contract.memorable_id, step=step)
    assert stuck.state == ContractState.RECONCILIATION
    return stuck
