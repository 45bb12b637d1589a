"""The deployment's settings plus the conformance fixtures app: for the live server the conformance tests run
(`DJANGO_SETTINGS_MODULE=tests.conformance_fixtures.settings`), and nothing else. The app refuses to start under
any other settings module, or on a server that answers beyond loopback (`apps.ConformanceFixturesConfig`)."""

from forge_site.settings import *  # noqa: F403  (everything a deployment has, then the fixtures)
from forge_site.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.conformance_fixtures.apps.ConformanceFixturesConfig"]
