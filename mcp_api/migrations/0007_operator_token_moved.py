"""Operator tokens now belong to the console app.

Only Django's picture of the model leaves mcp_api: its table stays (console/migrations/0001_initial.py says
why), so this removes the model from mcp_api's state and touches no table. mcp_api keeps no models.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("mcp_api", "0006_access_models_moved"),
        ("console", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="OperatorToken")],
            database_operations=[],
        ),
    ]
