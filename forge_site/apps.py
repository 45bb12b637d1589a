"""The composition root's app configurations: the deployment's system checks, and the Django admin
installed with the console's own site (the dashboard on its index page)."""

from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class ForgeSiteConfig(AppConfig):
    name = "forge_site"
    label = "forge_site"
    verbose_name = "Forge MCP site"

    def ready(self) -> None:
        # Importing the module registers its checks (Django's documented place for it).
        from forge_site import checks  # noqa: F401


class ConsoleAdminConfig(AdminConfig):
    default_site = "console.site.ConsoleSite"
