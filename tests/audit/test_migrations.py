"""Migration 0005 makes each audit table's key SQLite's rowid (`INTEGER PRIMARY KEY`); 0006 drops the MAC's UNIQUE
index and re-keys the tree nodes by the leaf that completes them. A log upgraded with rows in it keeps every row as it
was (0006: every node's level, index and hash, under its new key), its chain, its indexes and its append-only
triggers, ends with the schema a fresh install gets, and can go back; on PostgreSQL 0005 changes nothing in the
database.

Migrating the test database needs transactional tests; each test leaves it migrated to the end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from audit.services import do_make_checkpoint, node_key
from tests.audit.helpers import append_events, audit_verify
from tests.audit.test_models import (
    EVENT_COLUMNS,
    REFUSED_STATEMENTS,
    REPLACING_STATEMENTS,
    UPSERTING_STATEMENTS,
    assert_refused_and_nothing_changed,
)

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_ROWID_KEYS = "0004_fewer_event_indexes"
ROWID_KEYS = "0005_rowid_keys"
LATEST = "0006_unindexed_mac_nodes_by_leaf"
KEYS = {"audit_auditevent": "seq", "audit_audittreenode": "key", "audit_auditcheckpoint": "size"}
on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="the keys change on SQLite only")
# Before 0006, an INSERT OR REPLACE that carries a stored MAC under a new seq collides on the MAC's unique index.
REPLACE_BY_MAC = (
    f"REPLACE INTO audit_auditevent ({EVENT_COLUMNS}) SELECT "
    f"{EVENT_COLUMNS.replace('seq,', '99,', 1)} FROM audit_auditevent WHERE seq = 1"
)


def migrate_audit_to(migration: str) -> None:
    call_command("migrate", "audit", migration, verbosity=0)


@pytest.fixture
def migrations_undone_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        migrate_audit_to(LATEST)


def sqlite_schema() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE tbl_name LIKE 'audit\\_%' ESCAPE '\\' "
            "ORDER BY type, name"
        )
        return cursor.fetchall()


def stored_rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the audit tables as the database returns it, each column with its storage class on SQLite."""
    rows = {}
    with connection.cursor() as cursor:
        for table, key in KEYS.items():
            columns = [column.name for column in connection.introspection.get_table_description(cursor, table)]
            if connection.vendor == "sqlite":
                typed = ", ".join(f'"{column}", typeof("{column}")' for column in sorted(columns))
            else:
                typed = ", ".join(f'"{column}"' for column in sorted(columns))
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
def test_the_event_table_keeps_only_its_ts_index():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA index_list(audit_auditevent)")
        indexes = {name: (unique, origin) for _, name, unique, origin, _ in cursor.fetchall()}
        columns = {}
        for name in indexes:
            cursor.execute(f'PRAGMA index_info("{name}")')
            columns[name] = [column for _, _, column in cursor.fetchall()]

    assert sorted((columns[name], unique, origin) for name, (unique, origin) in indexes.items()) == [(["ts"], 0, "c")]


@on_sqlite
def test_the_event_tables_no_replace_trigger_looks_at_seq_alone():
    triggers = {name: sql for kind, name, _, sql in sqlite_schema() if kind == "trigger"}

    assert "WHERE seq = NEW.seq)" in triggers["audit_auditevent_no_replace"]
    assert "mac" not in triggers["audit_auditevent_no_replace"]


@on_sqlite
def test_an_upgraded_log_keeps_every_row_and_ends_with_the_schema_of_a_fresh_install(migrations_undone_afterwards):
    fresh = sqlite_schema()
    migrate_audit_to(BEFORE_ROWID_KEYS)
    a_log_with_a_checkpoint()
    before = stored_rows()

    migrate_audit_to(ROWID_KEYS)

    assert stored_rows() == before
    migrate_audit_to(LATEST)
    assert sqlite_schema() == fresh
    assert audit_verify().strip() == "ok 7 events, 1 checkpoints"


