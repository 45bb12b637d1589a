from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SETTINGS_MODULE = "tests.conformance_fixtures.settings"


def refusal(settings_module: str | None, extra_hosts: list[str]) -> str | None:
    """Why the fixtures may not be served here, or None: only under their own settings module, and only by a
    server that answers on loopback alone (no FORGE_ALLOWED_HOSTS), since they are tools anyone may call."""
    if settings_module != SETTINGS_MODULE:
        return (
            f"the conformance fixtures app is installed under {settings_module!r}; it belongs to the "
            f"conformance tests' settings ({SETTINGS_MODULE}) only: remove it from INSTALLED_APPS"
        )
    if extra_hosts:
        return (
            "the conformance fixtures are served on loopback only, and FORGE_ALLOWED_HOSTS names other hosts: "
            "unset it for a conformance run"
        )
    return None


class ConformanceFixturesConfig(AppConfig):
    name = "tests.conformance_fixtures"
    label = "conformance_fixtures"
    verbose_name = "Conformance fixtures (tests only)"

    def ready(self) -> None:
        why = refusal(settings.SETTINGS_MODULE, settings.FORGE_EXTRA_ALLOWED_HOSTS)
        if why is not None:
            raise ImproperlyConfigured(why)
        from tests.conformance_fixtures import fixtures

        fixtures.register_all()
