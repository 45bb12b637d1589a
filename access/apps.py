from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    # The console's heading for tokens, sessions, the switch and access requests, as before they moved here.
    verbose_name = "MCP"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from access.rest import record_operator_api_refusal
        from forge_core.rest import operator_api_refused

        operator_api_refused.connect(record_operator_api_refusal, dispatch_uid="access.operator_api_refused")