def rekeyed(rows: dict[str, list[tuple[Any, ...]]], key: Any) -> dict[str, list[tuple[Any, ...]]]:
    """`rows` (from `stored_rows`) with each tree node's key computed by `key(level, index)`, in key order."""
    step = 2 if connection.vendor == "sqlite" else 1  # the columns in name order: hash, index, key, level
    nodes = []
    for row in rows["audit_audittreenode"]:
        values = list(row)
        values[2 * step] = key(row[3 * step], row[step])
        nodes.append(tuple(values))
    return {**rows, "audit_audittreenode": sorted(nodes, key=lambda row: row[2 * step])}


def level_key(level: int, index: int) -> int:
    return level << 48 | index


def test_the_upgrade_to_leaf_keys_keeps_every_row_and_node_and_ends_as_a_fresh_install(migrations_undone_afterwards):
    fresh = sqlite_schema() if connection.vendor == "sqlite" else postgresql_schema()
    migrate_audit_to(ROWID_KEYS)
    a_log_with_a_checkpoint()
    before = stored_rows()

    migrate_audit_to(LATEST)

    assert stored_rows() == rekeyed(before, node_key)
    assert (sqlite_schema() if connection.vendor == "sqlite" else postgresql_schema()) == fresh
    append_events(3)  # appends after the upgrade extend the re-keyed tree
    assert audit_verify().strip() == "ok 10 events, 1 checkpoints"
    for sql in [*REFUSED_STATEMENTS.values(), *UPSERTING_STATEMENTS.values()]:
        assert_refused_and_nothing_changed(sql)


def test_going_back_from_leaf_keys_gives_the_level_keys_and_the_unique_mac_again(migrations_undone_afterwards):
    a_log_with_a_checkpoint()
    rows = stored_rows()

    migrate_audit_to(ROWID_KEYS)

    assert stored_rows() == rekeyed(rows, level_key)
    refused = [*REFUSED_STATEMENTS.values()]
    if connection.vendor == "sqlite":
        refused += [*REPLACING_STATEMENTS.values(), REPLACE_BY_MAC]
        triggers = {name: sql for kind, name, _, sql in sqlite_schema() if kind == "trigger"}
        assert "seq = NEW.seq OR mac = NEW.mac" in triggers["audit_auditevent_no_replace"]
    for sql in refused:
        assert_refused_and_nothing_changed(sql)
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "audit_auditevent")
    # the unique index alone, no other index of the MAC (PostgreSQL's `_like`, which 0004 dropped)
    assert [about["unique"] for about in constraints.values() if about["columns"] == ["mac"]] == [True]
    migrate_audit_to(LATEST)
    assert stored_rows() == rows
    assert audit_verify().strip() == "ok 7 events, 1 checkpoints"


@on_sqlite
def test_an_upgraded_log_still_refuses_update_delete_and_insert_over_a_row(migrations_undone_afterwards):
    migrate_audit_to(BEFORE_ROWID_KEYS)
    a_log_with_a_checkpoint()
    migrate_audit_to(LATEST)

    for sql in [*REFUSED_STATEMENTS.values(), *REPLACING_STATEMENTS.values(), *UPSERTING_STATEMENTS.values()]:
        assert_refused_and_nothing_changed(sql)


@on_sqlite
def test_going_back_gives_the_bigint_keys_their_indexes_and_the_triggers_again_with_every_row(
    migrations_undone_afterwards,
):
    migrate_audit_to(ROWID_KEYS)
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
    migrate_audit_to(LATEST)
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
def test_on_postgresql_0005_changes_nothing_in_the_database_either_way(migrations_undone_afterwards):
    migrate_audit_to(ROWID_KEYS)
    a_log_with_a_checkpoint()
    schema = postgresql_schema()

    migrate_audit_to(BEFORE_ROWID_KEYS)
    assert postgresql_schema() == schema

    migrate_audit_to(ROWID_KEYS)
    assert postgresql_schema() == schema
    migrate_audit_to(LATEST)
    assert audit_verify().strip() == "ok 7 events, 1 checkpoints"
