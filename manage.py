#!/usr/bin/env python
"""Django's command-line utility for Forge MCP."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")
    from django.core.management import execute_from_command_line

    from forge_core.live import mark_outside_server

    # A command holds no streams (runmcp, which does, takes the mark off): on the embedded in-memory channel
    # layer, what it tells open streams goes through the outbox the server follows.
    mark_outside_server()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
