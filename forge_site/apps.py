"""The composition root's app configurations: the deployment's system checks, the outbox through which a
process outside the server reaches its streams, and the Django admin installed with the console's own site
(the dashboard on its index page)."""

from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class ForgeSiteConfig(AppConfig):
    name = "forge_site"
    label = "forge_site"
    verbose_name = "Forge MCP site"

    def ready(self) -> None:
        from access import outbox
        from forge_core import live
        from forge_site import checks  # noqa: F401 - importing it registers the checks (Django's documented place)

        # A process outside the server reaches its streams through the outbox (forge_core.live says when).
        live.relay_through(outbox.write)


class ConsoleAdminConfig(AdminConfig):
    default_site = "console.site.ConsoleSite"
