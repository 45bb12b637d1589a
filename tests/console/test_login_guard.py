"""The console login is guarded and recorded: audit rows for logins, failures, lockouts and logouts; a
throttle per user name and per client address (django-axes) with a page that says how to get back in;
and a login or logout whose audit row cannot be written does not happen."""

from __future__ import annotations

import json

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.urls import reverse

from audit.models import AuditEvent, EventKind
from forge_core.errors import AuditUnavailable

pytestmark = pytest.mark.django_db

LOGIN = "admin:login"
LOGOUT = "admin:logout"
PASSWORD = "olivia-password-123"


@pytest.fixture(autouse=True)
def small_limit(settings) -> None:
    settings.AXES_FAILURE_LIMIT = 3


def log_in(client, username: str, password: str, address: str = "192.0.2.10"):
    return client.post(
        reverse(LOGIN), {"username": username, "password": password, "next": "/console/"}, REMOTE_ADDR=address
    )


def login_rows() -> list[tuple[str, str, dict]]:
    return [
        (event.outcome, event.called_by, json.loads(event.arguments_json))
        for event in AuditEvent.objects.filter(kind=EventKind.CONSOLE_LOGIN).order_by("seq")
    ]


def test_a_successful_login_is_an_audit_row_with_the_name_and_the_address(client, cast):
    response = log_in(client, "olivia", PASSWORD)

    assert response.status_code == 302
    assert client.get(reverse("admin:index")).status_code == 200
    assert login_rows() == [("ok", "olivia", {"username": "olivia", "address": "192.0.2.10"})]


def test_a_failed_login_is_an_audit_row_that_never_holds_the_password(client, cast):
    response = log_in(client, "olivia", "wrong-password-42")

    assert response.status_code == 200
    assert "_auth_user_id" not in client.session
    assert login_rows() == [("failed", "olivia", {"username": "olivia", "address": "192.0.2.10"})]
    stored = AuditEvent.objects.get(kind=EventKind.CONSOLE_LOGIN)
    assert "wrong-password-42" not in stored.arguments_json + stored.outcome + stored.called_by


def test_a_logout_is_an_audit_row(client, cast):
    log_in(client, "olivia", PASSWORD)

    response = client.post(reverse(LOGOUT), REMOTE_ADDR="192.0.2.10")

    assert response.status_code == 200
    assert "_auth_user_id" not in client.session
    assert [row[0] for row in login_rows()] == ["ok", "logged_out"]
    assert login_rows()[-1] == ("logged_out", "olivia", {"username": "olivia", "address": "192.0.2.10"})


def test_the_failure_that_reaches_the_limit_locks_the_name_out_with_a_page_that_says_how_to_get_back_in(client, cast):
    for _ in range(2):
        assert log_in(client, "olivia", "wrong-password-42").status_code == 200

    response = log_in(client, "olivia", "wrong-password-42")

    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed logins for this name or address; try again in 15 minutes" in page
    assert "python manage.py axes_reset_username olivia" in page
    assert [row[0] for row in login_rows()] == ["failed", "failed", "locked_out"]
    assert AccessAttempt.objects.get(username="olivia").failures_since_start == 3


def test_a_locked_out_name_with_the_right_password_is_still_refused_and_recorded(client, cast):
    for _ in range(3):
        log_in(client, "olivia", "wrong-password-42")

    response = log_in(client, "olivia", PASSWORD)

    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert login_rows()[-1] == ("locked_out", "olivia", {"username": "olivia", "address": "192.0.2.10"})
    # Tries during a lockout do not extend it: the count stays where the lockout began.
    assert AccessAttempt.objects.get(username="olivia").failures_since_start == 3


def test_a_locked_out_name_is_refused_from_another_address_too(client, cast):
    for _ in range(3):
        log_in(client, "olivia", "wrong-password-42", address="192.0.2.10")

    response = log_in(client, "olivia", PASSWORD, address="198.51.100.7")

    assert response.status_code == 429
    assert login_rows()[-1] == ("locked_out", "olivia", {"username": "olivia", "address": "198.51.100.7"})


def test_an_address_that_failed_for_many_names_is_locked_out_for_every_name(client, cast):
    for name in ("alice", "bob", "carol"):
        log_in(client, name, "wrong-password-42", address="203.0.113.5")

    response = log_in(client, "olivia", PASSWORD, address="203.0.113.5")

    assert response.status_code == 429
    assert "python manage.py axes_reset_ip 203.0.113.5" in response.content.decode()
    assert login_rows()[-1][0] == "locked_out"
    assert log_in(client, "olivia", PASSWORD, address="192.0.2.10").status_code == 302


def test_axes_reset_username_unlocks_the_name(client, cast):
    for _ in range(3):
        log_in(client, "olivia", "wrong-password-42")

    call_command("axes_reset_username", "olivia")

    assert log_in(client, "olivia", PASSWORD).status_code == 302
    assert login_rows()[-1][0] == "ok"


def test_a_successful_login_clears_the_names_failures(client, cast):
    for _ in range(2):
        log_in(client, "olivia", "wrong-password-42")

    assert log_in(client, "olivia", PASSWORD).status_code == 302

    assert not AccessAttempt.objects.filter(username="olivia").exists()


def test_a_login_whose_audit_row_cannot_be_written_signs_nobody_in(client, cast, monkeypatch):
    def unavailable(*args, **kwargs):
        raise AuditUnavailable("the audit table is gone")

    monkeypatch.setattr("console.login_guard.record", unavailable)

    response = log_in(client, "olivia", PASSWORD)

    assert response.status_code == 302
    assert response["Location"] == reverse(LOGIN)
    assert "_auth_user_id" not in client.session
    assert client.get(reverse("admin:index")).status_code == 302
    page = client.get(reverse(LOGIN)).content.decode()
    assert "Nobody was signed in: the audit log could not be written" in page


def test_a_logout_whose_audit_row_cannot_be_written_leaves_the_session_signed_in(client, cast, monkeypatch):
    log_in(client, "olivia", PASSWORD)

    def unavailable(*args, **kwargs):
        raise AuditUnavailable("the audit table is gone")

    monkeypatch.setattr("console.login_guard.record", unavailable)
    response = client.post(reverse(LOGOUT))

    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(cast.operator.user.pk)
    assert [row[0] for row in login_rows()] == ["ok"]


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_a_lockout_served_through_the_asgi_handler_gets_the_same_page(async_client, cast, settings):
    # Under daphne the middleware chain runs asynchronously, where axes hands the lockout page its
    # arguments in another order: the page must not depend on them.
    settings.AXES_FAILURE_LIMIT = 1
    form = {"username": "olivia", "password": "wrong-password-42"}

    response = await async_client.post(reverse(LOGIN), form, REMOTE_ADDR="192.0.2.10")

    assert response.status_code == 429
    assert "python manage.py axes_reset_username olivia" in response.content.decode()
