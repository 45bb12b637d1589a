"""Writing project files so that no reader ever sees half of one, and resolving paths inside the root."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from glob import escape as glob_escape
from pathlib import Path

from django.conf import settings


class PathOutsideRoot(ValueError):
    """A project path that is not inside FORGE_PROJECTS_ROOT."""


class FileChanged(Exception):
    """A file's bytes, read now, no longer have the fingerprint that its unchanged status stood for a moment
    before: it was written in between. Read it again from the start."""


def _no_step(name: str) -> None:
    """No-op step callback: nothing to mark at a write's boundaries."""


def write_atomically(path: Path, data: bytes, step: Callable[[str], None] = _no_step) -> None:
    """Temporary file beside the target, fsync, rename over it, fsync the folder: all or nothing.

    `step` is called at the boundaries ("after_temp_write", "after_rename") for the executor's crash test.

    The new file keeps the mode of the file it replaces: a project bound from an operator's existing file
    stays as readable as the operator made it (their IDE and other tools keep their access). A file the
    service creates is 0600, like everything else it writes under the data folder.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A process killed between writing its temporary file and the rename leaves one behind; the next
    # write of the same file clears it (writes of one target never overlap: the executor reserves it).
    for leftover in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        leftover.unlink(missing_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o600
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # set exactly, past the umask
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        step("after_temp_write")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    step("after_rename")


def inside_root(candidate: str | Path) -> Path:
    """The absolute path of `candidate` (absolute, or relative to the root) if it lies inside the root."""
    root = Path(settings.FORGE_PROJECTS_ROOT).resolve()
    path = Path(candidate)
    resolved = (path if path.is_absolute() else root / path).resolve()
    if resolved != root and root not in resolved.parents:
        raise PathOutsideRoot(f"{candidate} is not inside the projects root {root}; put the file there first.")
    return resolved


def relative_to_root(path: Path) -> str:
    return str(path.relative_to(Path(settings.FORGE_PROJECTS_ROOT).resolve()))
