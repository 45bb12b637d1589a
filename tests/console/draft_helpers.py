"""Working drafts for the console and REST tests of their review: change groups begun and staged through
`projects.drafts` directly, as the change_group tools do for a client's session, on the main fixture project.

Carla is the AI client's owner (her token labelled carla-client); Oscar's client works in a second session."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import Permission

from audit.models import AuditEvent
from confirmations import executor
from confirmations.models import Contract, ContractState
from console.acceptance import CAPABILITY
from projects import drafts, plcopen
from projects.capability import APPLY_OPERATIONS, intent_for
from projects.files import inside_root
from projects.models import ChangeGroup, Project
from projects.services import do_import_project
from tests.conftest import Member
from tests.projects.conftest import MAIN, fixture_bytes

SESSION = "session-of-carla"
OTHER_SESSION = "session-of-oscar"
RATIONALE = "The line needs a counter of finished shifts for the night report."


def import_fixture(slug: str = "steps") -> Project:
    return do_import_project(fixture_bytes(MAIN), slug=slug, acting_user="tests")


def add(name: str, scope: str = "pou/LineMain") -> dict:
    return {"op": "add_variable", "scope": scope, "section": "localVars", "name": name, "type": "INT"}


def revision_of(project: Project) -> int:
    return drafts.status(project)["working_revision"]


def begin(
    project: Project,
    member: Member,
    *,
    session: str = SESSION,
    title: str = "Shift counter",
    rationale: str = RATIONALE,
) -> ChangeGroup:
    group, _ = drafts.do_begin_group(
        project,
        session_id=session,
        principal=member.user,
        client_label=member.token.label,
        title=title,
        rationale=rationale,
        expected_revision=revision_of(project),
    )
    return group


def stage(project: Project, group: ChangeGroup, ops: list[dict], *, session: str = SESSION) -> dict:
    return drafts.do_stage(project, group.pk, ops, session_id=session, expected_revision=revision_of(project))


def drafted(project: Project, member: Member, *names: str, session: str = SESSION, **group) -> ChangeGroup:
    """A group of `member`'s client that adds local variables `names` to LineMain, submitted."""
    began = begin(project, member, session=session, **group)
    stage(project, began, [add(name) for name in names], session=session)
    drafts.do_submit(
        project, began.pk, session_id=session, expected_revision=revision_of(project), acknowledge_findings=True
    )
    began.refresh_from_db()
    return began


def draft_bytes(project: Project) -> bytes:
    return plcopen.serialize(drafts.current(project).document)


def draft_digest(project: Project) -> str:
    """What a reviewer's accept carries besides the revision: the SHA-256 of the file the draft writes."""
    return plcopen.fingerprint(draft_bytes(project))


def project_file(project: Project) -> Path:
    return inside_root(project.path)


def edit_by_hand(project: Project) -> None:
    """Someone changes the project file outside Forge (the next read records a new accepted revision)."""
    path = project_file(project)
    path.write_bytes(path.read_bytes() + b"\n<!-- edited by hand -->\n")


def states(*groups: ChangeGroup) -> list[str]:
    for group in groups:
        group.refresh_from_db()
    return [group.state for group in groups]


def audit_rows(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind).order_by("seq"))


def withdraw_approve_change() -> None:
    """Nobody in the operators group holds approve_change on projects any more (model permission)."""
    from django.contrib.auth.models import Group

    from forge_core.console import OPERATORS_GROUP

    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(Permission.objects.get(codename="approve_change"))


class Stop(Exception):
    """Stands for a crash between writing the file and verifying it."""


def file_held_by_a_reconciliation(project: Project) -> Contract:
    """A direct write whose contract stopped before it was verified: it holds the project file (target
    reserved) in RECONCILIATION, with the file as it was (the write is undone by hand, as an operator would)."""
    before = project_file(project).read_bytes()

    def step(name: str) -> None:
        if name == "before_verified":
            raise Stop(name)

    project.refresh_from_db()
    prepared = executor.prepare(
        capability_name=CAPABILITY,
        method=APPLY_OPERATIONS,
        target={"project": project.slug},
        intent=intent_for([add("crashed")]),
        idempotency_key="tests:crashed",
        approval={"authority": "tests"},
        actor="tests",
        label="stopped before verified",
        expected_fingerprint=project.fingerprint,
    )
    contract = executor.execute(prepared, actor="tests", step=step)
    assert contract.state == ContractState.RECONCILIATION
    project_file(project).write_bytes(before)
    return contract
