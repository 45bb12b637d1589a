"""The console's working-draft screens (console.draft_screens): the live list of drafts waiting for review,
a draft's review page (diff, what it changes, groups with rationale and findings), and its decisions,
Accept all and Discard, each checked on the page (the message), in the project file, in the groups'
states and in the audit log.

Carla's client builds the drafts; Olivia and Oscar are operators."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.messages import constants
from django.test import Client
from django.urls import reverse
from guardian.shortcuts import assign_perm

from audit.models import EventKind
from confirmations.models import Contract, ContractState
from forge_core.live import CONSOLE_GROUP
from projects import drafts
from projects.models import GroupState, Project
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
    import_fixture,
    project_file,
    revision_of,
    stage,
    states,
    withdraw_approve_change,
)

pytestmark = pytest.mark.django_db

DRAFTS = reverse("admin:drafts")


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def project(db) -> Project:
    return import_fixture()


@pytest.fixture
def operator(client, cast) -> Client:
    client.force_login(cast.operator.user)
    return client


def review_page(project: Project) -> str:
    return reverse("admin:draft_review", args=[project.slug])


def decide(client: Client, project: Project, decision: str, revision: int | str):
    url = reverse(f"admin:draft_{decision}", args=[project.slug])
    return client.post(url, {"working_revision": revision, "draft_digest": draft_digest(project)}, follow=True)


def messages_of(response) -> list[tuple[int, str]]:
    return [(message.level, str(message.message)) for message in response.context["messages"]]


def text_of(response) -> str:
    """The page's text without tags, entities decoded, whitespace folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())


