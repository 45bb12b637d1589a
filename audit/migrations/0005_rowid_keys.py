"""On SQLite, make each audit table's key its rowid: `INTEGER PRIMARY KEY` instead of `bigint PRIMARY KEY`.

A `bigint` key is an ordinary column beside SQLite's hidden rowid, found through an index of its own
(`sqlite_autoindex_..._1`), so every append inserted into two b-trees of each table and wrote their pages.
Only a column declared `INTEGER PRIMARY KEY` is the rowid itself; the values stay the same 64-bit integers.

SQLite cannot change a column's type in place: each table is remade (Django's own rebuild: a new table, every
row copied as it is, the old one dropped, the new one renamed, its indexes created again). Dropping the old
table drops its triggers, so the append-only triggers of migrations 0002 and 0003 are created again by those
migrations' own functions. PostgreSQL keeps `bigint`, which is what it already had: there only the migration
state changes.
"""

import importlib

from django.db import migrations

import audit.models

append_only = importlib.import_module("audit.migrations.0002_append_only_triggers")
no_replace = importlib.import_module("audit.migrations.0003_no_replace_triggers")

# model -> its key, and that key's help text
KEYS = {
    "auditevent": ("seq", ""),
    "audittreenode": ("key", "level << 48 | index"),
    "auditcheckpoint": ("size", ""),
}


def rowid_key(help_text: str) -> audit.models.RowidKey:
    return audit.models.RowidKey(primary_key=True, serialize=False, help_text=help_text)


def remake_tables(apps, schema_editor, *, to_rowid: bool) -> None:
    """Remake the three tables with their keys as rowids (`to_rowid`) or as `bigint` columns again, then put
    their append-only triggers back. `apps` holds the models of before this migration in both directions."""
    if schema_editor.connection.vendor != "sqlite":
        return
    for model_name, (name, help_text) in KEYS.items():
        model = apps.get_model("audit", model_name)
        column = model._meta.get_field(name)
        rowid = rowid_key(help_text)
        rowid.set_attributes_from_name(name)
        rowid.model = model
        # Django orders a table's columns by their fields' creation: the key keeps its place (first), so going
        # back gives the very table of before.
        rowid.creation_counter = column.creation_counter
        old, new = (column, rowid) if to_rowid else (rowid, column)
        schema_editor.alter_field(model, old, new, strict=True)
    append_only.create_triggers(apps, schema_editor)
    no_replace.create_triggers(apps, schema_editor)


def to_rowid_keys(apps, schema_editor) -> None:
    remake_tables(apps, schema_editor, to_rowid=True)


def to_bigint_keys(apps, schema_editor) -> None:
    remake_tables(apps, schema_editor, to_rowid=False)


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_fewer_event_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name=model_name, name=name, field=rowid_key(help_text))
                for model_name, (name, help_text) in KEYS.items()
            ],
            database_operations=[migrations.RunPython(to_rowid_keys, to_bigint_keys)],
        ),
    ]
