"""Client tokens, MCP sessions, the MCP switch and access requests now belong to the access app.

Only Django's picture of them leaves mcp_api: their tables stay (access/migrations/0001_initial.py says
why), so this removes the models from mcp_api's state and touches no table.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("mcp_api", "0005_session_last_seen"),
        ("access", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="AccessRequest"),
                migrations.DeleteModel(name="McpSession"),
                migrations.DeleteModel(name="ClientToken"),
                migrations.DeleteModel(name="ServerState"),
            ],
            database_operations=[],
        ),
    ]
