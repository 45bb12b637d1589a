"""The JSONL mirror of the audit log: one line per event, appended, flushed and fsynced under a file lock.

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
from pathlib import Path

TAIL_CHUNK = 4096  # a line is ~0.5 KB: the last committed one is almost always in the first read


class MirrorError(Exception):
    """The mirror cannot be written or does not continue the chain."""


class Mirror:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, seq: int, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise MirrorError(f"cannot open the audit mirror {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            end = self._end_of(fd, size, seq - 1)
            data = (line + "\n").encode()
            if end > size:  # the last line lacks its newline (a crash mid-write): complete it
                data = b"\n" + data
                end = size
            os.ftruncate(fd, end)
            os.lseek(fd, end, os.SEEK_SET)
            if os.write(fd, data) != len(data):
                raise MirrorError(f"short write to the audit mirror {self.path}")
            os.fsync(fd)
        except OSError as exc:
            raise MirrorError(f"cannot write the audit mirror {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _end_of(self, fd: int, size: int, seq: int) -> int:
        """The offset just after the line of event `seq` (0 for none): where the next line goes.

        Normally that line is the last one; lines after it are left from transactions that rolled back.
        """
        if seq == 0:
            return 0
        position, buffer = size, b""
        while position > 0:
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
                if found == seq:
                    return offsets[i] + len(pieces[i]) + 1
                if found is not None and found < seq:
                    position = 0
                    break
        raise MirrorError(
            f"the audit mirror {self.path} does not hold event {seq}, the last committed one; restore it or "
            "rebuild it from the database with 'python manage.py audit_verify --rebuild-mirror'"
        )

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
        with open(temporary, "wb") as handle:
            os.chmod(temporary, 0o600)
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
