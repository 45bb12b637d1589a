"""Deciding access requests in the console: the bulk actions, the buttons of each row and of a request's
page (deny and revoke asked first), refusals shown and audited, CSRF enforced, no delete anywhere."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets, quote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client, RequestFactory

from access.grants import do_decide_access, raise_request
from access.limits import do_open_stream
from access.models import AccessRequest, AccessState, Transport
from access.services import do_open_session
from audit.models import AuditEvent, EventKind
from forge_core.console import OPERATORS_GROUP
from projects.models import Project

pytestmark = pytest.mark.django_db

CHANGELIST = "/console/access/accessrequest/"


@pytest.fixture
def pending(cast) -> AccessRequest:
    project = Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)
    session = do_open_session(cast.caretaker.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    return raise_request(cast.caretaker.token, session, project)


def decide(client: Client, action: str, request: AccessRequest):
    return client.post(CHANGELIST, {"action": action, "_selected_action": [str(request.pk)]}, follow=True)


def test_an_operator_allows_a_pending_request_from_the_console(cast, client, pending):
    client.force_login(cast.operator.user)

    page = decide(client, "allow", pending)

    pending.refresh_from_db()
    assert (pending.state, pending.decided_by) == (AccessState.ALLOWED, "olivia")
    assert "Decided 1 request(s)." in page.content.decode()


def test_deciding_an_already_decided_request_shows_why_and_changes_nothing(cast, client, pending):
    client.force_login(cast.operator.user)
    decide(client, "deny", pending)

    page = decide(client, "allow", pending)

    pending.refresh_from_db()
    assert pending.state == AccessState.DENIED
    assert "is denied already" in page.content.decode()


def test_a_decision_without_the_csrf_token_is_refused(cast, pending):
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(cast.operator.user)

    response = forged.post(CHANGELIST, {"action": "allow", "_selected_action": [str(pending.pk)]})

    pending.refresh_from_db()
    assert response.status_code == 403
    assert pending.state == AccessState.PENDING


def test_the_list_shows_principal_client_and_state(cast, client, pending):
    client.force_login(cast.operator.user)

    page = client.get(CHANGELIST).content.decode()

    assert "carla" in page and "carla-client" in page and "pending" in page


def decision_url(request: AccessRequest, name: str) -> str:
    return f"{CHANGELIST}{request.pk}/{name}/"


def decisions_audited() -> list[tuple[str, str]]:
    return [(row.called_by, row.outcome) for row in AuditEvent.objects.filter(kind=EventKind.ACCESS_DECISION)]


def test_a_pending_row_offers_allow_as_a_post_and_deny_as_a_link_that_asks_first(cast, client, pending):
    client.force_login(cast.operator.user)

    page = client.get(CHANGELIST).content.decode()

    assert f'formaction="{decision_url(pending, "allow")}?next=' in page
    assert f'class="button danger" href="{decision_url(pending, "deny")}?next=' in page
    assert decision_url(pending, "revoke") not in page
    assert f'href="/console/access/mcpsession/{quote(pending.session_id)}/change/" title="{pending.session_id}"' in page


def test_allowing_from_the_row_allows_audits_and_returns_to_the_list(cast, client, pending):
    client.force_login(cast.operator.user)

    page = client.post(f"{decision_url(pending, 'allow')}?next={CHANGELIST}", follow=True)

    pending.refresh_from_db()
    assert (pending.state, pending.decided_by) == (AccessState.ALLOWED, "olivia")
    assert page.redirect_chain == [(CHANGELIST, 302)]
    assert "Allowed carla-client on line-3." in page.content.decode()
    assert decisions_audited() == [("olivia", "allowed")]


def test_deny_asks_first_and_changes_nothing_until_confirmed(cast, client, pending):
    client.force_login(cast.operator.user)

    page = client.get(decision_url(pending, "deny")).content.decode()

    pending.refresh_from_db()
    assert pending.state == AccessState.PENDING
    assert "Deny this session access to line-3?" in page
    assert 'class="button danger" id="confirm">Deny</button>' in page
    assert decisions_audited() == []


def test_confirming_deny_denies_and_audits(cast, client, pending):
    client.force_login(cast.operator.user)

    page = client.post(decision_url(pending, "deny"), {"next": CHANGELIST}, follow=True)

    pending.refresh_from_db()
    assert (pending.state, pending.decided_by) == (AccessState.DENIED, "olivia")
    assert "Denied carla-client on line-3." in page.content.decode()
    assert decisions_audited() == [("olivia", "denied")]


def test_the_page_of_an_allowed_request_offers_revoke_and_revoking_ends_the_grant(cast, client, pending):
    do_decide_access(pending.pk, allow=True, user=cast.operator.user)
    client.force_login(cast.operator.user)
    detail = f"{CHANGELIST}{pending.pk}/change/"

    shown = client.get(detail).content.decode()
    page = client.post(decision_url(pending, "revoke"), {"next": detail}, follow=True)

    pending.refresh_from_db()
    assert 'id="decide-revoke"' in shown and 'id="decide-allow"' not in shown
    assert page.redirect_chain == [(detail, 302)]
    assert pending.state == AccessState.REVOKED
    assert decisions_audited() == [("olivia", "allowed"), ("olivia", "revoked")]


def test_a_decision_the_state_does_not_allow_is_refused_with_a_message(cast, client, pending):
    client.force_login(cast.operator.user)

    page = client.post(decision_url(pending, "revoke"), follow=True).content.decode()

    pending.refresh_from_db()
    assert pending.state == AccessState.PENDING
    assert "Only an allowed grant can be revoked; this one is pending." in page


def test_a_decision_without_grant_access_is_refused_audited_and_offered_no_buttons(cast, client, pending):
    grant_access = Permission.objects.get(content_type__app_label="projects", codename="grant_access")
    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(grant_access)
    client.force_login(cast.operator.user)

    listed = client.get(CHANGELIST).content.decode()
    page = client.post(decision_url(pending, "allow"), follow=True).content.decode()

    pending.refresh_from_db()
    assert decision_url(pending, "allow") not in listed
    assert "You may not grant access to line-3; ask its owner." in page
    assert pending.state == AccessState.PENDING
    assert decisions_audited() == [("olivia", "refused: no grant_access permission")]


def test_a_row_decision_without_the_csrf_token_is_refused(cast, pending):
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(cast.operator.user)

    response = forged.post(decision_url(pending, "allow"))

    pending.refresh_from_db()
    assert response.status_code == 403
    assert pending.state == AccessState.PENDING


def test_a_page_elsewhere_is_not_where_a_decision_returns(cast, client, pending):
    client.force_login(cast.operator.user)

    response = client.post(decision_url(pending, "allow"), {"next": "https://elsewhere.example/"})

    assert response["Location"] == f"{CHANGELIST}{pending.pk}/change/"


def test_no_console_list_offers_delete_selected_where_deleting_is_refused(cast):
    request = RequestFactory().get("/console/")
    request.user = cast.operator.user

    offering = [
        type(model_admin).__name__
        for model_admin in admin.site._registry.values()
        if "delete_selected" in model_admin.get_actions(request) and not model_admin.has_delete_permission(request)
    ]

    assert offering == []


def test_no_console_form_offers_save_over_fields_that_cannot_change(cast):
    request = RequestFactory().get("/console/")
    request.user = get_user_model().objects.create_superuser("root", password="root-password-123")

    saving_nothing = [
        type(model_admin).__name__
        for model_admin in admin.site._registry.values()
        if model_admin.has_change_permission(request)
        and not set(flatten_fieldsets(model_admin.get_fieldsets(request)))
        - set(model_admin.get_readonly_fields(request))
    ]

    assert saving_nothing == []


# --- sessions ----------------------------------------------------------------------------------------------

SESSIONS = "/console/access/mcpsession/"


def test_the_sessions_list_shows_principal_client_grants_and_streams(cast, client, pending):
    do_decide_access(pending.pk, allow=True, user=cast.operator.user)
    do_open_stream(cast.caretaker.token, pending.session_id)
    client.force_login(cast.operator.user)

    page = client.get(SESSIONS).content.decode()

    [row] = [row for row in page.split("<tr") if f"{pending.session_id[:8]}…" in row]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[0] == "carla-client (carla)"
    assert (cells[-3], cells[-2]) == ("1", "1")  # one grant allowed, one stream open


def test_a_session_page_shows_its_grants_streams_and_client_without_a_save_button(cast, client, pending):
    do_decide_access(pending.pk, allow=True, user=cast.operator.user)
    do_open_stream(cast.caretaker.token, pending.session_id)
    client.force_login(cast.operator.user)

    page = client.get(f"{SESSIONS}{quote(pending.session_id)}/change/").content.decode()

    assert f'<code id="session-id">{pending.session_id}</code>' in page
    assert f'href="{CHANGELIST}{pending.pk}/change/">line-3</a>' in page
    assert '<td class="grant-state">Allowed</td>' in page
    assert "No event stream is open" not in page and "No project" not in page
    assert 'name="_save"' not in page


@pytest.mark.parametrize("request_id", [987654, 10**25])
def test_deciding_an_unknown_or_impossible_request_id_is_404(cast, client, request_id):
    client.force_login(cast.operator.user)

    assert client.post(f"{CHANGELIST}{request_id}/allow/").status_code == 404
