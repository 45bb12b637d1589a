from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    # The console's heading for tokens, sessions, the switch and access requests, as before they moved here.
    verbose_name = "MCP"
    default_auto_field = "django.db.models.BigAutoField"
