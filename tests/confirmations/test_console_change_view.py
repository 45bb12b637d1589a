"""The confirmation page shows a project write POU by POU (projects.review_diff through the sealed preview):
the ST body as a line diff with line numbers, the variable table as a table diff, the XML diff one click
away; what it shows is the preview sealed with the confirmation, whatever the file holds now. The list of
confirmations offers no bulk delete, which would be refused.

Carla's client asks; Olivia is the operator."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from confirmations.models import Contract, PendingConfirmation
from confirmations.services import do_approve_confirmation, is_authentic
from projects.models import Project
from tests.confirmations.helpers import project_file, propose_write
from tests.confirmations.operator_helpers import ask
from tests.projects.test_review_diff import NEW_BODY

pytestmark = pytest.mark.django_db

OPERATIONS = [
    {"op": "add_variable", "scope": "pou/FlowTotal", "section": "localVars", "name": "Spill", "type": "BOOL"},
    {"op": "update_variable", "id": "pou/FlowTotal/var/Pulses", "type": "DINT"},
    {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": NEW_BODY},
]
# The ST line highlighted from the grammar's highlight query (projects.st.highlight), each run escaped.
ADDED_LINE = (
    '<tr class="cv-added"><td class="cv-ln"></td><td class="cv-ln">4</td><td class="cv-code">  Spill '
    '<span class="st-operator">:=</span> <span class="st-boolean">FALSE</span><span class="st-punctuation">;</span></td></tr>'
)


@pytest.fixture
def operator(client, cast) -> Client:
    client.force_login(cast.operator.user)
    return client


def propose(cast, project: Project) -> PendingConfirmation:
    return propose_write(
        cast.caretaker,
        project,
        OPERATIONS,
        tool="project.write.set_pou_body",
        question="carla asks to count spills in FlowTotal.",
        label="count spills",
    )


def page_of(client: Client, confirmation: PendingConfirmation) -> str:
    return client.get(
        reverse("admin:confirmations_pendingconfirmation_change", args=[confirmation.pk])
    ).content.decode()


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def test_the_page_shows_the_st_body_as_a_line_diff_with_line_numbers(operator, cast, project):
    page = page_of(operator, propose(cast, project))

    unit = page.split('id="cv-pouflowtotal"')[1].split("</section>")[0]
    assert '<span class="cv-status">changed</span> POU <code>FlowTotal</code> (functionBlock)' in unit
    assert '<tr class="cv-hunk"><td colspan="3">@@ -1,6 +1,7 @@</td></tr>' in unit
    assert ADDED_LINE in unit
    assert (
        '<tr class="cv-same"><td class="cv-ln">4</td><td class="cv-ln">5</td><td class="cv-code">'
        '<span class="st-keyword">ELSIF</span>' in unit
    )


def test_the_page_shows_the_variable_table_as_a_table_diff(operator, cast, project):
    page = page_of(operator, propose(cast, project))

    table = page.split('<table class="cv-vars">')[1].split("</table>")[0]
    rows = [text_of(row) for row in table.split("<tr")[2:]]
    assert rows == [
        'class="cv-changed"> changed Pulses localVars INT DINT',
        'class="cv-added"> added Spill localVars BOOL',
    ]
    assert "<del>INT</del> <ins>DINT</ins>" in table


def test_the_xml_diff_is_one_click_away(operator, cast, project):
    page = page_of(operator, propose(cast, project))

    details = page.split('<details class="forge-raw-diff" id="raw-diff">')[1].split("</details>")[0]
    assert '<summary id="preview-diff">What changes in the file: the XML diff</summary>' in details
    assert '<span class="added">+            &lt;variable name=&quot;Spill&quot;&gt;</span>' in details
    assert page.index('id="change-view"') < page.index('id="raw-diff"')


def test_the_page_shows_the_sealed_change_not_the_file_as_it_is_now(operator, cast, project):
    confirmation = propose(cast, project)
    path = project_file(project)
    path.write_bytes(path.read_bytes().replace(b"Litres := Pulses / PulsesPerLitre;", b"Litres := 0;"))

    page = page_of(operator, confirmation)

    assert is_authentic(confirmation)
    assert ADDED_LINE in page
    assert "Litres := 0;" not in page


def test_a_preview_without_a_change_view_shows_its_diff_as_it_is(operator, cast, project):
    page = page_of(operator, ask(cast.caretaker, project))

    assert 'id="change-view"' not in page and 'id="raw-diff"' not in page
    assert '<h3 id="preview-diff" class="forge-heading-inset">What changes in the file</h3>' in page


def test_the_list_of_confirmations_offers_no_delete_action(operator, cast, project):
    propose(cast, project)

    page = operator.get(reverse("admin:confirmations_pendingconfirmation_changelist")).content.decode()
    contracts = operator.get(reverse("admin:confirmations_contract_changelist")).content.decode()

    assert "delete_selected" not in page and "delete_selected" not in contracts


def test_the_contract_of_an_approved_write_shows_the_change_it_carries(operator, cast, project):
    decided = do_approve_confirmation(propose(cast, project).pk, acting_user=cast.operator.user)
    contract = Contract.objects.get(confirmation=decided)

    page = operator.get(reverse("admin:confirmations_contract_change", args=[contract.pk])).content.decode()

    section = page.split('id="contract-change"')[1]
    assert f"As the operator approved it on confirmation {decided.memorable_id}" in section
    assert ADDED_LINE in section


def test_the_contract_shows_no_change_from_a_confirmation_edited_after_its_approval(operator, cast, project):
    decided = do_approve_confirmation(propose(cast, project).pk, acting_user=cast.operator.user)
    contract = Contract.objects.get(confirmation=decided)
    forged = {**decided.preview, "change_view": {"units": [], "others": [], "truncated": False}}
    PendingConfirmation.objects.filter(pk=decided.pk).update(preview=forged)

    page = operator.get(reverse("admin:confirmations_contract_change", args=[contract.pk])).content.decode()

    assert 'id="contract-change"' not in page
