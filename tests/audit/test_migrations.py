"""Migration 0005 makes each audit table's key SQLite's rowid (`INTEGER PRIMARY KEY`): a log upgraded with
rows in it keeps every row as it was, its chain, its indexes and its append-only triggers, ends with the
schema a fresh install gets, and can go back; on PostgreSQL the migration changes nothing in the database.

Migrating the test database needs transactional tests; each test leaves it migrated to the end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from audit.services import do_make_checkpoint
from tests.audit.helpers import append_events, audit_verify
from tests.audit.test_models import (
    REFUSED_STATEMENTS,
    REPLACING_STATEMENTS,
    UPSERTING_STATEMENTS,
    assert_refused_and_nothing_changed,
)

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_ROWID_KEYS = "0004_fewer_event_indexes"
ROWID_KEYS = "0005_rowid_keys"
KEYS = {"audit_auditevent": "seq", "audit_audittreenode": "key", "audit_auditcheckpoint": "size"}
on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="the keys change on SQLite only")


def migrate_audit_to(migration: str) -> None:
    call_command("migrate", "audit", migration, verbosity=0)


@pytest.fixture
def migrations_undone_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        migrate_audit_to(ROWID_KEYS)


def sqlite_schema() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE tbl_name LIKE 'audit\\_%' ESCAPE '\\' "
            "ORDER BY type, name"
        )
        return cursor.fetchall()


def stored_rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the audit tables as the database returns it, each column with its storage class."""
    rows = {}
    with connection.cursor() as cursor:
        for table, key in KEYS.items():
            columns = [column.name for column in connection.introspection.get_table_description(cursor, table)]
            typed = ", ".join(f'"{column}", typeof("{column}")' for column in sorted(columns))
            cursor.execute(f'SELECT {typed} FROM {table} ORDER BY "{key}"')
            rows[table] = cursor.fetchall()
    return rows


def a_log_with_a_checkpoint() -> None:
    """Events and tree nodes past a checkpoint at size 2, the row `REFUSED_STATEMENTS` aim at."""
    append_events(2)
    do_make_checkpoint()
    append_events(5)


@on_sqlite
def test_each_audit_table_has_its_key_as_its_rowid_and_no_index_of_it():
    schema = {name: sql for kind, name, _, sql in sqlite_schema() if kind == "table"}

    for table, key in KEYS.items():
        assert f'"{key}" integer NOT NULL PRIMARY KEY' in schema[table]
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA index_list({table})")
            origins = {origin for _, _, _, origin, _ in cursor.fetchall()}
        assert "pk" not in origins, table


@on_sqlite
def test_the_event_table_keeps_only_its_ts_index_and_the_unique_mac():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA index_list(audit_auditevent)")
        indexes = {name: (unique, origin) for _, name, unique, origin, _ in cursor.fetchall()}
        columns = {}
        for name in indexes:
            cursor.execute(f'PRAGMA index_info("{name}")')
            columns[name] = [column for _, _, column in cursor.fetchall()]

    assert sorted((columns[name], unique, origin) for name, (unique, origin) in indexes.items()) == [
        (["mac"], 1, "u"),
        (["ts"], 0, "c"),
    ]


@on_sqlite
def test_an_upgraded_log_keeps_every_row_and_ends_with_the_schema_of_a_fresh_install(migrations_undone_afterwards):
    fresh = sqlite_schema()
    migrate_audit_to(BEFORE_ROWID_KEYS)
    a_log_with_a_checkpoint()
    before = stored_rows()

    migrate_audit_to(ROWID_KEYS)

    assert stored_rows() == before
    assert sqlite_schema() == fresh
    assert audit_verify().strip() == "ok 7 events, 1 checkpoints"


@on_sqlite
def test_an_upgraded_log_still_refuses_update_delete_and_insert_over_a_row(migrations_undone_afterwards):
    migrate_audit_to(BEFORE_ROWID_KEYS)
    a_log_with_a_checkpoint()
    migrate_audit_to(ROWID_KEYS)

    for sql in [*REFUSED_STATEMENTS.values(), *REPLACING_STATEMENTS.values(), *UPSERTING_STATEMENTS.values()]:
        assert_refused_and_nothing_changed(sql)


@on_sqlite
def test_going_back_gives_the_bigint_keys_their_indexes_and_the_triggers_again_with_every_row(
    migrations_undone_afterwards,
):
    a_log_with_a_checkpoint()
    triggers = [row for row in sqlite_schema() if row[0] == "trigger"]
    rows = stored_rows()

    migrate_audit_to(BEFORE_ROWID_KEYS)

    schema = sqlite_schema()
    tables = {name: sql for kind, name, _, sql in schema if kind == "table"}
    for table, key in KEYS.items():
        assert f'"{key}" bigint NOT NULL PRIMARY KEY' in tables[table]
    assert [row for row in schema if row[0] == "trigger"] == triggers
    assert stored_rows() == rows
    for sql in REFUSED_STATEMENTS.values():
        assert_refused_and_nothing_changed(sql)
    migrate_audit_to(ROWID_KEYS)
    assert audit_verify().strip() == "ok 7 events, 1 checkpoints"


def postgresql_schema() -> list[tuple[Any, ...]]:
    """The audit tables' columns, indexes, constraints and triggers, as PostgreSQL's catalog describes them."""
    tables = list(KEYS)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_name = ANY(%s) ORDER BY table_name, ordinal_position",
            [tables],
        )
        columns = cursor.fetchall()
        cursor.execute("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s)", [tables])
        indexes = sorted(cursor.fetchall())
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid::regclass::text = ANY(%s)",
            [tables],
        )
        constraints = sorted(cursor.fetchall())
        cursor.execute(
            "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgrelid::regclass::text = ANY(%s) AND NOT tgisinternal",
            [tables],
        )
        triggers = sorted(cursor.fetchall())
    return [*columns, *indexes, *constraints, *triggers]


@pytest.mark.scaleout
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL: set DATABASE_URL")
def test_on_postgresql_the_migration_changes_nothing_in_the_database_either_way(migrations_undone_afterwards):
    a_log_with_a_checkpoint()
    schema = postgresql_schema()

    migrate_audit_to(BEFORE_ROWID_KEYS)
    assert postgresql_schema() == schema

    migrate_audit_to(ROWID_KEYS)
    assert postgresql_schema() == schema
    assert audit_verify().strip() == "ok 7 events, 1 checkpoints"
