"""The JSONL mirror of the audit log: one line per event, appended, flushed and fsynced under a file lock.

Each server process keeps its mirror complete: when other processes appended to the shared log since
this file's last line, their committed lines are copied in first (appends hold the chain lock, so the
database cannot move meanwhile).

A line is written inside the transaction that appends its row, before the commit, so that a mirror that
cannot be written stops the action (fail closed). If that transaction then rolls back, its line is left
behind with a sequence number the database never committed; the next append finds it at the tail and
cuts it off before writing, so the mirror always ends with the committed chain. Appends are already
serialized by the chain lock; the file lock keeps other processes' writers and readers out.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

TAIL_CHUNK = 4096  # a line is ~0.5 KB: the last committed one is almost always in the first read


class MirrorError(Exception):
    """The mirror cannot be written or does not continue the chain."""


class Mirror:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, seq: int, line: str, missing: Callable[[int, int], list[str]]) -> None:
        """Write the line of event `seq`; `missing(first, last)` gives committed lines the file lacks."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise MirrorError(f"cannot open the audit mirror {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            end, last = self._tail(fd, size, seq - 1)
            lines = [*missing(last + 1, seq - 1), line] if last < seq - 1 else [line]
            data = "".join(item + "\n" for item in lines).encode()
            if end > size:  # the last line lacks its newline (a crash mid-write): complete it
                data = b"\n" + data
                end = size
            if end < size:
                os.ftruncate(fd, end)
            os.lseek(fd, end, os.SEEK_SET)
            if os.write(fd, data) != len(data):
                raise MirrorError(f"short write to the audit mirror {self.path}")
            os.fsync(fd)
        except OSError as exc:
            raise MirrorError(f"cannot write the audit mirror {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _tail(self, fd: int, size: int, seq: int) -> tuple[int, int]:
        """Where the next line goes, and the last event at or before `seq` that the file holds.

        Normally the file ends with event `seq`. Lines after it are left from transactions that rolled
        back and are cut off. A file that ends earlier (another process appended to the log, or the
        file is new) is filled in by the caller from the database.
        """
        position, buffer = size, b""
        while position > 0 and seq > 0:
            start = max(0, position - TAIL_CHUNK)
            os.lseek(fd, start, os.SEEK_SET)
            buffer = os.read(fd, position - start) + buffer
            position = start
            pieces = buffer.split(b"\n")
            offsets, offset = [], start
            for piece in pieces:
                offsets.append(offset)
                offset += len(piece) + 1
            first = 1 if start > 0 else 0  # a piece cut by the chunk boundary is read on the next round
            for i in range(len(pieces) - 1, first - 1, -1):
                found = line_seq(pieces[i]) if pieces[i].strip() else None
                if found is not None and found <= seq:
                    return offsets[i] + len(pieces[i]) + 1, found
        return 0, 0

    def lines(self):
        """Yield (line number, raw line) of the whole file, under a shared lock."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            for number, raw in enumerate(handle, start=1):
                yield number, raw.rstrip(b"\n")

    def rewrite(self, lines) -> None:
        """Replace the mirror with these lines, atomically (temporary file, fsync, rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_suffix(self.path.suffix + ".tmp")
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a leftover temporary file of a looser mode is tightened too
            for line in lines:
                handle.write(line.encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)


def line_seq(raw: bytes) -> int | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    seq = value.get("seq") if isinstance(value, dict) else None
    return seq if isinstance(seq, int) else None
