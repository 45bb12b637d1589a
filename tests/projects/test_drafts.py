"""The working draft in-process: change groups staged, checked, unstaged, submitted and closed; replay on
a moved accepted file with conflicts; acceptance through the executor and discard."""

from __future__ import annotations

from pathlib import Path

import pytest

from confirmations import executor
from projects import drafts, plcopen
from projects.capability import ACCEPT_DRAFT
from projects.models import ChangeGroup, GroupState, Project
from projects.services import do_import_project, project_path
from tests.projects.conftest import sample_bytes

pytestmark = pytest.mark.django_db

SESSION, OTHER = "session-a", "session-b"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def project(db) -> Project:
    return do_import_project(sample_bytes("beremiz-first_steps.xml"), slug="steps", acting_user="tests")


def add(name: str, scope: str = "pou/plc_prg") -> dict:
    return {"op": "add_variable", "scope": scope, "section": "localVars", "name": name, "type": "INT"}


def begin(project: Project, user, session: str = SESSION, title: str = "Counters") -> ChangeGroup:
    revision = drafts.status(project)["working_revision"]
    group, _ = drafts.do_begin_group(
        project,
        session_id=session,
        principal=user,
        client_label="tests",
        title=title,
        rationale="because",
        expected_revision=revision,
    )
    return group


def stage(project: Project, group: ChangeGroup, ops: list[dict], session: str = SESSION) -> dict:
    revision = drafts.status(project)["working_revision"]
    return drafts.do_stage(project, group.pk, ops, session_id=session, expected_revision=revision)


def accept(project: Project, actor: str = "olivia"):
    _materialized, intent = drafts.acceptance(project)
    draft = drafts.current(project).draft
    contract = executor.prepare(
        capability_name="project.file",
        method=ACCEPT_DRAFT,
        target={"project": project.slug},
        intent=intent,
        idempotency_key=f"draft:{draft.pk}:{draft.working_revision}",
        approval={"authority": "tests", "approver": actor},
        actor=actor,
        label=f"accept draft of {project.slug}",
        expected_fingerprint=draft.base_fingerprint,
    )
    return executor.execute(contract, actor=actor)


def test_staging_changes_the_draft_and_not_the_accepted_file(cast, project):
    before = project_path(project).read_bytes()
    group = begin(project, cast.operator.user)
    answer = stage(project, group, [add("Extra1"), add("Extra2")])
    assert answer["changed_ids"] == ["pou/plc_prg/var/Extra1", "pou/plc_prg/var/Extra2"]
    assert project_path(project).read_bytes() == before
    described = drafts.describe(project)
    assert described["added"] == ["pou/plc_prg/var/Extra1", "pou/plc_prg/var/Extra2"]


def test_accepting_writes_the_draft_through_the_executor_and_empties_it(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    stage(project, group, [add("Extra2")])
    draft_bytes = plcopen.serialize(drafts.current(project).document)
    contract = accept(project)
    assert contract.state == "VERIFIED", contract.detail
    assert project_path(project).read_bytes() == draft_bytes
    group.refresh_from_db()
    assert group.state == GroupState.ACCEPTED
    project.refresh_from_db()
    status = drafts.status(project)
    assert status["groups"] == [] and status["changed"] is False
    assert status["accepted_revision"] == project.accepted_revision == 2


def test_a_stale_revision_is_refused_before_anything_is_stored(cast, project):
    group = begin(project, cast.operator.user)
    revision = drafts.status(project)["working_revision"]
    stage(project, group, [add("Extra1")])
    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_stage(project, group.pk, [add("Extra2")], session_id=SESSION, expected_revision=revision)
    assert refused.value.code == "FORGE_ERR_STALE_REVISION"
    assert refused.value.data["current_working_revision"] == revision + 1
    assert group.operations.count() == 1


def test_a_replay_on_a_moved_accepted_file_turns_what_no_longer_applies_into_a_conflict(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    path = project_path(project)
    path.write_bytes(path.read_bytes().replace(b'<pou name="plc_prg"', b'<pou name="plc_main"'))
    described = drafts.describe_group(project, group.pk)
    assert described["findings"][0]["code"] == "conflict"
    assert described["operations"][0]["conflict"]
