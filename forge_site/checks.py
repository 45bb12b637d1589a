"""Django system checks for the mistakes a deployment of Forge MCP can make.

They run with `python manage.py check` (and so before `runmcp` serves); `check --deploy` adds the ones
that only matter in production. Each names the setting at fault and the fix. They read settings and the
file system only: a check must work before the database exists.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name, IPv6 possibly in brackets) only reaches this machine."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@register(Tags.compatibility)
def check_scale_out_has_a_channel_layer(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """PostgreSQL is the scale-out path; without Redis each process would keep its own channel layer."""
    engine = settings.DATABASES["default"]["ENGINE"]
    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    if "postgresql" in engine and backend.endswith("InMemoryChannelLayer"):
        return [
            Warning(
                "DATABASE_URL names PostgreSQL but REDIS_URL is not set: each server process keeps its own "
                "in-memory channel layer, so a message posted to one process never reaches a stream held by "
                "another, and waiting clients and console pages miss it.",
                hint="Set REDIS_URL (e.g. redis://127.0.0.1:6379/0) for every process of the deployment, "
                "or run a single process.",
                id="forge.W001",
            )
        ]
    return []


@register(Tags.database)
def check_worker_threads_fit_the_pool(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """On PostgreSQL each MCP and view worker thread keeps a pooled connection between hops (forge_core.workers)
    only while together they leave the pool a connection for every other thread."""
    database = settings.DATABASES["default"]
    pool = database.get("OPTIONS", {}).get("pool")
    if "postgresql" not in database["ENGINE"] or not isinstance(pool, dict) or "max_size" not in pool:
        return []
    threads = settings.FORGE_WORKERS + settings.FORGE_VIEW_WORKERS
    if threads < pool["max_size"]:
        return []
    return [
        Warning(
            f"FORGE_WORKERS plus FORGE_VIEW_WORKERS ({threads}) is not below FORGE_DB_POOL_MAX ({pool['max_size']}): "
            "the worker threads take a connection from the pool for every request instead of keeping one, and "
            "requests may wait for a connection.",
            hint=f"Set FORGE_DB_POOL_MAX to at least {threads + 1}, more for a process's other threads (the defaults "
            "leave them 8), or lower FORGE_WORKERS or FORGE_VIEW_WORKERS.",
            id="forge.W009",
        )
    ]


def loose_modes(folder: Path) -> list[str]:
    """The folder itself and the files in it that users other than the owner may read or enter."""
    loose = []
    for path in (folder, *sorted(folder.iterdir())):
        mode = path.lstat().st_mode
        if stat.S_IMODE(mode) & 0o077:
            loose.append(f"{path} ({stat.filemode(mode)})")
    return loose


@register(Tags.security)
def check_secrets_folder_is_private(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """The secrets folder holds the keys of the audit log, the contracts and the console's sessions."""
    folder = Path(settings.FORGE_SECRETS_DIR)
    if not folder.is_dir():
        return []  # made with mode 0700 on first use
    loose = loose_modes(folder)
    foreign = folder.stat().st_uid != os.geteuid()
    problems: list[CheckMessage] = []
    if loose:
        problems.append(
            Error(
                f"The secrets folder (FORGE_SECRETS_DIR) is readable by other users: {', '.join(loose)}. Anyone "
                "who can read it can forge audit rows, decrypt contract snapshots and sign console sessions.",
                hint=f"chmod 700 {folder} && chmod 600 {folder}/*",
                id="forge.E002",
            )
        )
    if foreign:
        problems.append(
            Error(
                f"The secrets folder {folder} belongs to another user (uid {folder.stat().st_uid}) than the one "
                f"running the server (uid {os.geteuid()}): that user can replace the keys.",
                hint=f"Run the server as the folder's owner, or chown -R it to the server's user ({folder}).",
                id="forge.E003",
            )
        )
    return problems


