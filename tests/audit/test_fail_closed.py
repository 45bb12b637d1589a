"""Fail closed: when the audit row cannot be written, the action it would record does not happen.

The failures are made at the outside seams: the mirror's path taken by a directory (root ignores file
modes, so chmod would not stop these tests), and the database refusing the audit INSERT through
Django's own `execute_wrapper` hook.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.db import DatabaseError, connection, transaction
from django.db.transaction import TransactionManagementError

from access.models import ClientToken
from access.services import do_create_token, do_revoke_token
from audit.models import AuditEvent, EventKind
from audit.services import event_line, record
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import append_events, audit_verify, mirror_lines
from tests.mcp_api.helpers import send, stateless_headers, stateless_rpc


@pytest.fixture
def unwritable_mirror(cast, settings, tmp_path) -> Path:
    """After the cast is recorded, the mirror's path is taken by a directory: no line can be written."""
    blocked = tmp_path / "blocked" / "audit.jsonl"
    blocked.mkdir(parents=True)
    settings.FORGE_AUDIT_LOG = blocked
    return blocked


def refuse_audit_inserts(execute, sql, params, many, context):
    if sql.lstrip().upper().startswith("INSERT") and "audit_auditevent" in sql:
        raise DatabaseError("the audit table cannot be written (refused by the test)")
    return execute(sql, params, many, context)


# --- a read over MCP -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_a_tool_call_when_the_mirror_cannot_be_written_answers_audit_unavailable_and_adds_no_row(
    cast, unwritable_mirror
):
    events_before = await database_sync_to_async(AuditEvent.objects.count)()

    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(cast.operator.raw_token, "tools/call", name="server_info"),
        body=stateless_rpc("tools/call", {"name": "server_info", "arguments": {}}),
    )

    assert response.status == 200
    result = response.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "FORGE_ERR_AUDIT_UNAVAILABLE"
    assert "forge-mcp" not in result["content"][0]["text"]
    assert await database_sync_to_async(AuditEvent.objects.count)() == events_before


# --- state changes ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_revoking_a_token_when_the_mirror_cannot_be_written_leaves_it_usable(cast, unwritable_mirror):
    token = cast.caretaker.token
    events_before = AuditEvent.objects.count()

    with pytest.raises(AuditUnavailable, match="audit mirror"):
        do_revoke_token(token, acting_user="olivia")

    token.refresh_from_db()
    assert token.revoked_at is None
    assert AuditEvent.objects.count() == events_before


@pytest.mark.django_db
def test_creating_a_token_when_the_database_refuses_the_audit_row_creates_nothing(cast):
    tokens_before = ClientToken.objects.count()
    events_before = AuditEvent.objects.count()

    with connection.execute_wrapper(refuse_audit_inserts), pytest.raises(AuditUnavailable, match="refused"):
        do_create_token(owner=cast.operator.user, label="never-made", acting_user="olivia")

    assert ClientToken.objects.count() == tokens_before
    assert not ClientToken.objects.filter(label="never-made").exists()
    assert AuditEvent.objects.count() == events_before


@pytest.mark.django_db
def test_revoking_a_token_when_the_database_refuses_the_audit_row_leaves_it_usable(cast, mirror_path):
    token = cast.caretaker.token
    lines_before = mirror_lines(mirror_path)

    with connection.execute_wrapper(refuse_audit_inserts), pytest.raises(AuditUnavailable):
        do_revoke_token(token, acting_user="olivia")

    token.refresh_from_db()
    assert token.revoked_at is None
    assert mirror_lines(mirror_path) == lines_before


@pytest.mark.django_db
def test_a_row_that_cannot_be_appended_dooms_the_transaction_it_was_part_of(cast, unwritable_mirror):
    """No savepoint to fall back to: a caller that swallowed the refusal could not commit its change anyway."""
    token = cast.caretaker.token
    with pytest.raises(TransactionManagementError), transaction.atomic():
        ClientToken.objects.filter(pk=token.pk).update(label="changed without its row")
        with pytest.raises(AuditUnavailable):
            record(EventKind.TOOL_CALL, tool="test.refused")
        ClientToken.objects.filter(pk=token.pk).update(label="and again")

    token.refresh_from_db()
    assert token.label != "changed without its row"


# --- the mirror after a failure --------------------------------------------------------------------


@pytest.mark.django_db
def test_appending_resumes_once_the_mirror_can_be_written_again(cast, unwritable_mirror, settings, mirror_path):
    # Each in a transaction of its own, as callers append: the failed one's transaction is lost with it.
    with pytest.raises(AuditUnavailable), transaction.atomic():
        record(EventKind.TOOL_CALL, tool="test.refused")
    settings.FORGE_AUDIT_LOG = mirror_path

    with transaction.atomic():
        event = record(EventKind.TOOL_CALL, tool="test.accepted")

    assert event.seq == AuditEvent.objects.count()
    assert len(mirror_lines(mirror_path)) == event.seq


@pytest.mark.django_db
def test_a_mirror_that_lacks_committed_lines_is_filled_in_by_the_next_append(mirror_path):
    append_events(3)
    mirror_path.write_text(mirror_lines(mirror_path)[0] + "\n")

    record(EventKind.TOOL_CALL, tool="test.after")

    assert mirror_lines(mirror_path) == [event_line(event) for event in AuditEvent.objects.all()]


@pytest.mark.django_db
def test_lines_left_by_a_rolled_back_transaction_are_moved_aside_by_the_next_append_not_lost(mirror_path):
    append_events(2)
    with pytest.raises(RuntimeError), transaction.atomic():
        record(EventKind.TOOL_CALL, tool="test.rolled_back")
        record(EventKind.TOOL_CALL, tool="test.rolled_back_too")
        left = mirror_lines(mirror_path)[2:]
        raise RuntimeError("the action failed after its audit rows were written")
    assert audit_verify().strip() == (
        "ok 2 events, 0 checkpoints; the mirror holds 2 lines past the database's last event 2 that continue its "
        "chain: appends that rolled back, which the next append moves to audit.jsonl.rolled-back (or events lost "
        "since the last kept checkpoint)"
    )

    record(EventKind.TOOL_CALL, tool="test.after")

    lines = mirror_lines(mirror_path)
    assert lines == [event_line(event) for event in AuditEvent.objects.all()]
    assert "test.rolled_back" not in "".join(lines)
    assert mirror_lines(mirror_path.with_name("audit.jsonl.rolled-back")) == left
