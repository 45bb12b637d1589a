"""The working draft in-process: change groups staged, checked, unstaged, submitted and closed; replay on
a moved accepted file with conflicts; acceptance through the executor and discard; a restart (the
process cache cleared) materializing the same bytes."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from audit.models import AuditEvent, EventKind
from confirmations import executor
from projects import drafts, operations
from projects.capability import ACCEPT_DRAFT
from projects.models import ChangeGroup, GroupState, Project, StagedOperation, WorkingDraft
from projects.plcopen import documents, queries
from projects.services import do_import_project, project_path
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = pytest.mark.django_db

SESSION, OTHER = "session-a", "session-b"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def project(db) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug="steps", acting_user="tests")


def add(name: str, scope: str = "pou/LineMain") -> dict:
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
    assert answer["changed_ids"] == ["pou/LineMain/var/Extra1", "pou/LineMain/var/Extra2"]
    assert project_path(project).read_bytes() == before
    described = drafts.describe(project)
    assert described["added"] == ["pou/LineMain/var/Extra1", "pou/LineMain/var/Extra2"]


def test_accepting_writes_the_draft_through_the_executor_and_empties_it(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    stage(project, group, [add("Extra2")])
    draft_bytes = documents.serialize(drafts.current(project).document)
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
    assert refused.value.details["current_working_revision"] == revision + 1
    assert group.operations.count() == 1


def test_a_replay_on_a_moved_accepted_file_turns_what_no_longer_applies_into_a_conflict(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    path = project_path(project)
    path.write_bytes(path.read_bytes().replace(b'<pou name="LineMain"', b'<pou name="LineControl"'))
    described = drafts.describe_group(project, group.pk)
    assert described["findings"][0]["code"] == "conflict"
    assert described["operations"][0]["conflict"]


# --- helpers for the tests below -------------------------------------------------------------------


def revision(project: Project) -> int:
    return drafts.status(project)["working_revision"]


def draft_bytes(project: Project) -> bytes:
    return documents.serialize(drafts.current(project).document)


def stored(project: Project) -> tuple[int, int, int]:
    """What the database holds of the draft: its revision, its staged operations and its events."""
    draft = WorkingDraft.objects.get(project=project)
    return draft.working_revision, StagedOperation.objects.filter(draft=draft).count(), draft.events.count()


def restart() -> None:
    """A new process: nothing of the draft is cached, everything comes back from the database and file."""
    drafts.clear_cache()


@pytest.fixture
def clock(monkeypatch):
    """Every stamp the draft takes is one second after the previous one, as calls spread over time."""
    start = timezone.now().replace(microsecond=0)
    ticks = itertools.count()
    monkeypatch.setattr(drafts, "_now_stamp", lambda: start + timedelta(seconds=next(ticks)))
    return start


NEW_FB = {
    "op": "add_pou",
    "name": "Conveyor",
    "pou_type": "functionBlock",
    "body": "Speed := Speed + 1;",
    "variables": [{"section": "localVars", "name": "Speed", "type": "INT"}],
}
UNDECLARED_BODY = {
    "op": "set_pou_body",
    "id": "pou/FlowTotal",
    "language": "ST",
    "text": "LastPulse := Pulse;\nPulses := Nowhere;",
}


# --- building a group ------------------------------------------------------------------------------


def test_a_group_built_over_several_stage_calls_keeps_every_batch_in_order(cast, project):
    group = begin(project, cast.operator.user)
    first = stage(project, group, [add("Extra1")])
    second = stage(project, group, [add("Extra2"), add("Extra3")])
    third = stage(project, group, [{"op": "update_variable", "id": "pou/LineMain/var/Extra1", "type": "DINT"}])

    described = drafts.describe_group(project, group.pk)
    assert [first["working_revision"], second["working_revision"], third["working_revision"]] == [2, 3, 4]
    assert [op["position"] for op in described["operations"]] == [1, 2, 3, 4]
    assert [op["operation"].get("name", op["operation"].get("id")) for op in described["operations"]] == [
        "Extra1",
        "Extra2",
        "Extra3",
        "pou/LineMain/var/Extra1",
    ]
    assert (described["state"], described["author"], described["rationale"]) == ("building", "olivia", "because")
    assert described["working_revision"] == revision(project) == 4
    variable = queries.get_element(drafts.current(project).document, "pou/LineMain/var/Extra1")
    assert variable["type"] == "DINT"


def test_begin_moves_the_working_revision_and_leaves_the_document_unchanged(cast, project):
    before = draft_bytes(project)

    group, new_revision = drafts.do_begin_group(
        project,
        session_id=SESSION,
        principal=cast.operator.user,
        client_label="tests",
        title="Counters",
        rationale="",
        expected_revision=0,
    )

    assert new_revision == revision(project) == 1
    assert draft_bytes(project) == before
    assert drafts.status(project, session_id=SESSION)["groups"] == [
        {
            "group_id": str(group.pk),
            "title": "Counters",
            "state": "building",
            "author": "olivia",
            "client_label": "tests",
            "operations": 0,
            "yours": True,
        }
    ]
    assert drafts.status(project)["changed"] is False


def test_check_answers_the_changed_ids_and_findings_and_stores_nothing(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    before, before_bytes = stored(project), draft_bytes(project)

    checked = drafts.check(project, [add("Extra2"), UNDECLARED_BODY])

    assert checked["changed_ids"] == ["pou/LineMain/var/Extra2", "pou/FlowTotal"]
    assert checked["working_revision"] == before[0]
    assert "undeclared_identifier" in {f["code"] for f in checked["findings"]}
    assert stored(project) == before
    assert draft_bytes(project) == before_bytes


def test_check_of_a_batch_that_does_not_apply_names_the_refused_operation(cast, project):
    with pytest.raises(operations.OperationRefused) as refused:
        drafts.check(project, [add("Extra1"), add("Extra1")])

    assert refused.value.index == 1
    assert stored(project) == (0, 0, 0)


def test_a_batch_with_one_refused_operation_stores_nothing_and_names_its_index(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    before, before_bytes = stored(project), draft_bytes(project)

    with pytest.raises(operations.OperationRefused) as refused:
        stage(project, group, [add("Extra2"), add("Extra3"), add("DOSED")])

    assert refused.value.index == 2
    assert "Dosed" in refused.value.reason or "DOSED" in refused.value.reason
    assert stored(project) == before
    assert draft_bytes(project) == before_bytes


def test_a_batch_with_an_operation_outside_the_vocabulary_is_refused_with_its_index(cast, project):
    group = begin(project, cast.operator.user)

    with pytest.raises(operations.OperationRefused) as refused:
        stage(project, group, [add("Extra1"), {"op": "force_variable", "id": "pou/LineMain/var/Dosed"}])

    assert refused.value.index == 1
    assert group.operations.count() == 0


def test_an_empty_batch_is_refused(cast, project):
    group = begin(project, cast.operator.user)

    with pytest.raises(drafts.DraftRefused) as refused:
        stage(project, group, [])

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"
    assert stored(project) == (1, 0, 1)


# --- stale revisions and concurrent sessions -------------------------------------------------------


def test_of_two_sessions_staging_from_the_same_revision_the_second_is_told_the_current_one(cast, project):
    mine = begin(project, cast.operator.user, SESSION)
    theirs = begin(project, cast.other_operator.user, OTHER, title="Theirs")
    seen = revision(project)

    won = drafts.do_stage(project, mine.pk, [add("Mine")], session_id=SESSION, expected_revision=seen)
    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_stage(project, theirs.pk, [add("Theirs")], session_id=OTHER, expected_revision=seen)

    assert won["working_revision"] == seen + 1
    assert refused.value.code == "FORGE_ERR_STALE_REVISION"
    assert refused.value.details == {"current_working_revision": seen + 1}
    assert theirs.operations.count() == 0
    assert drafts.describe(project)["added"] == ["pou/LineMain/var/Mine"]


@pytest.mark.parametrize("call", ["begin", "unstage", "submit", "close"])
def test_every_modifying_call_with_a_stale_revision_is_refused_before_anything_is_stored(cast, project, call):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    before = stored(project)
    stale = before[0] - 1
    calls = {
        "begin": lambda: drafts.do_begin_group(
            project,
            session_id=SESSION,
            principal=cast.operator.user,
            client_label="tests",
            title="Late",
            rationale="",
            expected_revision=stale,
        ),
        "unstage": lambda: drafts.do_unstage(project, group.pk, 1, session_id=SESSION, expected_revision=stale),
        "submit": lambda: drafts.do_submit(
            project, group.pk, session_id=SESSION, expected_revision=stale, acknowledge_findings=True
        ),
        "close": lambda: drafts.do_close(project, group.pk, session_id=SESSION, expected_revision=stale),
    }

    with pytest.raises(drafts.DraftRefused) as refused:
        calls[call]()

    assert refused.value.code == "FORGE_ERR_STALE_REVISION"
    assert refused.value.details["current_working_revision"] == before[0]
    assert stored(project) == before
    group.refresh_from_db()
    assert group.state == GroupState.BUILDING


# --- ownership -------------------------------------------------------------------------------------


def test_a_session_may_not_stage_into_a_group_another_session_began(cast, project):
    group = begin(project, cast.operator.user, SESSION)
    before = stored(project)

    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_stage(project, group.pk, [add("Intruder")], session_id=OTHER, expected_revision=before[0])

    assert refused.value.code == "FORGE_ERR_NOT_GROUP_OWNER"
    assert refused.value.details == {"group_id": str(group.pk)}
    assert stored(project) == before


@pytest.mark.parametrize("call", ["unstage", "submit", "close"])
def test_a_session_may_not_unstage_submit_or_close_a_group_another_session_began(cast, project, call):
    group = begin(project, cast.operator.user, SESSION)
    stage(project, group, [add("Extra1")])
    before = stored(project)
    calls = {
        "unstage": lambda: drafts.do_unstage(project, group.pk, 1, session_id=OTHER, expected_revision=before[0]),
        "submit": lambda: drafts.do_submit(
            project, group.pk, session_id=OTHER, expected_revision=before[0], acknowledge_findings=False
        ),
        "close": lambda: drafts.do_close(project, group.pk, session_id=OTHER, expected_revision=before[0]),
    }

    with pytest.raises(drafts.DraftRefused) as refused:
        calls[call]()

    assert refused.value.code == "FORGE_ERR_NOT_GROUP_OWNER"
    assert stored(project) == before
    group.refresh_from_db()
    assert group.state == GroupState.BUILDING


def test_a_session_may_read_a_group_another_session_began(cast, project):
    group = begin(project, cast.operator.user, SESSION)
    stage(project, group, [add("Extra1")])

    status = drafts.status(project, session_id=OTHER)
    described = drafts.describe_group(project, group.pk)

    assert [g["yours"] for g in status["groups"]] == [False]
    assert described["operations"][0]["operation"]["name"] == "Extra1"


def test_a_group_id_the_draft_does_not_have_is_not_found(cast, project):
    begin(project, cast.operator.user)

    with pytest.raises(drafts.DraftRefused) as staged:
        stage(project, ChangeGroup(pk=uuid.uuid4()), [add("Extra1")])
    with pytest.raises(drafts.DraftRefused) as described:
        drafts.describe_group(project, uuid.uuid4())

    assert staged.value.code == described.value.code == "FORGE_ERR_NOT_FOUND"


# --- submit and acknowledgement --------------------------------------------------------------------


def test_submit_is_refused_while_problem_findings_stand_and_names_each_finding(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [UNDECLARED_BODY, add("Odd", scope="pou/LineMain") | {"type": "NoSuchType"}])
    before = stored(project)

    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_submit(project, group.pk, session_id=SESSION, expected_revision=before[0], acknowledge_findings=False)

    assert refused.value.code == "FORGE_ERR_FINDINGS_BLOCK_SUBMIT"
    named = {(f["code"], f["element_id"]) for f in refused.value.details["findings"]}
    assert named == {("undeclared_identifier", "pou/FlowTotal"), ("unknown_type", "pou/LineMain/var/Odd")}
    assert {f["severity"] for f in refused.value.details["findings"]} == {"problem"}
    assert "Nowhere" in refused.value.message and "NoSuchType" in refused.value.message
    assert stored(project) == before
    group.refresh_from_db()
    assert (group.state, group.acknowledged_findings) == (GroupState.BUILDING, [])


def test_submit_with_acknowledgement_records_the_problem_findings_for_the_reviewer(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [UNDECLARED_BODY])

    submitted = drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=True
    )

    group.refresh_from_db()
    assert submitted["state"] == group.state == GroupState.SUBMITTED
    assert [f["code"] for f in group.acknowledged_findings] == ["undeclared_identifier"]
    assert submitted["acknowledged_findings"] == group.acknowledged_findings
    assert drafts.describe_group(project, group.pk)["acknowledged_findings"] == group.acknowledged_findings
    assert submitted["working_revision"] == revision(project) == 3


def test_submit_of_a_group_with_only_advisories_needs_no_acknowledgement(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [{**NEW_FB, "body": "", "name": "Idle"}])

    submitted = drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=False
    )

    assert submitted["state"] == "submitted"
    assert submitted["acknowledged_findings"] == []
    assert [f["severity"] for f in drafts.describe_group(project, group.pk)["findings"]] == ["advisory"]


def test_a_stage_after_an_acknowledged_submit_clears_the_acknowledgement_and_reopens_the_group(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [UNDECLARED_BODY])
    drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=True
    )

    stage(project, group, [add("Extra1")])

    group.refresh_from_db()
    assert (group.state, group.acknowledged_findings) == (GroupState.BUILDING, [])


def test_a_fixed_group_submits_without_acknowledgement(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [UNDECLARED_BODY])
    stage(project, group, [add("Nowhere", scope="pou/FlowTotal")])

    submitted = drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=False
    )

    assert submitted["state"] == "submitted"


# --- unstage ----------------------------------------------------------------------------------------


def test_unstage_withdraws_the_groups_last_operations_from_the_draft(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Keep")])
    stage(project, group, [add("Drop1"), add("Drop2")])

    withdrawn = drafts.do_unstage(project, group.pk, 2, session_id=SESSION, expected_revision=revision(project))

    assert withdrawn == {"group_id": str(group.pk), "withdrawn": 2, "working_revision": 4}
    assert drafts.describe(project)["added"] == ["pou/LineMain/var/Keep"]
    assert [op.operation["name"] for op in group.operations.all()] == ["Keep"]
    assert drafts.events(project, 3)["events"][0]["kind"] == "unstage"


def test_status_after_an_unstage_reports_the_revision_the_unstage_answered(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])

    withdrawn = drafts.do_unstage(project, group.pk, 1, session_id=SESSION, expected_revision=revision(project))

    assert drafts.status(project)["working_revision"] == withdrawn["working_revision"] == 3
    assert drafts.describe_group(project, group.pk)["working_revision"] == 3


def test_unstage_is_refused_when_a_later_group_depends_on_the_withdrawn_operations(cast, project):
    pou_group = begin(project, cast.operator.user, SESSION, title="Conveyor")
    stage(project, pou_group, [NEW_FB], SESSION)
    variable_group = begin(project, cast.other_operator.user, OTHER, title="Conveyor limit")
    stage(project, variable_group, [add("Limit", scope="pou/Conveyor")], OTHER)
    before, before_bytes = stored(project), draft_bytes(project)

    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_unstage(project, pou_group.pk, 1, session_id=SESSION, expected_revision=before[0])

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"
    assert refused.value.details == {"dependent_positions": [2]}
    assert "add_variable at position 2" in refused.value.message
    assert stored(project) == before
    assert draft_bytes(project) == before_bytes
    assert pou_group.operations.count() == 1


def test_unstage_of_an_independent_group_leaves_later_groups_in_place(cast, project):
    first = begin(project, cast.operator.user, SESSION, title="First")
    stage(project, first, [add("First")], SESSION)
    second = begin(project, cast.other_operator.user, OTHER, title="Second")
    stage(project, second, [add("Second")], OTHER)

    drafts.do_unstage(project, first.pk, 1, session_id=SESSION, expected_revision=revision(project))

    assert drafts.describe(project)["added"] == ["pou/LineMain/var/Second"]


def test_unstage_of_more_operations_than_the_group_has_is_refused(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    before = stored(project)

    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_unstage(project, group.pk, 2, session_id=SESSION, expected_revision=before[0])

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"
    assert stored(project) == before


def test_unstage_after_an_acknowledged_submit_reopens_the_group_without_the_acknowledgement(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    stage(project, group, [UNDECLARED_BODY])
    drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=True
    )

    drafts.do_unstage(project, group.pk, 1, session_id=SESSION, expected_revision=revision(project))

    group.refresh_from_db()
    assert (group.state, group.acknowledged_findings) == (GroupState.BUILDING, [])


# --- close -------------------------------------------------------------------------------------------


def test_close_keeps_the_groups_operations_in_the_draft(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    before_bytes = draft_bytes(project)

    closed = drafts.do_close(project, group.pk, session_id=SESSION, expected_revision=revision(project))

    assert closed["state"] == "closed"
    assert draft_bytes(project) == before_bytes
    assert drafts.describe(project)["added"] == ["pou/LineMain/var/Extra1"]
    assert drafts.status(project)["groups"][0]["state"] == "closed"


def test_a_closed_group_takes_no_further_operations(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    drafts.do_close(project, group.pk, session_id=SESSION, expected_revision=revision(project))
    before = stored(project)

    with pytest.raises(drafts.DraftRefused) as refused:
        stage(project, group, [add("Extra2")])

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"
    assert "closed" in refused.value.message
    assert stored(project) == before


# --- describe and events -----------------------------------------------------------------------------


def test_describe_names_added_removed_and_changed_elements_with_the_fields_that_differ(cast, project):
    group = begin(project, cast.operator.user)
    stage(
        project,
        group,
        [
            add("Extra1"),
            {"op": "remove_variable", "id": "pou/LineMain/var/Progress"},
            {"op": "update_variable", "id": "pou/LineMain/var/Dosed", "type": "DINT"},
            {"op": "update_variable", "id": "pou/LineMain/var/Capped", "initial_value": "3"},
            {"op": "update_variable", "id": "pou/LineMain/var/Labelled", "address": "%QW4"},
        ],
    )

    described = drafts.describe(project)

    assert described["added"] == ["pou/LineMain/var/Extra1"]
    assert described["removed"] == ["pou/LineMain/var/Progress"]
    changed = {c["element_id"]: c["fields"] for c in described["changed"]}
    assert changed["pou/LineMain/var/Dosed"] == {"type": {"accepted": "INT", "draft": "DINT"}}
    assert changed["pou/LineMain/var/Capped"] == {"content": "changed"}
    assert changed["pou/LineMain/var/Labelled"] == {"address": {"accepted": None, "draft": "%QW4"}}
    assert (described["working_revision"], described["accepted_revision"], described["truncated"]) == (2, 1, False)


def test_describe_of_a_draft_that_changes_nothing_is_empty(cast, project):
    begin(project, cast.operator.user)

    described = drafts.describe(project)

    assert (described["added"], described["removed"], described["changed"]) == ([], [], [])


def test_describe_is_bounded_by_its_limit(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add(f"Extra{n}") for n in range(5)])

    described = drafts.describe(project, limit=2)

    assert described["added"] == ["pou/LineMain/var/Extra0", "pou/LineMain/var/Extra1"]
    assert described["truncated"] is True


def test_events_after_a_revision_list_only_what_happened_since_then(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    seen = revision(project)
    theirs = begin(project, cast.other_operator.user, OTHER, title="Theirs")
    stage(project, theirs, [add("Theirs")], OTHER)
    drafts.do_submit(
        project, theirs.pk, session_id=OTHER, expected_revision=revision(project), acknowledge_findings=False
    )

    since = drafts.events(project, seen)

    assert [(e["revision"], e["kind"], e["actor"]) for e in since["events"]] == [
        (3, "begin", "oscar"),
        (4, "stage", "oscar"),
        (5, "submit", "oscar"),
    ]
    assert {e["group_id"] for e in since["events"]} == {str(theirs.pk)}
    assert since["events"][1]["summary"] == {"operations": 1, "changed_ids": ["pou/LineMain/var/Theirs"]}
    assert since["working_revision"] == 5
    assert "next_after_revision" not in since
    assert [e["kind"] for e in drafts.events(project, 0)["events"]][:2] == ["begin", "stage"]


def test_events_past_the_limit_continue_with_next_after_revision(cast, project, monkeypatch):
    monkeypatch.setattr(drafts, "EVENTS_LIMIT", 2)
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    stage(project, group, [add("Extra2")])

    first = drafts.events(project, 0)
    rest = drafts.events(project, first["next_after_revision"])

    assert [e["revision"] for e in first["events"]] == [1, 2]
    assert [e["revision"] for e in rest["events"]] == [3]


# --- replay on a moved accepted file ------------------------------------------------------------------


def edit_outside(project: Project, old: bytes, new: bytes) -> None:
    """Another tool (the engineer's IDE, git) changes the file on disk."""
    path = project_path(project)
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new))


