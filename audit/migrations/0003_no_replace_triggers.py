"""SQLite triggers that refuse an INSERT landing on a row the audit tables already hold.

`INSERT OR REPLACE` (and `REPLACE INTO`) resolves a key conflict by deleting the old row, and SQLite fires
no DELETE trigger for that deletion unless `recursive_triggers` is on: migration 0002's triggers let it
through, so a row could be overwritten. A BEFORE INSERT trigger runs before the conflict is resolved, so
one that refuses an insert whose primary key (or, for events, MAC) is already stored stops it whatever
the conflict clause says. An ordinary append inserts a new key and is untouched.

PostgreSQL has no REPLACE; its `INSERT ... ON CONFLICT DO UPDATE` updates the row, which migration
0002's BEFORE UPDATE trigger already refuses.
"""

from django.db import migrations

# table -> the unique columns an INSERT OR REPLACE could collide on
UNIQUE_COLUMNS = {
    "audit_auditevent": ("seq", "mac"),
    "audit_audittreenode": ("key",),
    "audit_auditcheckpoint": ("size",),
}


def create_triggers(apps, schema_editor, unique_columns: dict[str, tuple[str, ...]] = UNIQUE_COLUMNS) -> None:
    """`unique_columns`: each table's columns as they are at the migration that calls this (0006 drops the MAC's)."""
    if schema_editor.connection.vendor != "sqlite":
        return
    for table, columns in unique_columns.items():
        collides = " OR ".join(f"{column} = NEW.{column}" for column in columns)
        schema_editor.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_replace BEFORE INSERT ON {table} "
            f"WHEN EXISTS (SELECT 1 FROM {table} WHERE {collides}) "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: an INSERT over an existing row refused'); END"
        )


def drop_triggers(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    for table in UNIQUE_COLUMNS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_replace")


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only_triggers")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
