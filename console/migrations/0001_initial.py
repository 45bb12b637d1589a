"""The operator token, moved here from mcp_api.

Only Django's picture of it moves: the table stays as mcp_api made it (the model names its table), so on a
database migrated before the move nothing is created or copied, and on a fresh one mcp_api's migrations
create the same table first. The model's content type is relabelled in place, so its permissions (and any
object permissions or admin log entries pointing at it) keep working.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


MOVED = ["operatortoken"]


def relabel(apps, schema_editor, old: str = "mcp_api", new: str = "console") -> None:
    """Point the moved model's content type at its new app (a type already there is left alone)."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label=new, model=model).exists():
            content_type.objects.filter(app_label=old, model=model).update(app_label=new)


def unlabel(apps, schema_editor) -> None:
    relabel(apps, schema_editor, old="console", new="mcp_api")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('mcp_api', '0006_access_models_moved'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='OperatorToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('label', models.CharField(help_text='What the token is for, shown in the audit log.', max_length=200)),
                        ('digest', models.CharField(editable=False, max_length=64, unique=True)),
                        ('prefix', models.CharField(editable=False, help_text='The first characters, to recognise it.', max_length=16)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                        ('revoked_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='operator_tokens', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'mcp_api_operatortoken',
                        'ordering': ['-created_at'],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(relabel, unlabel),
    ]
