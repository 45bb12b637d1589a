"""The server's read processes: the accepted view's project reads computed outside the server's interpreter.

A check of a 50,000-variable project is most of a second of pure Python; in a thread of the server it holds
the GIL, and every other client's request waits a switch interval at each of its thread hand-offs behind it.
`runmcp` starts FORGE_READ_PROCESSES read processes (`projects.read_process`, each a fresh interpreter
started with `subprocess`, never a fork of the threaded server) and `projects.reads` hands them the reads:
the server fingerprints the file (reading and hashing it, both of which let go of the GIL, unless its status
shows it unchanged since: `projects.services.read_file`), and a read process is sent the bytes only if it does
not hold that document yet, parses it, keeps it by fingerprint and computes the answer. A read takes an idle
process (one that already holds its document if one is idle), so a process busy with a check holds up only a
read that finds every process busy.

A process that dies mid-read (killed, out of memory) is replaced and the read is asked once more of another;
a second loss is `ReadProcessLost`, which the read turns into a refusal. Nothing here keeps state another
process must see: a process's documents are a cache, and the reply's content is the same dict the read
computes in process. Without a started pool (tests, management commands, `mcp_stdio`) reads run in process.
"""

from __future__ import annotations

import atexit
import pickle
import socket
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from projects.files import FileChanged
from projects.plcopen.documents import ProjectFormatError
from projects.plcopen.elements import ElementNotFound
from projects.read_process import CACHE_SIZE

# The folder `projects` is in: a read process imports it from there, as the server does.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
# A fresh interpreter (never a fork of the threaded server) running the read process; its socket's fd follows.
COMMAND = [sys.executable, "-m", "projects.read_process"]
STOP_SECONDS = 5.0


class ReadProcessLost(Exception):
    """No read process could answer: two died during the read, or none could be started."""


class ReadFailed(RuntimeError):
    """A read raised an unexpected error in a read process (a bug, as the same error in process would be)."""


