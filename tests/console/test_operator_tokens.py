"""Operator tokens: made for operators only, shown once, audited, and `manage.py create_operator_token`."""

from __future__ import annotations

import io

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from access.services import token_digest
from audit.models import AuditEvent, EventKind
from console.models import OperatorToken
from console.operator_tokens import (
    NotAnOperator,
    authenticate_operator_token,
    do_create_operator_token,
    do_revoke_operator_token,
)
from tests.mcp_api.helpers import initialize_message, post

pytestmark = pytest.mark.django_db


def switch_read_with(raw: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client.get("/api/mcp").status_code


def test_an_operator_token_is_stored_as_its_digest_and_its_creation_audited(cast):
    new = do_create_operator_token(cast.operator.user, "nightly report", acting_user="oscar")

    assert new.raw.startswith("fop_")
    stored = OperatorToken.objects.get(pk=new.token.pk)
    assert (stored.digest, stored.prefix, stored.user, stored.label) == (
        token_digest(new.raw),
        new.raw[:12],
        cast.operator.user,
        "nightly report",
    )
    assert new.raw not in {stored.digest, stored.prefix}
    created = AuditEvent.objects.filter(kind=EventKind.TOKEN_CREATED).order_by("-seq").first()
    assert (created.called_by, created.client_label, created.arguments) == (
        "oscar",
        "nightly report",
        {
            "token_id": new.token.pk,
            "kind": "operator",
            "label": "nightly report",
            "owner": "olivia",
            "prefix": new.raw[:12],
        },
    )


def test_a_non_operator_gets_no_operator_token(cast):
    with pytest.raises(NotAnOperator, match="carla is not a console operator"):
        do_create_operator_token(cast.caretaker.user, "sneaky")

    assert not OperatorToken.objects.exists()


def test_revoking_an_operator_token_is_audited_once(cast):
    new = do_create_operator_token(cast.operator.user, "old script")

    do_revoke_operator_token(new.token, acting_user="oscar")
    do_revoke_operator_token(new.token, acting_user="oscar")

    assert new.token.revoked_at is not None
    revoked = AuditEvent.objects.filter(kind=EventKind.TOKEN_REVOKED).get()
    assert (revoked.called_by, revoked.client_label, revoked.arguments) == (
        "oscar",
        "old script",
        {
            "token_id": new.token.pk,
            "kind": "operator",
            "label": "old script",
            "owner": "olivia",
            "prefix": new.raw[:12],
        },
    )


def test_a_client_token_never_authenticates_as_an_operator_token_even_with_its_digest_stored_there(cast):
    # The prefix check comes before the lookup: a client value is not looked up among operator tokens at all.
    client_raw = cast.operator.raw_token
    OperatorToken.objects.create(label="planted", user=cast.operator.user, digest=token_digest(client_raw))

    assert authenticate_operator_token(client_raw, "/api/mcp") is None
    assert AuditEvent.objects.filter(kind=EventKind.AUTH_REFUSED, outcome="bad_operator_token").count() == 1


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_an_operator_token_opens_no_mcp_session(cast):
    new = await database_sync_to_async(do_create_operator_token)(cast.operator.user, "not a client")

    response = await post(new.raw, initialize_message())

    assert response.status == 401


def test_a_client_token_is_refused_on_the_audit_events_even_when_its_owner_is_an_operator(cast):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {cast.operator.raw_token}")

    response = client.get("/api/audit/events")

    assert response.status_code == 403
    assert "Client tokens are for MCP clients" in response.json()["detail"]
    (row,) = AuditEvent.objects.filter(kind=EventKind.AUTH_REFUSED)
    assert (row.outcome, row.called_by) == ("operator API refused a client token", "olivia")
    assert row.arguments == {"path": "/api/audit/events"}


# --- manage.py create_operator_token ---------------------------------------------------------------


def test_the_command_prints_a_working_token_alone_on_its_last_line(cast):
    out, err = io.StringIO(), io.StringIO()

    call_command("create_operator_token", "olivia", "--label", "cron", stdout=out, stderr=err)

    raw = out.getvalue().splitlines()[-1]
    assert raw.startswith("fop_") and raw.strip() == raw
    token = OperatorToken.objects.get(digest=token_digest(raw))
    assert (token.user, token.label) == (cast.operator.user, "cron")
    assert "Shown once" in err.getvalue()
    assert switch_read_with(raw) == 200
    assert AuditEvent.objects.filter(kind=EventKind.TOKEN_CREATED, called_by="manage.py", client_label="cron").exists()


def test_the_command_labels_a_token_after_its_operator_when_no_label_is_given(cast):
    call_command("create_operator_token", "oscar", stdout=io.StringIO(), stderr=io.StringIO())

    assert OperatorToken.objects.get().label == "oscar (operator API)"


@pytest.mark.parametrize(("name", "says"), [("carla", "not a console operator"), ("nobody", "No user 'nobody'")])
def test_the_command_refuses_a_user_who_is_not_an_operator(cast, name, says):
    with pytest.raises(CommandError, match=says):
        call_command("create_operator_token", name, stdout=io.StringIO(), stderr=io.StringIO())

    assert not OperatorToken.objects.exists()


def test_an_operator_token_and_its_users_operator_membership_are_read_in_one_statement(cast):
    new = do_create_operator_token(cast.operator.user, "one read")

    with CaptureQueriesContext(connection) as queries:
        token = authenticate_operator_token(new.raw, "/api/mcp")

    assert token is not None and token.user == cast.operator.user
    assert len(queries.captured_queries) == 1


def test_an_operator_token_of_staff_in_another_group_only_authenticates_nothing(cast):
    new = do_create_operator_token(cast.operator.user, "moved")
    cast.operator.user.groups.set([Group.objects.create(name="auditors")])

    assert authenticate_operator_token(new.raw, "/api/mcp") is None
    assert AuditEvent.objects.filter(kind=EventKind.AUTH_REFUSED, outcome="bad_operator_token").count() == 1
