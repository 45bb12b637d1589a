"""The latest signed checkpoint, kept as a file beside the mirror: a copy of the log's past that a restored
database backup or a deleted tail cannot take back.

The file holds the signed note exactly as `/api/audit/checkpoint` serves it. It is replaced atomically
(temporary file, fsync, rename, mode 0600) and only by a larger tree: processes that sign checkpoints
concurrently hold a lock on the folder while they compare and replace, so an older checkpoint never
overwrites a newer one. Free of Django: the caller names the path.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SUFFIX = ".checkpoint"
MAX_BYTES = 64 * 1024


def kept_path(mirror_path: Path) -> Path:
    """Where the checkpoint of the log mirrored at `mirror_path` is kept: `<mirror>.checkpoint`."""
    return mirror_path.with_name(mirror_path.name + SUFFIX)


@dataclass(frozen=True)
class SavedCheckpoint:
    """A signed note read from a file: the server's kept copy, or one an auditor saved earlier."""

    source: str
    note: bytes
    saved_at: datetime

    @classmethod
    def read(cls, path: Path, source: str | None = None) -> SavedCheckpoint:
        """The note in `path`: the note itself, or the JSON body `/api/audit/checkpoint` served with it in
        `note` (raises OSError when the file cannot be read)."""
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES)  # a checkpoint is a few hundred bytes; never read a large file whole
            saved_at = datetime.fromtimestamp(os.fstat(handle.fileno()).st_mtime, UTC)
        return cls(source=source or str(path), note=_note_of(data), saved_at=saved_at)

    def describe(self) -> str:
        return f"{self.source} (saved {self.saved_at:%Y-%m-%d %H:%M:%S} UTC)"


def _note_of(data: bytes) -> bytes:
    """The signed note in a saved file; anything that is not the served JSON body is taken as the note."""
    if not data.lstrip().startswith(b"{"):
        return data
    try:
        body = json.loads(data)
    except ValueError:
        return data
    note = body.get("note") if isinstance(body, dict) else None
    return note.encode() if isinstance(note, str) else data


def read_kept(mirror_path: Path) -> SavedCheckpoint | None:
    """The kept checkpoint beside this mirror, or None when none was kept yet."""
    path = kept_path(mirror_path)
    try:
        return SavedCheckpoint.read(path, source=f"the kept checkpoint {path}")
    except FileNotFoundError:
        return None


def keep(mirror_path: Path, note: str, size: int, size_of: Callable[[bytes], int | None]) -> bool:
    """Replace the kept checkpoint with `note` (of tree `size`) unless the kept one is as large already.

    `size_of(note_bytes)` is the size a kept note states, None when it is not a note this server signed.
    Returns whether the file was replaced.
    """
    path = kept_path(mirror_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        try:
            current = size_of(path.read_bytes())
        except FileNotFoundError:
            current = None
        if current is not None and current >= size:
            return False
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(note.encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        os.fsync(folder)
        return True
    finally:
        os.close(folder)
