"""The caretaker's `manage.py` commands, and who they act as."""

from __future__ import annotations

import getpass
import os


def shell_actor() -> str:
    """The audit log's name for someone at this server's shell: `manage.py:<os user>`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container): the uid says who
        user = f"uid {os.getuid()}"
    return f"manage.py:{user}"
