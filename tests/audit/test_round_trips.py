"""What a group-committed append costs on PostgreSQL in round trips, counted in libpq's own trace of the protocol
messages the connection sends (each simple Query, and each Sync that ends a pipeline, is one wait for the server):
BEGIN goes in the script that takes the chain lock and reads the head, and the INSERTs and COMMIT in one script
once the mirror is synced, two round trips where Django's atomic() made four (BEGIN, the lock and head, the
INSERTs, COMMIT). And an append that the database refuses in that script leaves nothing committed and the
connection out of the transaction."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection, transaction
from psycopg import _queries as psycopg_queries
from psycopg import pq

from audit import services
from audit.models import AuditEvent, EventKind
from audit.services import record, record_together
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import audit_verify, mirror_lines

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="round trips are PostgreSQL's"),
    pytest.mark.django_db(transaction=True),
]

GROUP_COMMITTED_APPEND_ROUND_TRIPS = 2


def sent_messages(path: Path, action) -> list[str]:
    """The protocol messages this thread's connection sends while `action()` runs, from libpq's trace."""
    pgconn = connection.connection.pgconn
    with path.open("w") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            action()
        finally:
            pgconn.untrace()
    return [match[1] for match in re.finditer(r"^F\t\d+\t(\w+)", path.read_text(), flags=re.MULTILINE)]


def test_a_group_committed_append_is_two_round_trips(tmp_path):
    record(EventKind.TOOL_CALL, tool="test.warm")  # the connection open, the mirror written once

    sent = sent_messages(tmp_path / "trace", lambda: record(EventKind.TOOL_CALL, tool="test.traced"))

    round_trips = sent.count("Query") + sent.count("Sync")
    assert round_trips == GROUP_COMMITTED_APPEND_ROUND_TRIPS, sent
    assert list(AuditEvent.objects.values_list("tool", flat=True).order_by("seq")) == ["test.warm", "test.traced"]
    assert audit_verify().startswith("ok 2 events")


def test_with_parameters_bound_on_the_server_the_append_goes_in_djangos_transaction_as_before(monkeypatch, tmp_path):
    """A prepared statement holds one command: with `server_side_binding` the rows and COMMIT cannot go as one
    script, so the batch is appended in Django's atomic(), four round trips."""
    record(EventKind.TOOL_CALL, tool="test.warm")
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "server_side_binding", True)

    sent = sent_messages(tmp_path / "trace", lambda: record(EventKind.TOOL_CALL, tool="test.traced"))

    assert sent.count("Query") + sent.count("Sync") == 4, sent
    assert audit_verify().startswith("ok 2 events")


@pytest.fixture
def refusing_trigger():
    """A trigger that refuses, inside the database, any event whose tool is `test.refused`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse() RETURNS trigger AS $$ BEGIN IF NEW.tool = 'test.refused' THEN "
            "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            "CREATE TRIGGER test_refuse BEFORE INSERT ON audit_auditevent FOR EACH ROW EXECUTE FUNCTION test_refuse()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_refuse ON audit_auditevent")
        cursor.execute("DROP FUNCTION test_refuse()")


def test_an_append_the_database_refuses_in_its_commit_script_commits_nothing_and_ends_the_transaction(
    refusing_trigger, mirror_path
):
    first = record(EventKind.TOOL_CALL, tool="test.first")
    assert not connection.execute_wrappers and not connection.queries_logged  # the script goes on the driver's cursor

    with pytest.raises(AuditUnavailable, match="refused by the test"):
        record(EventKind.TOOL_CALL, tool="test.refused")

    assert connection.connection.info.transaction_status == pq.TransactionStatus.IDLE
    assert list(AuditEvent.objects.values_list("mac", flat=True)) == [first.mac]
    assert record(EventKind.TOOL_CALL, tool="test.after").seq == 2
    assert [json.loads(line)["tool"] for line in mirror_lines(mirror_path)] == ["test.first", "test.after"]
    assert (mirror_path.parent / (mirror_path.name + ".rolled-back")).read_text().count("test.refused") == 1
    assert audit_verify().startswith("ok 2 events")


@pytest.fixture
def parses(monkeypatch) -> list[bytes]:
    """The statements psycopg parses for their placeholders from now on."""
    parsed: list[bytes] = []
    real = psycopg_queries._split_query

    def split_query(query: bytes, *args, **kwargs):
        parsed.append(query)
        return real(query, *args, **kwargs)

    monkeypatch.setattr(psycopg_queries, "_split_query", split_query)
    return parsed


def test_a_batch_of_eight_rows_is_bound_without_psycopg_parsing_its_script(parses):
    """psycopg keeps its parse of a statement for its placeholders only up to 50 parameters; a batch of eight rows has
    about 160, and was parsed with a regular expression on every batch."""
    record(EventKind.TOOL_CALL, tool="test.warm")
    parses.clear()
    events = [services._event(EventKind.TOOL_CALL, {"tool": "test.batch", "arguments": {"n": n}}) for n in range(8)]

    services._append_alone(lambda: events, connection)

    assert parses == []
    assert list(AuditEvent.objects.values_list("seq", flat=True).order_by("seq")) == list(range(1, 10))
    assert audit_verify().startswith("ok 9 events")


def test_a_script_is_bound_as_psycopgs_client_cursor_binds_it():
    values = [7, "it's 100% \u00e9 %s", b"\x00\xff", datetime(2026, 12, 5, 4, 5, 6, 789, tzinfo=UTC), None, ""]
    sql = "SELECT %s, %s, %s, %s, %s, %s; SELECT %s"

    with connection.cursor() as cursor:
        expected = cursor.mogrify(sql, [*values, 1])

    assert services._bound_on_the_client(connection, sql, [*values, 1]) == expected


def test_eight_rows_appended_in_a_callers_transaction_are_bound_without_psycopg_parsing_them(parses):
    record(EventKind.TOOL_CALL, tool="test.warm")
    parses.clear()

    with transaction.atomic():
        record_together({"kind": EventKind.TOOL_CALL, "tool": "test.together", "arguments": {"n": n}} for n in range(8))

    assert parses == []
    assert AuditEvent.objects.filter(tool="test.together").count() == 8
    assert audit_verify().startswith("ok 9 events")
