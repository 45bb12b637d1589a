"""Per-project rights on confirmations, as the working draft has them: seeing a pending confirmation needs
view_project on its project, deciding it needs approve_change there too (model or object permission), on
the console's screens, the operator REST API and the dashboard alike. What an operator may not see is
filtered out of the lists and "not found" when named; a decision attempt on it is refused and audited.

Here the operators group holds neither right on projects; Olivia is given both on the project by object
permission, Oscar nothing (or only view_project)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from audit.models import AuditEvent, EventKind
from confirmations.models import ConfirmationState, Contract, PendingConfirmation
from forge_core.console import OPERATORS_GROUP
from projects.models import Project
from tests.confirmations.operator_helpers import ask, project_file_of
from tests.conftest import Cast, Member

pytestmark = pytest.mark.django_db

C = ConfirmationState
CONFIRMATIONS = "/api/confirmations"


@pytest.fixture(autouse=True)
def rights_per_project(cast: Cast, project: Project) -> None:
    group = Group.objects.get(name=OPERATORS_GROUP)
    group.permissions.remove(*Permission.objects.filter(codename__in=["view_project", "approve_change"]))
    assign_perm("projects.view_project", cast.operator.user, project)
    assign_perm("projects.approve_change", cast.operator.user, project)


@pytest.fixture
def pending(cast: Cast, project: Project) -> PendingConfirmation:
    return ask(cast.caretaker, project)


def api(member: Member) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def console(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def refusals(confirmation: PendingConfirmation) -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED, arguments_json__contains=str(confirmation.pk))
    return [(row.outcome, row.called_by) for row in rows.order_by("seq") if row.outcome.startswith("refused")]


def test_the_rest_list_leaves_out_confirmations_on_projects_the_operator_may_not_view(cast, pending):
    listed = api(cast.other_operator).get(CONFIRMATIONS).json()["confirmations"]
    assert listed == []
    assert [row["id"] for row in api(cast.operator).get(CONFIRMATIONS).json()["confirmations"]] == [str(pending.pk)]


def test_reading_a_confirmation_on_a_project_the_operator_may_not_view_is_404(cast, pending):
    response = api(cast.other_operator).get(f"{CONFIRMATIONS}/{pending.pk}")
    assert (response.status_code, response.json()["code"]) == (404, "FORGE_ERR_NOT_FOUND")
    assert "diff" not in response.text


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_deciding_a_confirmation_on_a_project_the_operator_may_not_view_is_404_audited_and_changes_nothing(
    cast, pending, decision
):
    before = project_file_of(Project.objects.get(slug=pending.project)).read_bytes()
    response = api(cast.other_operator).post(f"{CONFIRMATIONS}/{pending.pk}/{decision}", {}, format="json")
    assert (response.status_code, response.json()["code"]) == (404, "FORGE_ERR_NOT_FOUND")
    assert PendingConfirmation.objects.get(pk=pending.pk).state == C.PENDING
    assert project_file_of(Project.objects.get(slug=pending.project)).read_bytes() == before
    assert refusals(pending) == [(f"refused: {decision} project not visible", "oscar")]


def test_viewing_without_approve_change_shows_the_confirmation_but_refuses_the_approval(cast, project, pending):
    assign_perm("projects.view_project", cast.other_operator.user, project)
    oscar = api(cast.other_operator)
    assert oscar.get(f"{CONFIRMATIONS}/{pending.pk}").status_code == 200
    response = oscar.post(f"{CONFIRMATIONS}/{pending.pk}/approve", {}, format="json")
    assert (response.status_code, response.json()["code"]) == (403, "FORGE_ERR_PERMISSION_DENIED")
    assert "approve_change permission" in response.json()["detail"]
    assert PendingConfirmation.objects.get(pk=pending.pk).state == C.PENDING
    assert not Contract.objects.exists()
    assert refusals(pending) == [("refused: approve without approve_change", "oscar")]


def test_approve_change_on_the_project_alone_is_enough_to_approve(cast, pending):
    response = api(cast.operator).post(f"{CONFIRMATIONS}/{pending.pk}/approve", {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == C.EXECUTED


def test_the_console_list_and_page_hide_a_confirmation_on_a_project_the_operator_may_not_view(cast, pending):
    oscar = console(cast.other_operator)
    listing = oscar.get(reverse("admin:confirmations_pendingconfirmation_changelist"))
    assert listing.status_code == 200 and pending.memorable_id not in listing.content.decode()
    page = oscar.get(reverse("admin:confirmations_pendingconfirmation_change", args=[pending.pk]), follow=True)
    assert pending.question not in page.content.decode()
    assert "diff" not in page.content.decode().split('id="content-main"')[-1]
    decided = oscar.post(
        reverse("admin:confirmations_pendingconfirmation_decide", args=[pending.pk]), {"decision": "approve"}
    )
    assert decided.status_code == 302
    assert PendingConfirmation.objects.get(pk=pending.pk).state == C.PENDING


def test_the_console_page_offers_no_decision_to_an_operator_without_approve_change(cast, project, pending):
    assign_perm("projects.view_project", cast.other_operator.user, project)
    page = console(cast.other_operator).get(
        reverse("admin:confirmations_pendingconfirmation_change", args=[pending.pk])
    )
    text = page.content.decode()
    assert pending.question in text
    assert 'id="approve"' not in text and f"approve_change permission on project {project.slug}" in text
    mine = console(cast.operator).get(reverse("admin:confirmations_pendingconfirmation_change", args=[pending.pk]))
    assert 'id="approve"' in mine.content.decode()


def test_the_dashboard_counts_only_the_confirmations_the_operator_may_see(cast, pending):
    assert console(cast.operator).get(reverse("admin:index")).context["dashboard"].pending_confirmations == 1
    assert console(cast.other_operator).get(reverse("admin:index")).context["dashboard"].pending_confirmations == 0
