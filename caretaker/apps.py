from django.apps import AppConfig


class CaretakerConfig(AppConfig):
    name = "caretaker"
    default_auto_field = "django.db.models.BigAutoField"
