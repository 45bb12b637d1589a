"""The client tokens, MCP sessions, the MCP switch and access requests, moved here from mcp_api.

Only Django's picture of them moves: the tables stay as mcp_api made them (each model names its table),
so on a database migrated before the move nothing is created or copied, and on a fresh one mcp_api's
migrations create the same tables first. The models' content types are relabelled in place, so their
permissions (and any object permissions or admin log entries pointing at them) keep working.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


MOVED = ["clienttoken", "mcpsession", "serverstate", "accessrequest"]


def relabel(apps, schema_editor, old: str = "mcp_api", new: str = "access") -> None:
    """Point the moved models' content types at their new app (a type already there is left alone)."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label=new, model=model).exists():
            content_type.objects.filter(app_label=old, model=model).update(app_label=new)


def unlabel(apps, schema_editor) -> None:
    relabel(apps, schema_editor, old="access", new="mcp_api")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('mcp_api', '0005_session_last_seen'),
        ('projects', '0002_working_draft'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ServerState',
                    fields=[
                        ('id', models.PositiveSmallIntegerField(default=1, editable=False, primary_key=True, serialize=False)),
                        ('mcp_enabled', models.BooleanField(default=False, help_text='Off on a fresh install: nothing reaches a client.')),
                        ('changed_by', models.CharField(blank=True, editable=False, max_length=150)),
                        ('changed_at', models.DateTimeField(blank=True, editable=False, null=True)),
                    ],
                    options={
                        'verbose_name': 'server state',
                        'db_table': 'mcp_api_serverstate',
                    },
                ),
                migrations.CreateModel(
                    name='ClientToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('label', models.CharField(help_text="The client's attribution, shown in the audit log.", max_length=200)),
                        ('digest', models.CharField(editable=False, max_length=64, unique=True)),
                        ('prefix', models.CharField(editable=False, help_text='The first characters, to recognise it.', max_length=16)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('revoked_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('last_used_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('owner', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='client_tokens', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'mcp_api_clienttoken',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='McpSession',
                    fields=[
                        ('id', models.CharField(editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('transport', models.CharField(choices=[('streamable-http', 'Streamable Http'), ('sse', 'Sse'), ('handle', 'stateless handle')], max_length=20)),
                        ('protocol_version', models.CharField(blank=True, max_length=20)),
                        ('client_info', models.JSONField(blank=True, default=dict)),
                        ('initialized', models.BooleanField(default=False)),
                        ('context_generation', models.PositiveIntegerField(default=0)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                        ('last_seen_at', models.DateTimeField(blank=True, editable=False, help_text='To the minute.', null=True)),
                        ('ended_at', models.DateTimeField(blank=True, null=True)),
                        ('token', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='sessions', to='access.clienttoken')),
                    ],
                    options={
                        'db_table': 'mcp_api_mcpsession',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='AccessRequest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('state', models.CharField(choices=[('pending', 'Pending'), ('allowed', 'Allowed'), ('denied', 'Denied'), ('revoked', 'Revoked'), ('ended', 'Ended')], db_index=True, default='pending', max_length=10)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                        ('decided_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('decided_by', models.CharField(blank=True, editable=False, max_length=150)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='access_requests', to='projects.project')),
                        ('token', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='access_requests', to='access.clienttoken')),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='access_requests', to='access.mcpsession')),
                    ],
                    options={
                        'db_table': 'mcp_api_accessrequest',
                        'ordering': ['-created_at'],
                        'constraints': [models.UniqueConstraint(fields=('token', 'session', 'project'), name='access_request_per_session_project')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(relabel, unlabel),
    ]
