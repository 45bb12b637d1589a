from django.apps import AppConfig


class ConfirmationsConfig(AppConfig):
    name = "confirmations"
    default_auto_field = "django.db.models.BigAutoField"
