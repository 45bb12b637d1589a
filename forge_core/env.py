"""Reading configuration from the environment, loudly.

Every `FORGE_*` setting goes through these helpers so that a typo in a value stops the process at
start-up with a message naming the variable, instead of silently falling back to a default. Secrets are
files under `$FORGE_DATA_DIR/secrets/` (mode 0600), created on first use and never stored in a table.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1 or 0.")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum of {minimum}.")
    return value


def envfloat(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum of {minimum}.")
    return value


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}.")
    return value


def envlist(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def envseconds(name: str) -> dict[str, float]:
    """A mapping like "a=120,b=600" (name to seconds), for per-item overrides of a duration."""
    found: dict[str, float] = {}
    for item in envlist(name):
        key, sep, value = item.partition("=")
        try:
            seconds = float(value.strip().removesuffix("s"))
        except ValueError:
            seconds = -1.0
        if not sep or not key.strip() or seconds <= 0:
            raise ImproperlyConfigured(f"{name}: {item!r} should read name=seconds, like project.write.add_pou=120.")
        found[key.strip()] = seconds
    return found


PRIVATE_UMASK = 0o077


def make_private_by_default() -> None:
    """Give every file and folder this process creates from now on no access for other users (umask 077).

    Called from the settings module, which every entry point (manage.py and its commands, the ASGI
    application, the test runner) loads before it touches the data folder: so the data folder, the
    SQLite database and its -wal/-shm files, the folders made inside it and any file a library creates
    there are 0700 / 0600 without each call site having to remember a mode. Code that creates a file
    with os.open still passes 0o600 itself, so it stays private if it is ever run without the settings.
    """
    os.umask(PRIVATE_UMASK)


def secret_file(directory: Path, name: str, nbytes: int = 32) -> str:
    """Return the secret stored in `directory/name`, creating it (mode 0600) on first use."""
    return create_once(directory / name, lambda: (secrets.token_urlsafe(nbytes) + "\n").encode()).decode().strip()


def create_once(path: Path, make: Callable[[], bytes]) -> bytes:
    """The content of `path`, writing `make()` there first if it does not exist yet.

    The content is written to a temporary file and linked into place, so a file at `path` is always
    whole: when two processes start at once, the loser of the race reads what the winner wrote.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(make())
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    content = path.read_bytes()
    if not content.strip():
        raise ImproperlyConfigured(f"secret file {path} is empty; delete it to have a new one made.")
    return content


def envcadence(name: str, default: str) -> tuple[int, float]:
    """A cadence like "1000", "300s" or "1000,300s": every N events and/or every T seconds (0 = never)."""
    raw = os.environ.get(name, default)
    events, seconds = 0, 0.0
    for part in (p.strip() for p in raw.split(",") if p.strip()):
        try:
            if part.endswith("s"):
                seconds = float(part[:-1])
            else:
                events = int(part)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}={raw!r}: use N events, Ts seconds, or both, like '1000,300s'."
            ) from None
        if events < 0 or seconds < 0:
            raise ImproperlyConfigured(f"{name}={raw!r} must not be negative.")
    return events, seconds
