"""Deciding access requests in the console: allow, a repeated decision refused, CSRF enforced."""

from __future__ import annotations

import pytest
from django.test import Client

from access.grants import raise_request
from access.models import AccessRequest, AccessState, Transport
from access.services import do_open_session
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