@register(Tags.security)
def check_ca_key_is_private(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """The team CA's key signs every certificate and roster the team trusts."""
    folder = Path(settings.FORGE_CA_DIR)
    key = folder / "ca.key"
    if not key.exists():
        return []
    loose = [
        f"{path} ({stat.filemode(path.lstat().st_mode)})" for path in (folder, key) if path.lstat().st_mode & 0o077
    ]
    if not loose:
        return []
    return [
        Error(
            f"The team CA's key is readable by other users: {', '.join(loose)}. Anyone who can read it can issue "
            "certificates and sign rosters the team trusts.",
            hint=f"chmod 700 {folder} && chmod 600 {key}",
            id="forge.E008",
        )
    ]


def sqlite_files() -> list[Path]:
    """The embedded database's files that exist: the database itself and its -wal and -shm companions."""
    database = settings.DATABASES["default"]
    name = str(database.get("NAME") or "")
    if "sqlite" not in database["ENGINE"] or not name or name == ":memory:" or name.startswith("file:"):
        return []
    base = Path(name)
    return [path for path in (base, Path(f"{base}-wal"), Path(f"{base}-shm")) if path.is_file()]


@register(Tags.security)
def check_data_folder_is_private(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """The data folder holds the database (console sessions, password hashes, drafts), projects and the audit mirror.

    The service makes it 0700 and its files 0600; a folder made by an older version, or loosened by hand, is
    named with the chmod that closes it.
    """
    folder = Path(settings.FORGE_DATA_DIR)
    paths = [folder] if folder.is_dir() else []
    loose = [path for path in (*paths, *sqlite_files()) if stat.S_IMODE(path.stat().st_mode) & 0o077]
    if not loose:
        return []
    described = ", ".join(f"{path} ({stat.filemode(path.stat().st_mode)})" for path in loose)
    fixes = [f"chmod 700 {folder}"] if folder in loose else []
    files = [str(path) for path in loose if path != folder]
    if files:
        fixes.append(f"chmod 600 {' '.join(files)}")
    return [
        Warning(
            f"The data folder (FORGE_DATA_DIR) or its database is readable by other users: {described}. "
            "It holds the console's sessions, the operators' password hashes, drafts and project files.",
            hint=" && ".join(fixes) + " (the server makes new files and folders private itself).",
            id="forge.W007",
        )
    ]


def exposed_debug_hosts(bind_host: str) -> list[str]:
    """The non-loopback addresses that would show Django's debug pages: the bind address and extra host names."""
    if not settings.DEBUG:
        return []
    hosts = [bind_host, *settings.FORGE_EXTRA_ALLOWED_HOSTS]
    return [host for host in hosts if not is_loopback(host)]


@register(Tags.security)
def check_debug_stays_on_loopback(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    exposed = exposed_debug_hosts(settings.FORGE_HOST)
    if exposed:
        return [
            Error(
                f"FORGE_DEBUG is on while the server is reachable beyond this machine ({', '.join(exposed)}): "
                "Django's debug pages show settings, tracebacks and request data to whoever reaches them.",
                hint="Unset FORGE_DEBUG (or set it to 0), or bind to 127.0.0.1 and drop the extra "
                "FORGE_ALLOWED_HOSTS while debugging.",
                id="forge.E004",
            )
        ]
    return []


@register(Tags.files)
def check_projects_root_is_writable(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Every accepted change is written next to the project file, so the root must take new files."""
    root = Path(settings.FORGE_PROJECTS_ROOT)
    if not root.exists():
        parent = next((p for p in root.parents if p.exists()), None)
        if parent is not None and os.access(parent, os.W_OK | os.X_OK):
            return []  # made on first use
        problem = f"FORGE_PROJECTS_ROOT {root} does not exist and cannot be made ({parent} is not writable)."
    elif not root.is_dir():
        problem = f"FORGE_PROJECTS_ROOT {root} is not a folder."
    elif not os.access(root, os.W_OK | os.X_OK):
        problem = f"FORGE_PROJECTS_ROOT {root} is not writable by this user: no approved change could be written."
    else:
        return []
    return [
        Error(
            problem,
            hint="Point FORGE_PROJECTS_ROOT at a folder the server's user owns, or fix its permissions.",
            id="forge.E005",
        )
    ]


@register(Tags.security, deploy=True)
def check_no_demo_credentials(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """The quickstart's demo operator and token are for trying the server out, never for production."""
    folder = Path(settings.FORGE_SECRETS_DIR)
    left = [name for name in ("demo-operator-password", "demo-token") if (folder / name).exists()]
    if left:
        return [
            Warning(
                f"The quickstart's demo credentials are present ({', '.join(left)} in {folder}): their password "
                "and token were printed to a terminal and may be in its scrollback or logs.",
                hint="Revoke the demo token and deactivate the demo operator in the console, then delete "
                "those files; create named operators (manage.py create_operator) and tokens instead.",
                id="forge.W006",
            )
        ]
    return []
