import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0002_outbox"),
    ]

    operations = [
        migrations.CreateModel(
            name="OpenStream",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("session_id", models.CharField(blank=True, max_length=64)),
                ("opened_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("seen_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "token",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="open_streams",
                        to="access.clienttoken",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["token", "seen_at"], name="access_open_token_i_894c60_idx")],
            },
        ),
    ]
