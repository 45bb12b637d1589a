"""Drop the indexes of audit_auditevent's kind, tool, called_by, session and project (see AuditEvent).

Only the indexes go: on SQLite, Django's AlterField would rebuild the table, which would drop its append-only
triggers with it. The index names are read from the database (PostgreSQL also has a `_like` index of each,
and one of `mac`, never searched with LIKE, which goes too; its UNIQUE constraint stays).
"""

from django.db import migrations, models

import audit.models

UNINDEXED = ("kind", "tool", "called_by", "session", "project")


def drop_indexes(apps, schema_editor):
    model = apps.get_model("audit", "AuditEvent")
    for name in (*UNINDEXED, "mac"):
        column = model._meta.get_field(name).column
        for index in schema_editor._constraint_names(model, [column], index=True, unique=False, primary_key=False):
            schema_editor.execute(schema_editor._delete_index_sql(model, index))


def create_indexes(apps, schema_editor):
    model = apps.get_model("audit", "AuditEvent")
    for name in UNINDEXED:
        schema_editor.execute(schema_editor._create_index_sql(model, fields=[model._meta.get_field(name)]))
    like = getattr(schema_editor, "_create_like_index_sql", None)  # PostgreSQL's
    if like is not None:
        schema_editor.execute(like(model, model._meta.get_field("mac")))


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_no_replace_triggers"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="auditevent", name=name, field=field)
                for name, field in (
                    ("called_by", models.CharField(blank=True, max_length=200)),
                    ("kind", models.CharField(choices=audit.models.EventKind.choices, max_length=40)),
                    ("project", models.CharField(blank=True, max_length=100)),
                    ("session", models.CharField(blank=True, max_length=100)),
                    ("tool", models.CharField(blank=True, max_length=100)),
                )
            ],
            database_operations=[migrations.RunPython(drop_indexes, create_indexes)],
        ),
    ]