def spill_counted_with_a_new_body(project: Project, cast) -> None:
    """Carla's client adds variable Spill to FlowTotal and rewrites its ST body to one line."""
    group = begin(project, cast.caretaker)
    new_body = {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": "Litres := Pulses / 10;"}
    stage(project, group, [add("Spill", scope="pou/FlowTotal"), new_body])


# --- the list --------------------------------------------------------------------------------------


def test_the_list_shows_a_draft_with_its_groups_operations_conflicts_and_working_revision(operator, cast, project):
    drafted(project, cast.caretaker, "ShiftCount", "ShiftTotal")
    drafted(project, cast.other_operator, "Spare", session=OTHER_SESSION, title="Spare")
    import_fixture("untouched")

    response = operator.get(DRAFTS)
    row = response.content.decode().split('id="draft-steps"')[1].split("</tr>")[0]

    cells = re.findall(r'<td class="number">(?:<span[^>]*>)?(\d+)', row)
    assert cells == ["2", "3", "0", str(revision_of(project)), "1"]
    assert reverse("admin:draft_review", args=["steps"]) in row
    assert 'id="draft-untouched"' not in response.content.decode()


def test_a_draft_whose_groups_staged_nothing_is_not_waiting_for_review(operator, cast, project):
    begin(project, cast.caretaker)

    assert 'id="no-drafts"' in operator.get(DRAFTS).content.decode()


def test_a_draft_whose_every_operation_conflicts_is_listed_as_changing_nothing(operator, cast, project):
    drafted(project, cast.caretaker, "ShiftCount")
    path = project_file(project)
    path.write_bytes(path.read_bytes().replace(b'<pou name="LineMain"', b'<pou name="LineControl"'))

    row = operator.get(DRAFTS).content.decode().split('id="draft-steps"')[1].split("</tr>")[0]

    assert "changes nothing: every operation conflicts with the accepted file" in row
    assert '<span class="conflicts">1</span>' in row


def test_the_list_follows_the_console_feed(operator):
    page = operator.get(DRAFTS).content.decode()

    live = page[page.index("data-live-pages=") :].split('"')[1].split()
    assert DRAFTS in live


def test_a_clients_stage_is_announced_to_open_console_pages(cast, project, django_capture_on_commit_callbacks):
    group = begin(project, cast.caretaker)
    layer = get_channel_layer()  # a fresh in-memory layer for each test (tests/console/conftest.py)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(CONSOLE_GROUP, channel)

    with django_capture_on_commit_callbacks(execute=True):
        stage(project, group, [add("ShiftCount")])

    assert async_to_sync(layer.receive)(channel) == {"type": "console.changed", "what": "drafts"}


def test_the_dashboard_counts_the_drafts_waiting_and_links_to_the_list(operator, cast, project):
    drafted(project, cast.caretaker, "ShiftCount")

    page = operator.get(reverse("admin:index")).content.decode()

    assert f'<a href="{DRAFTS}"><strong id="draft-count">1</strong> working draft waiting for review</a>' in page


def test_the_client_owner_without_a_console_login_is_sent_to_the_login_page(client, cast, project):
    client.force_login(cast.caretaker.user)  # not staff

    response = client.get(review_page(project))

    assert response.status_code == 302 and "/console/login/" in response["Location"]


# --- the review ------------------------------------------------------------------------------------


def test_the_review_shows_the_diff_what_changes_and_each_group_with_its_rationale(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")

    page = operator.get(review_page(project)).content.decode()

    assert '<span class="added">+            &lt;variable name=&quot;ShiftCount&quot;&gt;</span>' in page
    assert "--- steps.xml (accepted)" in page and "+++ steps.xml (after this change)" in page
    assert '<ul id="added"><li><code>pou/LineMain/var/ShiftCount</code></li></ul>' in page
    section = page.split(f'id="group-{group.pk}"')[1]
    assert '<h3>Shift counter <span class="state-badge">submitted</span></h3>' in section
    assert "by <strong>carla</strong> through <strong>carla-client</strong>, 1 operation," in section
    assert f'<p class="rationale">{RATIONALE}</p>' in section
    assert f'name="working_revision" value="{revision_of(project)}"' in page
    assert 'id="accept">Accept all</button>' in page and 'id="discard"' in page


def test_the_review_lists_a_groups_findings_and_the_ones_its_author_acknowledged(operator, cast, project):
    group = begin(project, cast.caretaker)
    stage(project, group, [{**add("Odd"), "type": "Undefined_T"}])
    drafts.do_submit(
        project, group.pk, session_id=SESSION, expected_revision=revision_of(project), acknowledge_findings=True
    )

    section = operator.get(review_page(project)).content.decode().split(f'id="group-{group.pk}"')[1]

    findings, acknowledged = section.split('<table class="findings">')[1].split('<table class="findings acknowledged">')
    assert '<tr class=" problem"><td>unknown_type</td><td>problem</td><td><code>pou/LineMain/var/Odd</code>' in findings
    assert "Submitted with 1 acknowledged problem:" in findings
    assert "<td>unknown_type</td><td><code>pou/LineMain/var/Odd</code></td>" in acknowledged


def test_the_review_names_the_fields_a_change_of_an_element_changes(operator, cast, project):
    group = begin(project, cast.caretaker)
    stage(project, group, [{"op": "update_variable", "id": "pou/LineMain/var/Progress", "type": "LREAL"}])

    page = operator.get(review_page(project)).content.decode()

    changed = page.split('<ul id="changed">')[1].split("</ul>")[0]
    assert '<li><code>pou/LineMain/var/Progress</code> <code class="fields">type: REAL → LREAL</code></li>' in changed
    assert "Added (0)" in page and "Removed (0)" in page


def test_the_review_counts_a_pou_that_gains_variables_and_a_new_body_as_changed(operator, cast, project):
    spill_counted_with_a_new_body(project, cast)

    response = operator.get(review_page(project))

    assert "Added (1) pou/FlowTotal/var/Spill Changed (1) pou/FlowTotal content Removed (0)" in text_of(response)


def test_the_review_escapes_a_highlighted_body_and_marks_a_finding_under_its_line(operator, cast, project):
    group = begin(project, cast.caretaker)
    text = "Litres := Pulses / 10; (* <script>alert(1)</script> *)\nLitres := '<b>' +;"
    stage(project, group, [{"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": text}])

    unit = operator.get(review_page(project)).content.decode().split('id="cv-pouflowtotal"')[1].split("</section>")[0]

    assert "<script>" not in unit and "<b>" not in unit
    assert '<span class="st-comment">(* &lt;script&gt;alert(1)&lt;/script&gt; *)</span>' in unit
    assert '<span class="st-string">&#x27;&lt;b&gt;&#x27;</span>' in unit
    marked = unit.split('<tr class="cv-added cv-marked">')[1].split("</tr>")[0]
    assert '<td class="cv-ln">2</td>' in marked
    assert '<span class="cv-mark cv-mark-problem" role="note">problem st_syntax, column' in marked


def test_the_review_shows_each_pou_with_its_body_lines_numbered_and_its_variable_table_diff(operator, cast, project):
    spill_counted_with_a_new_body(project, cast)

    page = operator.get(review_page(project)).content.decode()

    unit = page.split('id="cv-pouflowtotal"')[1].split("</section>")[0]
    assert '<span class="cv-status">changed</span> POU <code>FlowTotal</code> (functionBlock)' in unit
    assert (
        '<tr class="cv-added"><td class="cv-ln"></td><td class="cv-ln">1</td><td class="cv-code">Litres '
        '<span class="st-operator">:=</span> Pulses <span class="st-operator">/</span> <span class="st-number">10</span>'
        '<span class="st-punctuation">;</span></td></tr>' in unit
    )
    assert (
        '<tr class="cv-removed"><td class="cv-ln">2</td><td class="cv-ln"></td><td class="cv-code">'
        '<span class="st-keyword">IF</span> Clear <span class="st-keyword">THEN</span></td></tr>' in unit
    )
    assert '<tr class="cv-added"><td>added</td><td><code>Spill</code></td><td>localVars</td><td>INT</td>' in unit
    raw = page.split('<details class="forge-raw-diff" id="raw-diff">')[1].split("</details>")[0]
    assert '<span class="added">+            &lt;variable name=&quot;Spill&quot;&gt;</span>' in raw


def test_the_review_puts_a_conflict_first_among_a_groups_findings(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    path = project_file(project)
    path.write_bytes(path.read_bytes().replace(b'<pou name="LineMain"', b'<pou name="LineControl"'))

    page = operator.get(review_page(project)).content.decode()

    section = page.split(f'id="group-{group.pk}"')[1]
    first_row = section.split("<tbody>")[1].split("</tr>")[0]
    assert 'class="conflict problem"' in first_row and "no longer applies" in first_row
    assert "The draft changes nothing in the file." in page
    assert 'id="accept" disabled' in page


def test_an_operator_without_approve_change_reads_the_review_but_gets_no_decision_forms(operator, cast, project):
    drafted(project, cast.caretaker, "ShiftCount")
    withdraw_approve_change()

    page = operator.get(review_page(project)).content.decode()

    assert "accepting or discarding it needs the approve_change permission" in page
    assert 'id="accept-form"' not in page


def test_the_review_of_an_unknown_project_goes_back_to_the_list_and_says_so(operator):
    response = operator.get(reverse("admin:draft_review", args=["nope"]), follow=True)

    assert response.redirect_chain[-1][0] == DRAFTS
    assert messages_of(response) == [(constants.ERROR, "There is no project 'nope' you may see.")]


# --- accept all ------------------------------------------------------------------------------------


def test_accept_all_writes_the_draft_to_the_file_accepts_the_groups_and_audits_their_provenance(
    operator, cast, project
):
    carlas = drafted(project, cast.caretaker, "ShiftCount")
    oscars = drafted(project, cast.other_operator, "Spare", session=OTHER_SESSION, title="Spare", rationale="")
    expected = draft_bytes(project)

    response = decide(operator, project, "accept", revision_of(project))

    assert project_file(project).read_bytes() == expected
    assert states(carlas, oscars) == [GroupState.ACCEPTED, GroupState.ACCEPTED]
    project.refresh_from_db()
    assert project.accepted_revision == 2
    contract = Contract.objects.get(method="accept_draft")
    assert contract.state == ContractState.VERIFIED
    contract_url = reverse("admin:confirmations_contract_change", args=[contract.pk])
    assert messages_of(response) == [
        (
            constants.SUCCESS,
            f'Accepted the working draft of steps: contract <a href="{contract_url}">{contract.memorable_id}</a> is '
            "verified, and the project is at accepted revision 2 (2 groups, 2 operations).",
        )
    ]
    (row,) = audit_rows(EventKind.DRAFT_ACCEPTED)
    assert (row.outcome, row.called_by, row.project) == ("accepted", "olivia", "steps")
    provenance = {group["group_id"]: group for group in row.arguments["groups"]}
    assert provenance[str(carlas.pk)] | {"acknowledged_findings": []} == {
        "group_id": str(carlas.pk),
        "title": "Shift counter",
        "rationale": RATIONALE,
        "author": "carla",
        "client_label": "carla-client",
        "session": "session-of-carla",
        "state": "submitted",
        "operations": 1,
        "acknowledged_findings": [],
    }
    assert provenance[str(oscars.pk)]["author"] == "oscar"
    assert "The draft has no live change groups." in response.content.decode()


def test_accepting_a_draft_that_moved_since_the_review_is_refused_and_audited(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    before = project_file(project).read_bytes()
    later = begin(project, cast.caretaker, session=OTHER_SESSION, title="Later")
    stage(project, later, [add("Later")], session=OTHER_SESSION)

    response = decide(operator, project, "accept", reviewed)

    assert messages_of(response) == [
        (
            constants.ERROR,
            f"The working draft of steps moved from revision {reviewed}, which you reviewed, to "
            f"{revision_of(project)}; nothing was done. Review it again.",
        )
    ]
    assert project_file(project).read_bytes() == before
    assert states(group) == [GroupState.SUBMITTED]
    assert [(row.outcome, row.called_by) for row in audit_rows(EventKind.DRAFT_ACCEPTED)] == [
        ("refused: stale_revision", "olivia")
    ]


def test_accepting_after_the_file_changed_on_disk_since_the_review_is_refused_as_drift(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    edit_by_hand(project)
    edited = project_file(project).read_bytes()

    response = decide(operator, project, "accept", reviewed)

    ((level, text),) = messages_of(response)
    assert level == constants.ERROR
    assert text.startswith("The accepted file of steps changed after you reviewed its draft")
    assert project_file(project).read_bytes() == edited
    assert states(group) == [GroupState.SUBMITTED]
    assert [row.outcome for row in audit_rows(EventKind.DRAFT_ACCEPTED)] == ["refused: target_drift"]


def test_accepting_without_approve_change_is_refused_and_audited(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    before = project_file(project).read_bytes()
    withdraw_approve_change()

    response = decide(operator, project, "accept", revision_of(project))

    ((level, text),) = messages_of(response)
    assert level == constants.ERROR and "needs the approve_change permission on the project" in text
    assert project_file(project).read_bytes() == before
    assert states(group) == [GroupState.SUBMITTED]
    assert [(row.outcome, row.called_by) for row in audit_rows(EventKind.DRAFT_ACCEPTED)] == [
        ("refused: permission_denied", "olivia")
    ]
    assert not Contract.objects.exists()


def test_approve_change_on_the_project_alone_is_enough_to_accept(operator, cast, project):
    drafted(project, cast.caretaker, "ShiftCount")
    withdraw_approve_change()
    assign_perm("projects.approve_change", cast.operator.user, project)

    response = decide(operator, project, "accept", revision_of(project))

    assert messages_of(response)[0][0] == constants.SUCCESS
    assert b'name="ShiftCount"' in project_file(project).read_bytes()


def test_a_form_without_the_reviewed_revision_decides_nothing(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")

    response = decide(operator, project, "accept", "")

    assert messages_of(response) == [
        (constants.ERROR, "The form did not say which revision of the draft you reviewed; review it again.")
    ]
    assert states(group) == [GroupState.SUBMITTED]


def test_the_decisions_take_only_a_post(operator, cast, project):
    drafted(project, cast.caretaker, "ShiftCount")

    assert operator.get(reverse("admin:draft_accept", args=["steps"])).status_code == 405
    assert operator.get(reverse("admin:draft_discard", args=["steps"])).status_code == 405


def test_the_decisions_need_the_csrf_token(cast, project):
    drafted(project, cast.caretaker, "ShiftCount")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(cast.operator.user)

    response = strict.post(reverse("admin:draft_accept", args=["steps"]), {"working_revision": revision_of(project)})

    assert response.status_code == 403
    assert not Contract.objects.exists()


# --- discard ---------------------------------------------------------------------------------------


def test_discard_throws_the_groups_away_leaves_the_file_and_audits_it(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    before = project_file(project).read_bytes()

    response = decide(operator, project, "discard", revision_of(project))

    assert messages_of(response) == [
        (
            constants.SUCCESS,
            "Discarded the working draft of steps: 1 change group left it, and the accepted file is unchanged.",
        )
    ]
    assert states(group) == [GroupState.DISCARDED]
    assert project_file(project).read_bytes() == before
    (row,) = audit_rows(EventKind.DRAFT_DISCARDED)
    assert (row.outcome, row.called_by, [g["group_id"] for g in row.arguments["groups"]]) == (
        "discarded",
        "olivia",
        [str(group.pk)],
    )
    assert 'id="no-drafts"' in operator.get(DRAFTS).content.decode()


def test_discarding_a_draft_that_moved_since_the_review_is_refused(operator, cast, project):
    group = drafted(project, cast.caretaker, "ShiftCount")
    reviewed = revision_of(project)
    stage(project, begin(project, cast.caretaker, session=OTHER_SESSION), [add("Later")], session=OTHER_SESSION)

    response = decide(operator, project, "discard", reviewed)

    assert messages_of(response)[0][0] == constants.ERROR
    assert states(group) == [GroupState.SUBMITTED]
    assert [row.outcome for row in audit_rows(EventKind.DRAFT_DISCARDED)] == ["refused: stale_revision"]
