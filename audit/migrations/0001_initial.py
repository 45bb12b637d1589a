from django.db import migrations, models

import audit.models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                ("seq", models.BigIntegerField(primary_key=True, serialize=False)),
                ("ts", models.DateTimeField(db_index=True)),
                ("kind", models.CharField(choices=audit.models.EventKind.choices, db_index=True, max_length=40)),
                ("tool", models.CharField(blank=True, db_index=True, max_length=100)),
                ("arguments_json", models.TextField(default="{}", help_text="Sanitized arguments as canonical JSON.")),
                ("outcome", models.CharField(blank=True, max_length=200)),
                ("called_by", models.CharField(blank=True, db_index=True, max_length=200)),
                ("session", models.CharField(blank=True, db_index=True, max_length=100)),
                ("client_label", models.CharField(blank=True, max_length=200)),
                ("project", models.CharField(blank=True, db_index=True, max_length=100)),
                ("prev_mac", models.CharField(max_length=64)),
                ("mac", models.CharField(max_length=64, unique=True)),
            ],
            options={"ordering": ["seq"]},
        ),
        migrations.CreateModel(
            name="AuditTreeNode",
            fields=[
                ("key", models.BigIntegerField(help_text="level << 48 | index", primary_key=True, serialize=False)),
                ("level", models.PositiveSmallIntegerField()),
                ("index", models.BigIntegerField()),
                ("hash", models.BinaryField(max_length=32)),
            ],
        ),
        migrations.CreateModel(
            name="AuditCheckpoint",
            fields=[
                ("size", models.BigIntegerField(primary_key=True, serialize=False)),
                ("root", models.BinaryField(max_length=32)),
                ("note", models.TextField()),
                ("created_at", models.DateTimeField()),
            ],
            options={"ordering": ["size"]},
        ),
    ]
