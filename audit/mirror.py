"""The JSONL mirror of the audit log: one line per event, appended under a file lock, and fsynced before the
transaction that holds their rows commits.

Each server process keeps its mirror complete: when other processes appended to the shared log since
this file's last line, their committed lines are copied in first (appends hold the chain lock, so the
database cannot move meanwhile).

A line is written inside the transaction that appends its row, before the commit, so that a mirror that
cannot be written stops the action (fail closed). If that transaction then rolls back, its line is left
behind with a sequence number the database never committed; the next append finds it at the tail and
moves it (with any others that transaction wrote) to `<mirror>.rolled-back` before writing, so the
mirror ends with the committed chain and no line is ever thrown away. A tail is judged by its MACs, not its numbers
alone: when another process has meanwhile committed as many events or more, the rolled-back lines stand where the
database holds other events of the same numbers, and they are set aside from the last line the database agrees
with. Lines past the database's end that
the checkpoint kept beside the mirror saw committed, or that do not continue the database's chain, mean
the database lost events (an old backup restored, its tail deleted) or the file was edited: the append
is refused (see `Past`), since recording on would give those numbers to other events. Appends are
already serialized by the chain lock; the file lock keeps other processes' writers and readers out.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

TAIL_CHUNK = 4096  # a line is ~0.5 KB: the last committed one is almost always in the first read
# How many lines back from its tail a mirror that does not agree with the database is searched for the last line
# that does: what appends that rolled back can leave where another process committed the same numbers since.
DIVERGED_LINES = 4096
ROLLED_BACK_SUFFIX = ".rolled-back"


class _Handle:
    """The mirror file this process keeps open between appends, and what its last append left: the file's size,
    its modification time, and the seq and MAC of the last event written. A file found just so, appended to from
    that very event, needs no reading of its tail."""

    __slots__ = ("fd", "identity", "written")

    def __init__(self, fd: int, identity: tuple[int, int]) -> None:
        self.fd = fd
        self.identity = identity
        self.written: tuple[int, int, int, str] | None = None


_handles: dict[Path, _Handle] = {}  # at most one; appends are serialized by the chain lock, one uses it at a time


def _locked_handle(path: Path) -> tuple[_Handle, os.stat_result]:
    """The open mirror at `path`, under this process's exclusive file lock, with the file's status read under it:
    kept from the last append while the path still names that file (not replaced by `Mirror.rewrite`, deleted or
    moved), else opened (and created) afresh. The path's status, read once the lock is held, says both whether
    it still names the kept file and how long that file is (one system call where a check of the path and then
    of the open file took two)."""
    handle = _handles.get(path)
    if handle is not None:
        fcntl.flock(handle.fd, fcntl.LOCK_EX)
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        except OSError as exc:
            fcntl.flock(handle.fd, fcntl.LOCK_UN)
            raise MirrorError(f"cannot open the audit mirror {path}: {exc.strerror}") from exc
        if current is not None and handle.identity == (current.st_dev, current.st_ino):
            return handle, current
        fcntl.flock(handle.fd, fcntl.LOCK_UN)
    handle = _open_anew(path)
    fcntl.flock(handle.fd, fcntl.LOCK_EX)
    return handle, os.fstat(handle.fd)


def _open_anew(path: Path) -> _Handle:
    for other in list(_handles):  # a process has one mirror; a handle on another path is not needed again
        _close_handle(other)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise MirrorError(f"cannot open the audit mirror {path}: {exc.strerror}") from exc
    opened = os.fstat(fd)
    _handles[path] = handle = _Handle(fd, (opened.st_dev, opened.st_ino))
    return handle


def _close_handle(path: Path) -> None:
    handle = _handles.pop(path, None)
    if handle is not None:
        with contextlib.suppress(OSError):
            os.close(handle.fd)
        handle.fd = -1


class MirrorError(Exception):
    """The mirror cannot be written or does not continue the chain."""


class Mirror:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._appended: _Handle | None = None  # the open file this object's last append wrote, for `sync()`

    def append(
        self,
        seq: int,
        new_lines: Sequence[str],
        prev_mac: str,
        missing: Callable[[int, int], list[str]],
        kept_size: Callable[[], int],
        *,
        mac: str,
        sync: bool = True,
    ) -> None:
        """Write the lines of events `seq`, `seq + 1`, ... (one fsync for all, or none with `sync=False`: then the
        caller calls `sync()` before it commits their rows), the previous event's MAC being `prev_mac` and the
        last new line's `mac`.

        `missing(first, last)` gives committed lines the file lacks; `kept_size()` the size the checkpoint
        kept beside the mirror saw, read only when lines lie past the database's end.
        """
        try:
            handle, stat = _locked_handle(self.path)
            fd = handle.fd
            try:
                size, written = stat.st_size, handle.written
                if written == (size, stat.st_mtime_ns, seq - 1, prev_mac):
                    # The file is as this process's last append left it, and that append committed.
                    end, last, last_mac, lines = size, seq - 1, prev_mac, list(new_lines)
                else:
                    # As this process left it, the file ends with the last event that append wrote.
                    as_left = written is not None and written[:2] == (size, stat.st_mtime_ns) and written[2] < seq
                    known = written[2:] if written is not None and as_left else None
                    end, last, last_mac, filled = self._continued(fd, size, seq - 1, prev_mac, missing, known)
                    lines = [*filled, *new_lines]
                data = "".join(item + "\n" for item in lines).encode()
                if end > size:  # the last line lacks its newline (a crash mid-write): complete it
                    data = b"\n" + data
                    end = size
                if end < size:
                    past = Past(os.pread(fd, size - end, end))
                    self._set_aside(past, last, last_mac, kept_size, seq - 1)
                    os.ftruncate(fd, end)
                if os.pwrite(fd, data, end) != len(data):
                    raise MirrorError(f"short write to the audit mirror {self.path}")
                if sync:
                    os.fsync(fd)
                handle.written = (end + len(data), os.fstat(fd).st_mtime_ns, seq + len(new_lines) - 1, mac)
                self._appended = handle
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            _close_handle(self.path)
            raise MirrorError(f"cannot write the audit mirror {self.path}: {exc.strerror}") from exc
        except BaseException:
            _close_handle(self.path)
            raise

    def sync(self) -> None:
        """Make what was written to the file durable (an fsync)."""
        handle = self._appended
        try:
            # The file the lines went to, as it is open, with no look at the path: a sync is part of every append.
            os.fsync(handle.fd if handle is not None and handle.fd >= 0 else _open_anew(self.path).fd)
        except OSError as exc:
            _close_handle(self.path)
            raise MirrorError(f"cannot sync the audit mirror {self.path}: {exc.strerror}") from exc

    def _continued(
        self,
        fd: int,
        size: int,
        head: int,
        head_mac: str,
        missing: Callable[[int, int], list[str]],
        known: tuple[int, str] | None,
    ) -> tuple[int, int, str, list[str]]:
        """Where the file of `size` bytes is to go on for the database's chain to reach event `head` (of MAC
        `head_mac`): the end of the last line the database agrees with, that line's seq and MAC, and the committed
        lines after it (`missing`). Normally that is the file's line of event `head` itself, or its last line when
        other processes appended since. Lines after it are what the caller sets aside (`Past`). `known`: the seq
        and MAC of the file's last line, when this process wrote it (no need to read the file's tail)."""
        mac: str | None
        if known is not None:
            end, (last, mac) = size, known
        else:
            end, last, raw = self._tail(fd, size, head)
            mac = _field(raw, "mac") if last else None
        filled = missing(last + 1, head) if last < head else []
        agreed = head_mac if last == head else _field(filled[0], "prev_mac") if filled else None
        if not last or mac == agreed:
            return end, last, agreed or "", filled
        end, last, agreed = self._last_agreed(fd, end, missing)
        return end, last, agreed, missing(last + 1, head) if last < head else []

    def _last_agreed(self, fd: int, size: int, missing: Callable[[int, int], list[str]]) -> tuple[int, int, str]:
        """The end, seq and MAC of the file's last line before byte `size` whose MAC is the database's for that
        event (read through `missing`, committed lines, a window at a time); when there is none, the start of the
        file and the chain's first `prev_mac`. The search stops with an error after `DIVERGED_LINES` lines, more
        than rolled-back appends leave."""
        committed: dict[int, str | None] = {}
        for examined, (after, raw) in enumerate(self._lines_back(fd, size)):
            if examined == DIVERGED_LINES:
                raise MirrorError(
                    f"the audit mirror {self.path} does not hold the database's events in its last "
                    f"{counted(DIVERGED_LINES, 'line')}: the database was replaced or the file was edited. Nothing "
                    "more is recorded until an operator has compared them: run `manage.py audit_verify` "
                    "(docs/AUDIT.md, 'A log that cannot be rolled back')"
                )
            seq = line_seq(raw)
            if seq is None or seq < 1:
                continue
            if seq not in committed:
                first = max(1, seq - 63)
                for number, line in enumerate(missing(first, seq), start=first):
                    committed[number] = _field(line, "mac")
            agreed = committed.get(seq)
            if agreed is not None and agreed == _field(raw, "mac"):
                return after, seq, agreed
        return 0, 0, _field(missing(1, 1)[0], "prev_mac") or ""

    def _set_aside(self, past: Past, size: int, mac: str, kept_size: Callable[[], int], head: int) -> None:
        """Move what appends that rolled back left to `<mirror>.rolled-back`; refuse anything else."""
        problem = past.problem(size, mac, kept_size, head)
        if problem is not None:
            raise MirrorError(
                f"the audit mirror {self.path} {problem}. Nothing more is recorded until an operator has "
                "compared them: run `manage.py audit_verify` (docs/AUDIT.md, 'A log that cannot be rolled back')"
            )
        data = past.data if past.data.endswith(b"\n") else past.data + b"\n"
        fd = os.open(self.rolled_back_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.write(fd, data) != len(data):
                raise MirrorError(f"short write to {self.rolled_back_path}")
            os.fsync(fd)
        finally:
            os.close(fd)

    @property
    def rolled_back_path(self) -> Path:
        return self.path.with_name(self.path.name + ROLLED_BACK_SUFFIX)

    def past(self, size: int) -> Past:
        """What the file holds after the line of event `size` (the database's last), under a shared lock."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return Past(b"")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            length = os.fstat(fd).st_size
            end, _, _ = self._tail(fd, length, size)
            return Past(os.pread(fd, length - end, end) if end < length else b"")
        finally:
            os.close(fd)

    def _tail(self, fd: int, size: int, seq: int) -> tuple[int, int, bytes]:
        """Where the next line goes, and the last event at or before `seq` that the file holds, with its line.

        Normally the file ends with event `seq`; what follows it is past the database's end (see
        `Past`). A file that ends earlier (another process appended to the log, or the file is new) is
        filled in by the caller from the database.
        """
        if seq > 0:
            for after, raw in self._lines_back(fd, size):
                found = line_seq(raw)
                if found is not None and found <= seq:
                    return after, found, raw
        return 0, 0, b""

    @staticmethod
    def _lines_back(fd: int, size: int) -> Iterator[tuple[int, bytes]]:
        """The lines of the file's first `size` bytes that are not blank, from the last back, each with where the
        line after it starts (one past `size` for a last line that lacks its newline)."""
        position, cut = size, b""  # `cut`: the start of a line the last read began inside, read before it
        while position > 0:
            start = max(0, position - TAIL_CHUNK)
            data = os.pread(fd, position - start, start) + cut
            position = start
            pieces = data.split(b"\n")
            cut = pieces.pop(0) if start > 0 else b""
            after = start + len(data) + 1
            for piece in reversed(pieces):
                if piece.strip():
                    yield after, piece
                after -= len(piece) + 1

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


class Past:
    """What a mirror holds past the database's last event.

    Normally nothing. A transaction that appended and then rolled back leaves its lines: numbered on from
    the database's last event and chained from its MAC, the last one possibly torn by a crash mid-write.
    Lines of that shape are also what a database cut back leaves, so they count as lost events when the
    checkpoint kept beside the mirror saw past the database's end; lines of any other shape (a gap, a
    line that does not chain, junk) mean the file was edited or the database replaced.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.lines = [line for line in data.split(b"\n") if line.strip()]
        torn = bool(self.lines) and not data.endswith(b"\n") and line_seq(self.lines[-1]) is None
        self.whole = self.lines[:-1] if torn else self.lines

    def continues(self, size: int, mac: str) -> bool:
        """Whether the lines continue the chain from event `size` (of MAC `mac`), one after another."""
        seq, prev_mac = size + 1, mac
        for raw in self.whole:  # a line's "mac" is the next line's "prev_mac", whatever its type
            try:
                line = json.loads(raw)
            except ValueError:
                return False
            if not isinstance(line, dict) or line.get("seq") != seq or line.get("prev_mac") != prev_mac:
                return False
            seq, prev_mac = seq + 1, str(line.get("mac"))
        return True

    def problem(self, size: int, mac: str, kept_size: Callable[[], int], head: int | None = None) -> str | None:
        """What is wrong with the lines past event `size`, or None when there are none or they are what
        appends that rolled back leave. `kept_size()` is the size the kept checkpoint saw (0 if none). `head`, when
        later than `size`, is the database's last event: the lines stand where it holds other events."""
        if not self.lines:
            return None
        head = size if head is None else head
        where = (
            f"past the database's last event {size}"
            if head <= size
            else f"after event {size}, where the database holds other events up to {head}"
        )
        if self.continues(size, mac):
            kept = kept_size()
            if kept <= head:
                return None
            return (
                f"holds events {size + 1}..{size + len(self.whole)} {where}, and "
                f"the checkpoint kept beside it saw {kept}: the database was rolled back (an old backup restored) "
                "or its tail deleted"
            )
        numbered = [seq for seq in map(line_seq, self.lines) if seq is not None]
        events = f" (events {min(numbered)}..{max(numbered)})" if numbered else ""
        return (
            f"holds {counted(len(self.lines), 'line')} {where}{events} that do not continue "
            "its chain: the database was rolled back or replaced, or the file was edited"
        )


def counted(number: int, noun: str) -> str:
    """`1 line`, `2 lines`: a count in a sentence."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _field(line: str | bytes, name: str) -> str | None:
    """Member `name` of a mirror line as text, or None when the line is not a JSON object."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return str(value.get(name)) if isinstance(value, dict) else None


def line_seq(raw: bytes) -> int | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    seq = value.get("seq") if isinstance(value, dict) else None
    return seq if isinstance(seq, int) else None
