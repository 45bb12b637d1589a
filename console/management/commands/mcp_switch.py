"""`python manage.py mcp_switch on|off`: the master switch (also on the console dashboard)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from access.hotpath import mcp_enabled
from access.services import do_switch_mcp


class Command(BaseCommand):
    help = "Switch MCP on or off for every client (off: only server_info and session.status answer)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("position", choices=["on", "off", "status"])

    def handle(self, *args, position: str, **options) -> None:
        if position != "status":
            changed = do_switch_mcp(position == "on", acting_user="manage.py")
            if not changed:
                self.stdout.write(f"MCP was already {position}.")
        self.stdout.write(f"MCP is {'on' if mcp_enabled() else 'off'}.")
