"""The Django admin, installed with the console's own site (the dashboard on its index page)."""

from django.contrib.admin.apps import AdminConfig


class ConsoleAdminConfig(AdminConfig):
    default_site = "mcp_api.console.ConsoleSite"