class ReadProcess:
    """One read process and the server's end of its socket; used by one thread at a time (the pool's)."""

    def __init__(self) -> None:
        server_end, process_end = socket.socketpair()
        with process_end:
            try:
                self.popen = subprocess.Popen(
                    [*COMMAND, str(process_end.fileno())],
                    pass_fds=(process_end.fileno(),),
                    cwd=SOURCE_ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            except OSError:
                server_end.close()
                raise
        self.connection = Connection(server_end.detach())
        # The fingerprints it holds, as far as the server knows: its cache sees the same requests in the same
        # order. Only a hint of whether to send the bytes at once; a "missing" reply corrects it.
        self.held: OrderedDict[str, None] = OrderedDict()

    def ask(
        self, fingerprint: str, data: Callable[[], bytes], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """The content of one read; EOFError or OSError if the process is gone. `data` gives the document's bytes,
        asked for only when the process does not hold the document; what it raises leaves the process ready."""
        sent = data() if fingerprint not in self.held else None
        outcome, detail = self._exchange((fingerprint, sent, name, args, kwargs))
        if outcome == "missing":
            outcome, detail = self._exchange((fingerprint, data(), name, args, kwargs))
        if outcome == "not_a_project":
            self.held.pop(fingerprint, None)
            raise ProjectFormatError(detail)
        self.held[fingerprint] = None
        self.held.move_to_end(fingerprint)
        while len(self.held) > CACHE_SIZE:
            self.held.popitem(last=False)
        if outcome == "ok":
            return detail
        if outcome == "not_found":
            raise ElementNotFound(detail)
        if outcome == "invalid":
            raise ValueError(detail)
        raise ReadFailed(f"the read {name} failed in a read process ({detail})")

    def _exchange(self, request: tuple[Any, ...]) -> tuple[str, Any]:
        self.connection.send_bytes(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
        outcome, detail = pickle.loads(self.connection.recv_bytes())
        return outcome, detail

    def end(self) -> None:
        """Close its socket (it exits on that) and wait for it; kill it if it does not go."""
        self.connection.close()
        try:
            self.popen.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class ReadPool:
    """`size` read processes, each lent to one read at a time."""

    def __init__(self, size: int) -> None:
        # Idle slots; None is a slot whose process is not running (not started yet, or lost and not replaced).
        self._idle: list[ReadProcess | None] = [None] * size
        self._available = threading.Condition()
        self._stopped = False

    def start(self) -> None:
        """Start every process now, so the first reads do not wait for an interpreter to start."""
        with self._available:
            self._idle = [process or ReadProcess() for process in self._idle]

    def run(self, fingerprint: str, data: Callable[[], bytes], name: str, *args: Any, **kwargs: Any) -> Any:
        """The content of read `name` on the document of this fingerprint, computed in a read process; `data`
        gives its bytes if the process does not hold it yet (`ReadProcess.ask`)."""
        for _attempt in range(2):
            process = self._take(fingerprint)
            try:
                content = process.ask(fingerprint, data, name, args, kwargs)
            except (EOFError, OSError):
                self._lose(process)
                continue
            except (LookupError, ValueError, ReadFailed, FileChanged):
                # answered (the read's own refusal), or the bytes not sent: the process is ready for the next
                self._give_back(process)
                raise
            except BaseException:
                self._lose(process)  # left mid-exchange: what it sends next would answer this read
                raise
            self._give_back(process)
            return content
        raise ReadProcessLost("a read process stopped during the read, twice")

    def _take(self, fingerprint: str) -> ReadProcess:
        with self._available:
            while not self._idle and not self._stopped:
                self._available.wait()
            if self._stopped:
                raise ReadProcessLost("the read processes are stopping")
            self._forget_ended()
            slot = self._idle.pop(self._best_slot(fingerprint))
            if slot is None:
                try:
                    slot = ReadProcess()
                except OSError as exc:
                    self._idle.append(None)
                    self._available.notify()
                    raise ReadProcessLost(f"a read process could not be started ({exc.strerror})") from None
            return slot

    def _forget_ended(self) -> None:
        """Idle processes that have ended (killed while idle) become empty slots, not a read's lost attempt."""
        for slot, process in enumerate(self._idle):
            if process is not None and process.popen.poll() is not None:
                process.end()
                self._idle[slot] = None

    def _best_slot(self, fingerprint: str) -> int:
        """An idle process holding the document, else any running one, else a slot to start one in."""
        running = [i for i, process in enumerate(self._idle) if process is not None]
        holding = [i for i, process in enumerate(self._idle) if process is not None and fingerprint in process.held]
        return (holding or running or [0])[-1]

    def _give_back(self, process: ReadProcess) -> None:
        with self._available:
            if not self._stopped:
                self._idle.append(process)
                self._available.notify()
                return
        process.end()

    def _lose(self, process: ReadProcess) -> None:
        """A process that stopped answering: end what is left of it; the next read of its slot starts another."""
        process.popen.kill()
        process.end()
        with self._available:
            if not self._stopped:
                self._idle.append(None)
            self._available.notify()

    def stop(self) -> None:
        """End every process: idle ones now, busy ones when their read is answered."""
        with self._available:
            self._stopped = True
            idle = [process for process in self._idle if process is not None]
            self._idle = []
            self._available.notify_all()
        for process in idle:
            process.end()


_pool: ReadPool | None = None
_pool_lock = threading.Lock()


def start(size: int) -> None:
    """Start `size` read processes for this server's reads (0: reads stay in process)."""
    global _pool
    with _pool_lock:
        if _pool is not None or size == 0:
            return
        pool = ReadPool(size)
        pool.start()
        _pool = pool


def stop() -> None:
    """End the read processes; reads from now on run in process."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.stop()


def running() -> ReadPool | None:
    return _pool


atexit.register(stop)  # a process that exits without stopping them (a test run) still ends its read processes
