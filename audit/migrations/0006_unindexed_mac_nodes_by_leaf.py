"""Two changes that make an append write fewer pages: the MAC loses its UNIQUE index, and the tree nodes are keyed by
the leaf that completes them.

The MAC's unique index held a random key per row, so each row of a commit landed on an index page of its own (13 of
the 27.7 WAL frames of an eight-row commit on SQLite). Nothing needs it: no code looks an event up by its MAC, the
chain is checked in `seq` order (`audit_verify` finds a row whose MAC is not that of its body and predecessor,
a copied one included), and an INSERT OR REPLACE can no longer collide on a MAC, so SQLite's no-replace trigger
(0003) on the events checks `seq` alone, through the table's own b-tree (one that compared the MAC without an index
would scan the table on every append).

A node's key becomes `((((index + 1) << level) - 1) << 6) | level` (`audit.services.node_key`): an append's leaf and
the nodes it completes are consecutive keys at the end of the table, instead of one insertion point per level
(`level << 48 | index`). Stored nodes are re-keyed in place, every level, index and hash kept. The keys go through
their negatives so that no key collides with another row's old one midway (a unique key is checked row by row).

The append-only triggers refuse UPDATE, and SQLite's table remake drops the event table's triggers: every trigger
is dropped first and created again at the end, inside the migration's transaction. On SQLite the event table is
remade without the UNIQUE (Django's rebuild, every row copied as it is); PostgreSQL drops the constraint. Going back
restores both, and the no-replace trigger on `seq` or the MAC.
"""

import importlib

from django.db import migrations, models

import audit.models

append_only = importlib.import_module("audit.migrations.0002_append_only_triggers")
no_replace = importlib.import_module("audit.migrations.0003_no_replace_triggers")

UNIQUE_COLUMNS = {**no_replace.UNIQUE_COLUMNS, "audit_auditevent": ("seq",)}
NODES = "audit_audittreenode"
# Each node's key from its level and index (columns kept as they are), in SQL both databases take: fully
# parenthesized, as the two give << and | different precedences, and the level as a bigint (PostgreSQL shifts a
# smallint within 16 bits).
LEAF_KEY = '((((("index" + 1) << level) - 1) << 6) | level)'
LEVEL_KEY = '((CAST(level AS bigint) << 48) | "index")'
OLD_HELP, NEW_HELP = "level << 48 | index", "the last leaf it covers << 6 | level (audit.services.node_key)"


def drop_all_triggers(schema_editor) -> None:
    append_only.drop_triggers(None, schema_editor, keep_function=True)
    no_replace.drop_triggers(None, schema_editor)


def rekey_nodes(schema_editor, key: str) -> None:
    schema_editor.execute(f"UPDATE {NODES} SET key = -1 - {key}")
    schema_editor.execute(f"UPDATE {NODES} SET key = -1 - key")


def mac_field(model: type[models.Model], *, unique: bool) -> models.CharField:
    field = models.CharField(max_length=64, unique=unique)
    field.set_attributes_from_name("mac")
    field.model = model
    field.creation_counter = model._meta.get_field("mac").creation_counter  # its place in a remade table
    return field


def alter_mac(apps, schema_editor, *, unique: bool) -> None:
    """`apps` holds the models of before this migration in both directions (a RunPython's reverse gets those too)."""
    model = apps.get_model("audit", "AuditEvent")
    new = mac_field(model, unique=unique)
    schema_editor.alter_field(model, mac_field(model, unique=not unique), new, strict=True)
    if unique and schema_editor.connection.vendor == "postgresql":
        # Django adds a `_like` index with the constraint; migration 0004 had dropped it (the MAC is never LIKEd).
        like = schema_editor._create_index_name(model._meta.db_table, [new.column], suffix="_like")
        schema_editor.execute(schema_editor._delete_index_sql(model, like))


def forwards(apps, schema_editor) -> None:
    drop_all_triggers(schema_editor)
    alter_mac(apps, schema_editor, unique=False)
    rekey_nodes(schema_editor, LEAF_KEY)
    append_only.create_triggers(apps, schema_editor)
    no_replace.create_triggers(apps, schema_editor, UNIQUE_COLUMNS)


def backwards(apps, schema_editor) -> None:
    drop_all_triggers(schema_editor)
    rekey_nodes(schema_editor, LEVEL_KEY)
    alter_mac(apps, schema_editor, unique=True)
    append_only.create_triggers(apps, schema_editor)
    no_replace.create_triggers(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0005_rowid_keys")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="auditevent", name="mac", field=models.CharField(max_length=64)),
                migrations.AlterField(
                    model_name="audittreenode",
                    name="key",
                    field=audit.models.RowidKey(help_text=NEW_HELP, primary_key=True, serialize=False),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
