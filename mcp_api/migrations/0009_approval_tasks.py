"""Tasks (the Tasks extension): a governed call answered with a task that stands for its pending confirmation."""

import django.db.models.deletion
import django.utils.timezone
import uuid
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0005_runtime_tokens"),
        ("confirmations", "0002_sealed_decisions"),
        ("mcp_api", "0008_resource_subscriptions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApprovalTask",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("session_id", models.CharField(blank=True, max_length=64)),
                (
                    "revision",
                    models.CharField(
                        help_text="The protocol revision the task was made at: its wire shape.", max_length=20
                    ),
                ),
                ("ttl_ms", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "confirmation",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="confirmations.pendingconfirmation",
                    ),
                ),
                (
                    "principal",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "token",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="access.clienttoken"
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["principal", "-created_at"], name="task_by_principal")],
            },
        ),
    ]
