"""The audit tables are append-only: the models refuse to update or delete a row, and so does the database
(migration 0002's triggers), on SQLite and on PostgreSQL alike, whatever path the statement takes."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditCheckpoint, AuditEvent, AuditTreeNode
from audit.services import do_make_checkpoint
from tests.audit.helpers import append_events

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


@pytest.mark.parametrize("sql", REFUSED_STATEMENTS.values(), ids=REFUSED_STATEMENTS.keys())
def test_the_database_refuses_raw_sql_that_updates_or_deletes_audit_rows(log, sql):
    before = table_contents()

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)

    assert table_contents() == before


@pytest.mark.skipif(connection.vendor != "postgresql", reason="TRUNCATE is a PostgreSQL statement")
@pytest.mark.parametrize("table", ["audit_auditevent", "audit_audittreenode", "audit_auditcheckpoint"])
def test_postgresql_refuses_to_truncate_an_audit_table(log, table):
    before = table_contents()

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} CASCADE")

    assert table_contents() == before


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
