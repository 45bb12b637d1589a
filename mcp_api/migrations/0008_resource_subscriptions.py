"""A session's subscriptions to resources (`resources/subscribe`): mcp_api keeps its first model again."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0004_client_principal"),
        ("mcp_api", "0007_operator_token_moved"),
        ("projects", "0002_working_draft"),
    ]

    operations = [
        migrations.CreateModel(
            name="ResourceSubscription",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("uri", models.CharField(max_length=500)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="projects.project"
                    ),
                ),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="access.mcpsession"
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("session", "uri"), name="one_subscription_per_uri")],
            },
        ),
    ]
