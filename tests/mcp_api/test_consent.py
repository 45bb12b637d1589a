"""Gate 2's state machine: requests, decisions by operators with grant_access, and grants that end."""

from __future__ import annotations

import pytest
from guardian.shortcuts import assign_perm

from access.grants import AccessDecisionRefused, do_decide_access, do_revoke_access, raise_request
from access.models import AccessState, McpSession, Transport
from access.services import do_end_session, do_open_session, do_revoke_token, do_switch_mcp
from audit.models import AuditEvent, EventKind
from projects.models import Project
from projects.rights import can_view, visible_projects

pytestmark = pytest.mark.django_db


@pytest.fixture
def line(cast) -> Project:
    return Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)


@pytest.fixture
def session(cast) -> McpSession:
    return do_open_session(cast.caretaker.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")


def test_the_first_request_is_pending_and_audited(cast, line, session):
    request = raise_request(cast.caretaker.token, session, line)

    assert request.state == AccessState.PENDING
    assert AuditEvent.objects.filter(kind=EventKind.ACCESS_REQUEST, project="line-3", session=session.id).count() == 1


def test_asking_again_returns_the_same_request_without_a_second_audit_row(cast, line, session):
    first = raise_request(cast.caretaker.token, session, line)
    again = raise_request(cast.caretaker.token, session, line)

    assert again.pk == first.pk
    assert AuditEvent.objects.filter(kind=EventKind.ACCESS_REQUEST).count() == 1


def test_an_operator_allows_a_request_and_the_sessions_context_generation_moves(cast, line, session):
    request = raise_request(cast.caretaker.token, session, line)

    do_decide_access(request.pk, allow=True, user=cast.operator.user)

    request.refresh_from_db()
    session.refresh_from_db()
    assert (request.state, request.decided_by) == (AccessState.ALLOWED, "olivia")
    assert session.context_generation == 1
    assert AuditEvent.objects.get(kind=EventKind.ACCESS_DECISION).called_by == "olivia"


def test_deciding_an_already_decided_request_is_refused_and_changes_nothing(cast, line, session):
    request = raise_request(cast.caretaker.token, session, line)
    do_decide_access(request.pk, allow=False, user=cast.operator.user)

    with pytest.raises(AccessDecisionRefused, match="denied already"):
        do_decide_access(request.pk, allow=True, user=cast.operator.user)

    request.refresh_from_db()
    assert request.state == AccessState.DENIED


def test_a_user_without_grant_access_cannot_decide_and_the_attempt_is_audited(cast, line, session):
    request = raise_request(cast.caretaker.token, session, line)

    with pytest.raises(AccessDecisionRefused, match="may not grant"):
        do_decide_access(request.pk, allow=True, user=cast.caretaker.user)

    request.refresh_from_db()
    assert request.state == AccessState.PENDING
    assert AuditEvent.objects.filter(kind=EventKind.ACCESS_DECISION, called_by="carla").count() == 1


def test_an_object_permission_on_one_project_lets_a_user_decide_for_it(cast, line, session):
    assign_perm("projects.grant_access", cast.caretaker.user, line)
    request = raise_request(cast.caretaker.token, session, line)

    do_decide_access(request.pk, allow=True, user=cast.caretaker.user)

    request.refresh_from_db()
    assert request.state == AccessState.ALLOWED


def test_only_an_allowed_grant_can_be_revoked(cast, line, session):
    request = raise_request(cast.caretaker.token, session, line)
    with pytest.raises(AccessDecisionRefused, match="Only an allowed grant"):
        do_revoke_access(request.pk, user=cast.operator.user)

    do_decide_access(request.pk, allow=True, user=cast.operator.user)
    do_revoke_access(request.pk, user=cast.operator.user)

    request.refresh_from_db()
    assert request.state == AccessState.REVOKED


@pytest.mark.parametrize("ending", ["session", "token", "switch"])
def test_a_grant_ends_with_its_session_its_token_or_mcp_switched_off(cast, line, session, ending):
    do_switch_mcp(True, acting_user="tests")
    request = raise_request(cast.caretaker.token, session, line)
    do_decide_access(request.pk, allow=True, user=cast.operator.user)

    if ending == "session":
        do_end_session(session, reason="test")
    elif ending == "token":
        do_revoke_token(cast.caretaker.token, acting_user="olivia")
    else:
        do_switch_mcp(False, acting_user="olivia")

    request.refresh_from_db()
    assert request.state == AccessState.ENDED


def test_a_request_raised_again_after_its_grant_ended_is_pending_again(cast, line, session):
    request = raise_request(cast.caretaker.token, session, line)
    do_decide_access(request.pk, allow=True, user=cast.operator.user)
    do_switch_mcp(True, acting_user="tests")
    do_switch_mcp(False, acting_user="tests")

    again = raise_request(cast.caretaker.token, session, line)

    assert (again.pk, again.state) == (request.pk, AccessState.PENDING)


def test_a_principal_without_view_permission_does_not_see_the_project(cast, line):
    assert can_view(cast.operator.user, line)
    assert not can_view(cast.caretaker.user, line)
    assert list(visible_projects(cast.caretaker.user)) == []

    assign_perm("projects.view_project", cast.caretaker.user, line)

    assert list(visible_projects(cast.caretaker.user)) == [line]