def test_a_replay_on_an_external_edit_that_still_applies_keeps_the_draft_and_moves_its_base(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    seen = revision(project)
    edit_outside(project, b'name="Dosing Line"', b'name="Dosing Line, edited"')

    status = drafts.status(project)

    assert (status["accepted_revision"], status["working_revision"], status["conflicts"]) == (2, seen + 1, 0)
    assert drafts.describe(project)["added"] == ["pou/LineMain/var/Extra1"]
    [event] = drafts.events(project, seen)["events"]
    assert (event["kind"], event["summary"]) == (
        "replayed",
        {"from_accepted_revision": 1, "to_accepted_revision": 2, "conflicts": 0},
    )
    assert b'name="Dosing Line, edited"' in draft_bytes(project)


def test_a_replay_that_no_longer_applies_reports_a_conflict_and_blocks_submit(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    edit_outside(project, b'<pou name="LineMain"', b'<pou name="LineControl"')

    status = drafts.status(project)
    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_submit(
            project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=False
        )

    assert status["conflicts"] == 1
    [conflict] = refused.value.details["findings"]
    assert (conflict["code"], conflict["severity"], conflict["element_id"]) == (
        "conflict",
        "problem",
        "pou/LineMain/var/Extra1",
    )
    assert "operation 0 (add_variable)" in conflict["message"]
    assert group.operations.count() == 1  # kept for the author, never dropped


def test_a_stale_client_after_a_replay_is_told_the_replayed_revision(cast, project):
    group = begin(project, cast.operator.user)
    seen = revision(project)
    edit_outside(project, b'name="Dosing Line"', b'name="Dosing Line, edited"')

    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_stage(project, group.pk, [add("Extra1")], session_id=SESSION, expected_revision=seen)

    assert refused.value.details["current_working_revision"] == seen + 1
    assert group.operations.count() == 0


# --- acceptance and discard --------------------------------------------------------------------------


def test_accepting_audits_every_accepted_group_with_its_author_and_acknowledged_findings(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [UNDECLARED_BODY])
    drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision(project), acknowledge_findings=True
    )
    draft = drafts.current(project).draft

    contract = accept(project)

    assert contract.state == "VERIFIED", contract.detail
    [event] = AuditEvent.objects.filter(kind=EventKind.DRAFT_ACCEPTED)
    assert (event.project, event.called_by, event.outcome) == ("steps", "olivia", "accepted")
    [provenance] = event.arguments["groups"]
    assert (provenance["group_id"], provenance["author"], provenance["session"]) == (str(group.pk), "olivia", SESSION)
    assert [f["code"] for f in provenance["acknowledged_findings"]] == ["undeclared_identifier"]
    assert event.arguments["draft_revision"] == draft.working_revision
    assert drafts.events(project, draft.working_revision)["events"][0]["kind"] == "accepted"


def test_accepting_a_draft_that_changes_nothing_is_refused(cast, project):
    begin(project, cast.operator.user)

    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.acceptance(project)

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"


def test_accepting_writes_what_still_applies_and_keeps_nothing_of_the_conflicting_group(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Lost")])
    stage(project, group, [add("Kept", scope="pou/FlowTotal")])
    edit_outside(project, b'<pou name="LineMain"', b'<pou name="LineControl"')
    expected = draft_bytes(project)

    contract = accept(project)

    assert contract.state == "VERIFIED", contract.detail
    written = project_path(project).read_bytes()
    assert written == expected
    assert b'name="Kept"' in written and b'name="Lost"' not in written
    group.refresh_from_db()
    assert group.state == GroupState.ACCEPTED


def test_discarding_the_draft_discards_every_live_group_and_leaves_the_file_alone(cast, project):
    before = project_path(project).read_bytes()
    mine = begin(project, cast.operator.user, SESSION)
    stage(project, mine, [add("Extra1")], SESSION)
    theirs = begin(project, cast.other_operator.user, OTHER, title="Theirs")
    stage(project, theirs, [add("Extra2")], OTHER)
    seen = revision(project)

    discarded = drafts.do_discard_draft(project, acting_user="olivia")

    assert discarded == 2
    assert set(ChangeGroup.objects.values_list("state", flat=True)) == {GroupState.DISCARDED}
    status = drafts.status(project)
    assert (status["groups"], status["changed"], status["working_revision"]) == ([], False, seen + 1)
    assert draft_bytes(project) == before == project_path(project).read_bytes()
    [event] = AuditEvent.objects.filter(kind=EventKind.DRAFT_DISCARDED)
    assert (event.called_by, event.project, event.outcome) == ("olivia", "steps", "discarded")
    assert [g["title"] for g in event.arguments["groups"]] == ["Counters", "Theirs"]
    assert drafts.events(project, seen)["events"][0]["kind"] == "discarded"


def test_discarding_a_draft_without_groups_is_refused(cast, project):
    with pytest.raises(drafts.DraftRefused) as refused:
        drafts.do_discard_draft(project, acting_user="olivia")

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"
    assert not AuditEvent.objects.filter(kind=EventKind.DRAFT_DISCARDED).exists()


def test_a_discarded_group_takes_no_further_operations(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    drafts.do_discard_draft(project, acting_user="olivia")

    with pytest.raises(drafts.DraftRefused) as refused:
        stage(project, group, [add("Extra2")])

    assert refused.value.code == "FORGE_ERR_INVALID_OPERATION"


# --- a restart ----------------------------------------------------------------------------------------


def test_a_restart_materializes_byte_identical_documents_with_the_same_ids_and_revisions(cast, project, clock):
    mine = begin(project, cast.operator.user, SESSION)
    stage(project, mine, [add("Extra1"), {"op": "update_variable", "id": "pou/LineMain/var/Dosed", "type": "DINT"}])
    theirs = begin(project, cast.other_operator.user, OTHER, title="Theirs")
    stage(project, theirs, [NEW_FB], OTHER)
    drafts.do_submit(
        project, theirs.pk, session_id=OTHER, expected_revision=revision(project), acknowledge_findings=False
    )
    stage(project, mine, [{"op": "remove_variable", "id": "pou/LineMain/var/Progress"}])
    before = (draft_bytes(project), drafts.status(project), drafts.describe(project))

    restart()

    assert (draft_bytes(project), drafts.status(project), drafts.describe(project)) == before
    assert [g["group_id"] for g in before[1]["groups"]] == [str(mine.pk), str(theirs.pk)]
    assert before[1]["working_revision"] == 6


def test_a_batch_that_changes_nothing_keeps_the_stamp_so_a_restart_gives_the_same_bytes(cast, project, clock):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    unchanged = stage(project, group, [{"op": "update_variable", "id": "pou/LineMain/var/Extra1", "retain": False}])
    before = draft_bytes(project)

    restart()

    assert unchanged["changed_ids"] == []
    assert draft_bytes(project) == before


def test_accepting_after_a_batch_that_changes_nothing_writes_exactly_the_draft(cast, project, clock):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    stage(project, group, [{"op": "update_variable", "id": "pou/LineMain/var/Extra1", "type": "INT"}])
    expected = draft_bytes(project)

    contract = accept(project)

    assert contract.state == "VERIFIED", contract.detail
    assert project_path(project).read_bytes() == expected


def test_a_restart_after_an_unstage_materializes_the_same_bytes(cast, project, clock):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    stage(project, group, [add("Extra2")])
    drafts.do_unstage(project, group.pk, 1, session_id=SESSION, expected_revision=revision(project))
    before = (draft_bytes(project), revision(project))

    restart()

    assert (draft_bytes(project), revision(project)) == before


def test_a_restart_keeps_the_conflicts_of_a_replay(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("Extra1")])
    edit_outside(project, b'<pou name="LineMain"', b'<pou name="LineControl"')
    before = drafts.describe_group(project, group.pk)

    restart()

    assert drafts.describe_group(project, group.pk) == before
    assert before["findings"][0]["code"] == "conflict"


def test_describe_does_not_list_a_pou_as_changed_only_because_a_variable_was_added_to_it(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [add("OnlyNew")])
    described = drafts.describe(project)
    assert described["added"] == ["pou/LineMain/var/OnlyNew"]
    assert described["changed"] == []


def test_describe_lists_a_pou_whose_body_changed(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [{"op": "add_pou", "name": "Later", "pou_type": "program", "body": "x := 1;"}])
    stage(project, group, [{"op": "set_pou_body", "id": "pou/Later", "language": "ST", "text": "x := 2;"}])
    assert accept(project).state == "VERIFIED"
    group2 = begin(project, cast.operator.user, title="Body")
    stage(project, group2, [{"op": "set_pou_body", "id": "pou/Later", "language": "ST", "text": "x := 3;"}])
    assert {"element_id": "pou/Later", "fields": {"content": "changed"}} in drafts.describe(project)["changed"]


def test_describe_lists_a_pou_that_gains_variables_and_a_new_body_as_changed(cast, project):
    group = begin(project, cast.operator.user)
    stage(
        project,
        group,
        [
            add("Spill", scope="pou/FlowTotal"),
            add("Overflow", scope="pou/FlowTotal"),
            {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": "Litres := Pulses / 10;"},
        ],
    )

    described = drafts.describe(project)

    assert described["added"] == ["pou/FlowTotal/var/Spill", "pou/FlowTotal/var/Overflow"]
    assert described["changed"] == [{"element_id": "pou/FlowTotal", "fields": {"content": "changed"}}]
    assert described["counts"] == {"added": 2, "removed": 0, "changed": 1}


def test_describe_names_a_variable_made_retain(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, [{"op": "update_variable", "id": "pou/LineMain/var/Dosed", "retain": True}])

    changed = drafts.describe(project)["changed"]

    assert changed == [
        {"element_id": "pou/LineMain/var/Dosed", "fields": {"retain": {"accepted": False, "draft": True}}}
    ]


# --- caps and paging --------------------------------------------------------------------------------------


def adds(prefix: str, count: int, scope: str = "pou/LineMain") -> list[dict]:
    return [add(f"{prefix}{index}", scope) for index in range(count)]


def test_a_batch_past_the_staged_cap_of_a_group_is_refused_naming_the_cap(cast, project, settings):
    settings.FORGE_MAX_STAGED_PER_GROUP = 3
    group = begin(project, cast.operator.user)
    stage(project, group, adds("A", 2))
    before = revision(project)

    with pytest.raises(drafts.DraftRefused) as refused:
        stage(project, group, adds("B", 2))

    assert (refused.value.code, refused.value.status) == ("FORGE_ERR_LIMIT_REACHED", 429)
    assert "holds 2 operations and this batch adds 2" in refused.value.message
    assert refused.value.details["setting"] == "FORGE_MAX_STAGED_PER_GROUP"
    assert (StagedOperation.objects.filter(group=group).count(), revision(project)) == (2, before)


def test_change_group_describe_pages_a_large_group(cast, project, settings):
    group = begin(project, cast.operator.user)
    for batch, scope in enumerate(("pou/LineMain", "pou/FlowTotal", "pou/LabelGate")):
        stage(project, group, adds(f"V{batch}_", 150, scope))
    whole = drafts.group_findings(drafts.current(project), group)

    pages, cursor = [], None
    while True:
        page = drafts.describe_group(project, group.pk, cursor=cursor, limit=100)
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert [len(p["operations"]) for p in pages] == [100, 100, 100, 100, 50]
    assert {p["operations_total"] for p in pages} == {450}
    positions = [op["position"] for p in pages for op in p["operations"]]
    assert positions == sorted(StagedOperation.objects.filter(group=group).values_list("position", flat=True))
    # Each batch's findings come once, on the page its first operation is on.
    assert sorted(f["element_id"] for p in pages for f in p["findings"]) == sorted(f["element_id"] for f in whole)
    assert whole


def test_change_group_describe_answers_a_bounded_page_by_default(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, adds("A", 120))

    page = drafts.describe_group(project, group.pk)

    assert len(page["operations"]) == 50 and page["operations_total"] == 120 and page["next_cursor"]
    with pytest.raises(ValueError, match="above the maximum of 200"):
        drafts.describe_group(project, group.pk, limit=201)


def test_a_describe_cursor_of_another_group_is_refused(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, adds("A", 3))
    other = begin(project, cast.operator.user, session=OTHER, title="Other")
    cursor = drafts.describe_group(project, group.pk, limit=1)["next_cursor"]

    with pytest.raises(ValueError, match="different query"):
        drafts.describe_group(project, other.pk, cursor=cursor)


def test_draft_describe_pages_its_lines_and_refuses_a_cursor_once_the_draft_moved(cast, project):
    group = begin(project, cast.operator.user)
    stage(project, group, adds("A", 5))

    first = drafts.describe(project, limit=3)
    second = drafts.describe(project, limit=3, cursor=first["next_cursor"])

    assert first["added"] + second["added"] == [f"pou/LineMain/var/A{i}" for i in range(5)]
    assert (first["counts"]["added"], first["truncated"], second["next_cursor"]) == (5, True, None)
    stage(project, group, adds("B", 1))
    with pytest.raises(ValueError, match="the draft moved"):
        drafts.describe(project, limit=3, cursor=first["next_cursor"])
