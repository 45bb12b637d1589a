"""Database triggers that refuse UPDATE and DELETE on the audit tables, on SQLite and PostgreSQL.

The model already refuses both; the triggers make the database refuse them too, so only someone who
drops the triggers first can change a row behind the model's back (and `audit_verify` then finds it).
"""

from django.db import migrations

TABLES = ("audit_auditevent", "audit_audittreenode", "audit_auditcheckpoint")


def create_triggers(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    drop_triggers(apps, schema_editor, keep_function=True)
    for table in TABLES:
        if vendor == "sqlite":
            for action in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {action} refused'); END"
                )
        elif vendor == "postgresql":
            schema_editor.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION forge_audit_refuse_change()"
            )
            schema_editor.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION forge_audit_refuse_change()"
            )
        else:
            raise RuntimeError(f"Forge MCP runs on SQLite or PostgreSQL; {vendor} has no append-only triggers here")


def create_function(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE OR REPLACE FUNCTION forge_audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP; END $$",
            params=None,  # the body's % are PL/pgSQL's, not query placeholders
        )


def drop_triggers(apps, schema_editor, keep_function: bool = False) -> None:
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "sqlite":
            for action in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{action}")
        elif vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    if vendor == "postgresql" and not keep_function:
        schema_editor.execute("DROP FUNCTION IF EXISTS forge_audit_refuse_change()")


def create(apps, schema_editor) -> None:
    create_function(apps, schema_editor)
    create_triggers(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(create, drop_triggers)]
