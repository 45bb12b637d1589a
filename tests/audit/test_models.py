"""The audit tables are append-only: the models refuse to update or delete a row, and so does the database
(migration 0002's triggers, and 0003's against an insert over an existing row: its key, since 0006 the key
alone), on SQLite and on PostgreSQL alike, whatever path the statement takes."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditCheckpoint, AuditEvent, AuditTreeNode
from audit.services import do_make_checkpoint
from tests.audit.helpers import append_events, audit_verify_failure

pytestmark = pytest.mark.django_db

# One UPDATE and one DELETE for each audit table, each aimed at a row the `log` fixture wrote.
REFUSED_STATEMENTS = {
    "update an event": "UPDATE audit_auditevent SET outcome = 'denied' WHERE seq = 1",
    "delete an event": "DELETE FROM audit_auditevent WHERE seq = 1",
    "delete every event": "DELETE FROM audit_auditevent",
    "update a tree node": "UPDATE audit_audittreenode SET level = 7 WHERE key = 0",
    "delete a tree node": "DELETE FROM audit_audittreenode WHERE key = 0",
    "update a checkpoint": "UPDATE audit_auditcheckpoint SET note = 'x' WHERE size = 2",
    "delete a checkpoint": "DELETE FROM audit_auditcheckpoint WHERE size = 2",
}


@pytest.fixture
def log() -> None:
    append_events(2)
    do_make_checkpoint()


def table_contents() -> tuple[list, list, list]:
    return (
        list(AuditEvent.objects.values_list()),
        list(AuditTreeNode.objects.values_list("key", "level", "index")),
        list(AuditCheckpoint.objects.values_list("size", "note")),
    )


def assert_refused_and_nothing_changed(sql: str) -> None:
    before = table_contents()

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)

    assert table_contents() == before


@pytest.mark.parametrize("sql", REFUSED_STATEMENTS.values(), ids=REFUSED_STATEMENTS.keys())
def test_the_database_refuses_raw_sql_that_updates_or_deletes_audit_rows(log, sql):
    assert_refused_and_nothing_changed(sql)


EVENT_COLUMNS = "seq, ts, kind, tool, arguments_json, outcome, called_by, session, client_label, project, prev_mac, mac"
DENIED_COLUMNS = EVENT_COLUMNS.replace("outcome", "'denied'")
# An insert that lands on a stored row: REPLACE deletes the old row (bypassing DELETE triggers on SQLite),
# an upsert updates it. Each is aimed at a row the `log` fixture wrote, keeping every column but one.
REPLACING_STATEMENTS = {
    "replace an event by its seq": (
        f"INSERT OR REPLACE INTO audit_auditevent ({EVENT_COLUMNS}) SELECT "
        f"{DENIED_COLUMNS} FROM audit_auditevent WHERE seq = 1"
    ),
    "replace an event by its seq with REPLACE INTO": (
        f"REPLACE INTO audit_auditevent ({EVENT_COLUMNS}) SELECT {DENIED_COLUMNS} FROM audit_auditevent WHERE seq = 2"
    ),
    "replace a tree node": (
        'INSERT OR REPLACE INTO audit_audittreenode (key, level, "index", hash) '
        'SELECT key, level, "index", zeroblob(32) FROM audit_audittreenode WHERE key = 0'
    ),
    "replace a checkpoint": (
        "INSERT OR REPLACE INTO audit_auditcheckpoint (size, root, note, created_at) "
        "SELECT size, root, 'x', created_at FROM audit_auditcheckpoint WHERE size = 2"
    ),
}
UPSERTING_STATEMENTS = {
    "upsert an event": (
        f"INSERT INTO audit_auditevent ({EVENT_COLUMNS}) SELECT {EVENT_COLUMNS} FROM audit_auditevent "
        "WHERE seq = 1 ON CONFLICT (seq) DO UPDATE SET outcome = 'denied'"
    ),
    "upsert a tree node": (
        'INSERT INTO audit_audittreenode (key, level, "index", hash) SELECT key, level, "index", hash '
        "FROM audit_audittreenode WHERE key = 0 ON CONFLICT (key) DO UPDATE SET level = 7"
    ),
    "upsert a checkpoint": (
        "INSERT INTO audit_auditcheckpoint (size, root, note, created_at) SELECT size, root, note, created_at "
        "FROM audit_auditcheckpoint WHERE size = 2 ON CONFLICT (size) DO UPDATE SET note = 'x'"
    ),
}


@pytest.mark.skipif(connection.vendor != "sqlite", reason="INSERT OR REPLACE is a SQLite statement")
@pytest.mark.parametrize(
    "sql",
    [*REPLACING_STATEMENTS.values(), *UPSERTING_STATEMENTS.values()],
    ids=[*REPLACING_STATEMENTS.keys(), *UPSERTING_STATEMENTS.keys()],
)
def test_sqlite_refuses_an_insert_or_replace_or_upsert_over_an_audit_row(log, sql):
    assert_refused_and_nothing_changed(sql)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="INSERT OR REPLACE is a SQLite statement")
def test_a_replace_carrying_a_stored_mac_under_a_new_seq_deletes_nothing_and_verify_finds_the_copy(log):
    """The MAC is not unique (migration 0006), so such a REPLACE collides with no row: it is a plain append of a
    copy, which the chain gives away (the copy's previous MAC is not its predecessor's MAC)."""
    events, *others = table_contents()
    copy = EVENT_COLUMNS.replace("seq,", "3,", 1)

    with connection.cursor() as cursor:
        cursor.execute(
            f"REPLACE INTO audit_auditevent ({EVENT_COLUMNS}) SELECT {copy} FROM audit_auditevent WHERE seq = 1"
        )

    after, *others_after = table_contents()
    assert (after[:2], others_after) == (events, others)
    assert [row[0] for row in after] == [1, 2, 3] and after[2][-1] == events[0][-1]
    assert audit_verify_failure().message.startswith("event 3: its previous MAC does not match")


@pytest.mark.scaleout
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL: set DATABASE_URL")
@pytest.mark.parametrize("sql", UPSERTING_STATEMENTS.values(), ids=UPSERTING_STATEMENTS.keys())
def test_postgresql_refuses_an_upsert_over_an_audit_row(log, sql):
    assert_refused_and_nothing_changed(sql)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="TRUNCATE is a PostgreSQL statement")
@pytest.mark.parametrize("table", ["audit_auditevent", "audit_audittreenode", "audit_auditcheckpoint"])
def test_postgresql_refuses_to_truncate_an_audit_table(log, table):
    assert_refused_and_nothing_changed(f"TRUNCATE {table} CASCADE")


def test_the_database_refuses_a_queryset_update_of_events(log):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(seq=1).update(outcome="denied")

    assert AuditEvent.objects.get(seq=1).outcome == "ok"


def test_the_database_refuses_a_queryset_delete_of_events(log):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.all().delete()

    assert AuditEvent.objects.count() == 2


MODELS = [AuditEvent, AuditTreeNode, AuditCheckpoint]


@pytest.mark.parametrize("model", MODELS)
def test_the_model_refuses_to_save_a_row_again(log, model):
    row = model.objects.first()
    before = table_contents()

    with pytest.raises(ValueError, match="append-only"):
        row.save()

    assert table_contents() == before


@pytest.mark.parametrize("model", MODELS)
def test_the_model_refuses_to_delete_a_row(log, model):
    row = model.objects.first()
    before = table_contents()

    with pytest.raises(ValueError, match="append-only"):
        row.delete()

    assert table_contents() == before
