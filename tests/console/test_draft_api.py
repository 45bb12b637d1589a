"""The operator REST API for working drafts (console.draft_api): the list, one draft as a reviewer reads it,
accept and discard with the reviewed working revision; each refusal with its status and FORGE_ERR code,
nothing written, and audited where an operator tried.

Carla's client builds the drafts; Olivia and Oscar are operators, through a console login or an operator
token; a client token, even an operator's, is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest_framework.test import APIClient

from audit.models import EventKind
from confirmations.models import Contract, ContractState
from confirmations.services import do_resolve_contract
from console import acceptance
from console.operator_tokens import do_create_operator_token
from projects import drafts
from projects.models import GroupState, Project, StagedOperation
from tests.conftest import Cast, Member
from tests.console.draft_helpers import (
    OTHER_SESSION,
    RATIONALE,
    SESSION,
    add,
    audit_rows,
    begin,
    draft_bytes,
    draft_digest,
    drafted,
    edit_by_hand,
    file_held_by_a_reconciliation,
    import_fixture,
    project_file,
    revision_of,
    stage,
    states,
    withdraw_approve_change,
)

pytestmark = pytest.mark.django_db

DRAFTS = "/api/drafts"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def project(db) -> Project:
    return import_fixture()


def logged_in(member: Member) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def with_bearer(raw: str) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture(params=["console login", "operator token"])
def operator(request, cast: Cast) -> APIClient:
    """Olivia, the operator, through each credential the API accepts."""
    if request.param == "console login":
        return logged_in(cast.operator)
    return with_bearer(do_create_operator_token(cast.operator.user, "scripts", acting_user="tests").raw)


@pytest.fixture
def olivia(cast: Cast) -> APIClient:
    return logged_in(cast.operator)


def accept(client: APIClient, project: Project, revision: int):
    body = {"working_revision": revision, "draft_digest": draft_digest(project)}
    return client.post(f"{DRAFTS}/{project.slug}/accept", body, format="json")


def discard(client: APIClient, project: Project, revision: int):
    return client.post(f"{DRAFTS}/{project.slug}/discard", {"working_revision": revision}, format="json")


def error(response) -> tuple[int, str]:
    return response.status_code, response.json()["code"]


def refusals(kind: str) -> list[tuple[str, str]]:
    return [(row.outcome, row.called_by) for row in audit_rows(kind) if row.outcome.startswith("refused")]


# --- reading ---------------------------------------------------------------------------------------


def test_an_operator_lists_the_drafts_waiting_for_review(cast, operator, project):
    drafted(project, cast.caretaker, "ShiftCount", "ShiftTotal")
    import_fixture("untouched")

    response = operator.get(DRAFTS)

    assert response.status_code == 200
    (row,) = response.json()["drafts"]
    assert row | {"updated_at": None} == {
        "project": "steps",
        "name": "Dosing Line",
        "accepted_revision": 1,
        "working_revision": revision_of(project),
        "groups": 1,
        "operations": 2,
        "conflicts": 0,
        "changed": True,
        "updated_at": None,
        "unavailable": "",
    }
    assert response.json()["next"] is None


def test_draft_pages_follow_next_to_the_end(cast, olivia):
    for slug in ("a-line", "b-line", "c-line"):
        drafted(import_fixture(slug), cast.caretaker, "ShiftCount")

    seen, url = [], f"{DRAFTS}?limit=2"
    while url:
        body = olivia.get(url).json()
        seen += [row["project"] for row in body["drafts"]]
        url = body["next"]

    assert seen == ["a-line", "b-line", "c-line"]


def test_a_draft_reads_as_a_reviewer_sees_it(cast, operator, project):
    group = drafted(project, cast.caretaker, "ShiftCount")

    body = operator.get(f"{DRAFTS}/steps").json()

    assert (body["project"], body["accepted_revision"], body["working_revision"]) == (
        "steps",
        1,
        revision_of(project),
    )
    assert (body["changed"], body["conflicts"], body["operations"]) == (True, 0, 1)
    assert '+            <variable name="ShiftCount">' in body["diff"].splitlines()
    assert body["describe"] == {
        "added": ["pou/LineMain/var/ShiftCount"],
        "removed": [],
        "changed": [],
        "truncated": False,
    }
    (shown,) = body["groups"]
    assert shown | {"created_at": None} == {
        "group_id": str(group.pk),
        "title": "Shift counter",
        "rationale": RATIONALE,
        "author": "carla",
        "client_label": "carla-client",
        "session": SESSION,
        "state": "submitted",
        "operations": 1,
        "findings": [],
        "acknowledged_findings": [],
        "created_at": None,
    }


def test_a_draft_shows_a_conflict_first_among_its_groups_findings(cast, olivia, project):
    drafted(project, cast.caretaker, "ShiftCount")
    path = project_file(project)
    path.write_bytes(path.read_bytes().replace(b'<pou name="LineMain"', b'<pou name="LineControl"'))

    body = olivia.get(f"{DRAFTS}/steps").json()

    assert (body["accepted_revision"], body["changed"], body["conflicts"], body["diff"]) == (2, False, 1, "")
    assert body["groups"][0]["findings"][0]["code"] == "conflict"


def test_an_unknown_project_is_404(olivia):
    assert error(olivia.get(f"{DRAFTS}/nope")) == (404, "FORGE_ERR_NOT_FOUND")
    assert error(olivia.post(f"{DRAFTS}/nope/accept", {"working_revision": 1}, format="json")) == (
        404,
        "FORGE_ERR_NOT_FOUND",
    )


# --- accept ----------------------------------------------------------------------------------------


def test_accepting_writes_the_file_equal_to_the_draft_and_accepts_every_group(cast, operator, project):
    carlas = drafted(project, cast.caretaker, "ShiftCount")
    oscars = drafted(project, cast.other_operator, "Spare", session=OTHER_SESSION, title="Spare")
    expected = draft_bytes(project)

    response = accept(operator, project, revision_of(project))

    assert response.status_code == 200, response.json()
    contract = Contract.objects.get(method="accept_draft")
    assert response.json() == {
        "project": "steps",
        "contract": str(contract.pk),
        "contract_memorable_id": contract.memorable_id,
        "accepted_revision": 2,
        "working_revision": revision_of(project),
        "groups": 2,
        "operations": 2,
        "skipped_conflicts": 0,
    }
    assert contract.state == ContractState.VERIFIED
    assert project_file(project).read_bytes() == expected
    assert states(carlas, oscars) == [GroupState.ACCEPTED, GroupState.ACCEPTED]
    (row,) = audit_rows(EventKind.DRAFT_ACCEPTED)
    assert (row.outcome, row.called_by, row.project) == ("accepted", "olivia", "steps")
    assert {(g["group_id"], g["author"], g["client_label"], g["session"]) for g in row.arguments["groups"]} == {
        (str(carlas.pk), "carla", "carla-client", SESSION),
        (str(oscars.pk), "oscar", "oscar-client", OTHER_SESSION),
    }
    assert olivia_sees_no_draft(cast)


def olivia_sees_no_draft(cast: Cast) -> bool:
    return logged_in(cast.operator).get(DRAFTS).json()["drafts"] == []


def test_open_sessions_learn_of_the_acceptance_from_the_drafts_events(cast, olivia, project):
    drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)

    accept(olivia, project, reviewed)

    (event,) = drafts.events(project, reviewed)["events"]
    assert (event["kind"], event["actor"]) == ("accepted", "olivia")


def test_accepting_a_stale_working_revision_is_refused_with_nothing_written(cast, operator, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    before = project_file(project).read_bytes()
    stage(project, begin(project, cast.caretaker, session=OTHER_SESSION), [add("Later")], session=OTHER_SESSION)

    response = accept(operator, project, reviewed)

    assert error(response) == (409, "FORGE_ERR_STALE_REVISION")
    assert f"moved from revision {reviewed}, which you reviewed" in response.json()["detail"]
    assert project_file(project).read_bytes() == before
    assert states(group) == [GroupState.SUBMITTED]
    assert not Contract.objects.exists()
    assert refusals(EventKind.DRAFT_ACCEPTED) == [("refused: stale_revision", "olivia")]


def test_a_staged_operation_edited_after_the_review_is_refused_at_accept_and_nothing_is_written(
    cast, operator, project
):
    """Database write access alone: the reviewer saw "add ShiftCount", the row now removes a POU."""
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = operator.get(f"{DRAFTS}/steps").json()
    before = project_file(project).read_bytes()
    StagedOperation.objects.filter(group=group).update(operation={"op": "remove_pou", "id": "pou/FlowTotal"})

    response = operator.post(
        f"{DRAFTS}/steps/accept",
        {"working_revision": reviewed["working_revision"], "draft_digest": reviewed["draft_digest"]},
        format="json",
    )

    assert error(response) == (409, "FORGE_ERR_INTEGRITY")
    assert "changed outside Forge" in response.json()["detail"]
    assert project_file(project).read_bytes() == before
    assert states(group) == [GroupState.SUBMITTED]
    assert Contract.objects.get().state == ContractState.FAILED
    assert refusals(EventKind.DRAFT_ACCEPTED) == [("refused: integrity", "olivia")]


def test_accepting_with_a_digest_other_than_the_reviewed_file_is_refused(cast, operator, project):
    drafted(project, cast.caretaker, "ShiftCount")
    before = project_file(project).read_bytes()

    response = operator.post(
        f"{DRAFTS}/steps/accept", {"working_revision": revision_of(project), "draft_digest": "0" * 64}, format="json"
    )

    assert error(response) == (409, "FORGE_ERR_INTEGRITY")
    assert project_file(project).read_bytes() == before


def test_accepting_again_after_an_acceptance_says_who_accepted_it(cast, olivia, project):
    drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    accept(logged_in(cast.other_operator), project, reviewed)

    response = accept(olivia, project, reviewed)

    assert error(response) == (409, "FORGE_ERR_STALE_REVISION")
    assert "(oscar accepted it)" in response.json()["detail"]
    assert Contract.objects.count() == 1


def test_accepting_after_the_file_changed_on_disk_since_the_review_is_refused_as_drift(cast, olivia, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    edit_by_hand(project)
    edited = project_file(project).read_bytes()

    response = accept(olivia, project, reviewed)

    assert error(response) == (409, "FORGE_ERR_TARGET_DRIFT")
    assert project_file(project).read_bytes() == edited
    assert states(group) == [GroupState.SUBMITTED]
    assert refusals(EventKind.DRAFT_ACCEPTED) == [("refused: target_drift", "olivia")]


def test_a_file_changed_while_the_acceptance_is_prepared_is_refused_by_the_executor(cast, olivia, project, monkeypatch):
    group = drafted(project, cast.caretaker, "ShiftCount")
    taken = drafts.acceptance

    def then_edited(project: Project):
        found = taken(project)
        edit_by_hand(project)  # after the draft was read, before the executor reads the file
        return found

    monkeypatch.setattr(drafts, "acceptance", then_edited)

    response = accept(olivia, project, revision_of(project))

    assert error(response) == (409, "FORGE_ERR_TARGET_DRIFT")
    contract = Contract.objects.get(method="accept_draft")
    assert (contract.state, contract.detail) == (ContractState.FAILED, "target_drift")
    assert b"edited by hand" in project_file(project).read_bytes()
    assert states(group) == [GroupState.SUBMITTED]


def test_a_batch_staged_while_the_acceptance_runs_stays_in_the_draft(cast, olivia, project, monkeypatch):
    group = drafted(project, cast.caretaker, "ShiftCount")
    taken = drafts.acceptance

    def then_staged(project: Project):
        found = taken(project)
        stage(project, group, [add("Late")])  # after the intent was taken, before it is written
        return found

    monkeypatch.setattr(drafts, "acceptance", then_staged)

    response = accept(olivia, project, revision_of(project))

    assert response.status_code == 200, response.json()
    written = project_file(project).read_bytes()
    assert b'name="ShiftCount"' in written and b'name="Late"' not in written
    assert states(group) == [GroupState.BUILDING]
    left = drafts.describe_group(project, group.pk)
    assert [op["operation"]["name"] for op in left["operations"]] == ["Late"]
    assert [finding for finding in left["findings"] if finding["code"] == "conflict"] == []
    assert drafts.describe(project)["added"] == ["pou/LineMain/var/Late"]


def test_accepting_while_another_contract_holds_the_file_is_refused_and_works_once_it_is_resolved(
    cast, olivia, project
):
    group = drafted(project, cast.caretaker, "ShiftCount")
    holder = file_held_by_a_reconciliation(project)
    reviewed = revision_of(project)

    refused = accept(olivia, project, reviewed)
    do_resolve_contract(holder.pk, acting_user=cast.operator.user, conclusion="not_applied")
    again = accept(olivia, project, reviewed)

    assert error(refused) == (409, "FORGE_ERR_TARGET_BUSY")
    assert holder.memorable_id in refused.json()["detail"]
    assert again.status_code == 200, again.json()
    assert states(group) == [GroupState.ACCEPTED]
    assert b'name="ShiftCount"' in project_file(project).read_bytes()


def test_accepting_a_draft_that_changes_nothing_is_refused(cast, olivia, project):
    begin(project, cast.caretaker)

    response = accept(olivia, project, revision_of(project))

    assert error(response) == (409, "FORGE_ERR_NOTHING_TO_ACCEPT")
    assert not Contract.objects.exists()


def test_accepting_without_approve_change_is_403_and_audited(cast, olivia, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    before = project_file(project).read_bytes()
    withdraw_approve_change()

    response = accept(olivia, project, revision_of(project))

    assert error(response) == (403, "FORGE_ERR_PERMISSION_DENIED")
    assert project_file(project).read_bytes() == before
    assert states(group) == [GroupState.SUBMITTED]
    assert refusals(EventKind.DRAFT_ACCEPTED) == [("refused: permission_denied", "olivia")]


@pytest.mark.parametrize("member", ["operator", "caretaker"])
def test_a_client_token_is_refused_even_an_operators(cast, project, member):
    group = drafted(project, cast.caretaker, "ShiftCount")
    client = with_bearer(getattr(cast, member).raw_token)

    assert client.get(DRAFTS).status_code == 403
    assert client.get(f"{DRAFTS}/steps").status_code == 403
    assert error(accept(client, project, revision_of(project))) == (403, "FORGE_ERR_PERMISSION_DENIED")
    assert discard(client, project, revision_of(project)).status_code == 403
    assert states(group) == [GroupState.SUBMITTED]
    assert not Contract.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"working_revision": "3", "draft_digest": "0" * 64},
        {"working_revision": -1, "draft_digest": "0" * 64},
        {"working_revision": 3, "draft_digest": "0" * 64, "force": True},
        {"working_revision": 3},
        {"working_revision": 3, "draft_digest": "not hex"},
        [],
    ],
    ids=["empty", "string", "negative", "extra field", "no digest", "bad digest", "not an object"],
)
def test_a_bad_body_is_400_and_decides_nothing(cast, olivia, project, body):
    group = drafted(project, cast.caretaker, "ShiftCount")

    response = olivia.post(f"{DRAFTS}/steps/accept", body, format="json")

    assert error(response) == (400, "FORGE_ERR_BAD_PARAMETER")
    assert states(group) == [GroupState.SUBMITTED]


def test_a_console_login_needs_the_csrf_token_to_accept(cast, project):
    drafted(project, cast.caretaker, "ShiftCount")
    strict = APIClient(enforce_csrf_checks=True)
    strict.force_login(cast.operator.user)

    assert accept(strict, project, revision_of(project)).status_code == 403
    assert not Contract.objects.exists()


# --- discard ---------------------------------------------------------------------------------------


def test_discarding_throws_every_group_away_and_leaves_the_file(cast, operator, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    before = project_file(project).read_bytes()

    response = discard(operator, project, revision_of(project))

    assert response.json() == {"project": "steps", "groups": 1, "working_revision": revision_of(project)}
    assert states(group) == [GroupState.DISCARDED]
    assert project_file(project).read_bytes() == before
    (row,) = audit_rows(EventKind.DRAFT_DISCARDED)
    assert (row.outcome, row.called_by) == ("discarded", "olivia")


def test_discarding_a_stale_working_revision_is_refused(cast, olivia, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    stage(project, group, [add("Later")], session=SESSION)

    assert error(discard(olivia, project, reviewed)) == (409, "FORGE_ERR_STALE_REVISION")
    assert states(group) == [GroupState.BUILDING]
    assert refusals(EventKind.DRAFT_DISCARDED) == [("refused: stale_revision", "olivia")]


def test_a_stage_between_the_check_and_the_discard_is_not_thrown_away_unseen(cast, olivia, project, monkeypatch):
    group = drafted(project, cast.caretaker, "ShiftCount")
    checked = acceptance._still_reviewed

    def then_staged(project: Project, reviewed: int):
        found = checked(project, reviewed)
        stage(project, group, [add("Late")])
        return found

    monkeypatch.setattr(acceptance, "_still_reviewed", then_staged)

    assert error(discard(olivia, project, revision_of(project))) == (409, "FORGE_ERR_STALE_REVISION")
    assert states(group) == [GroupState.BUILDING]


def test_discarding_without_approve_change_is_403_and_audited(cast, olivia, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    withdraw_approve_change()

    assert error(discard(olivia, project, revision_of(project))) == (403, "FORGE_ERR_PERMISSION_DENIED")
    assert states(group) == [GroupState.SUBMITTED]
    assert refusals(EventKind.DRAFT_DISCARDED) == [("refused: permission_denied", "olivia")]


def test_discarding_a_draft_without_groups_is_refused(olivia, project):
    assert error(discard(olivia, project, revision_of(project))) == (409, "FORGE_ERR_NOTHING_TO_DISCARD")
