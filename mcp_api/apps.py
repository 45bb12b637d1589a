from django.apps import AppConfig


class McpApiConfig(AppConfig):
    name = "mcp_api"
    verbose_name = "MCP"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mcp_api import resource_updates, tasks

        resource_updates.connect()
        tasks.connect()
