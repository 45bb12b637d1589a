"""The watcher of FORGE_ROSTER_DIR/incoming/: a roster signed elsewhere and dropped there is considered while
the server runs, without anyone running `roster_accept`.

The folder is polled (an `os.scandir` of names, sizes and modification times, cheap enough every half second,
and no dependency on inotify, which network and container filesystems lack). A change is acted on only once
the folder has stayed the same for about 200 ms, so a pair still being copied in is not read half-written and
two files dropped one after the other are considered together. The folder as it was then is not considered
again until something in it changes (a peers.toml waiting for its revoked.toml is looked at once), except after
a failure, which is retried a while later.

`services.consider_incoming` reads and writes the database, so it runs in a thread of the watcher's own, one
consideration at a time, with the connection handling of the server's other background loops; the event loop
only sleeps and scans. The server (`runmcp`) schedules `watch_incoming` on its loop; nothing here knows of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from caretaker import services, store

logger = logging.getLogger("forge.caretaker")

POLL_SECONDS = 0.5
SETTLE_SECONDS = 0.2
RETRY_SECONDS = 30.0

# (name, size, mtime in ns) of each file directly in the folder.
Snapshot = frozenset[tuple[str, int, int]]


def incoming_folder() -> Path:
    return Path(settings.FORGE_ROSTER_DIR) / store.INCOMING


def snapshot(folder: Path) -> Snapshot:
    """The files directly in `folder` (not done/ or refused/, not dot files being written); empty if it is
    missing. A file that vanishes while being looked at is left out: the next scan sees the folder as it is."""
    found: set[tuple[str, int, int]] = set()
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    status = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                found.add((entry.name, status.st_size, status.st_mtime_ns))
    except OSError:
        return frozenset()
    return frozenset(found)


@dataclass
class Settling:
    """When to consider the folder, from the snapshots seen and the times they were taken (seconds on any
    monotonic clock): once what is in it has stayed the same for `settle` seconds, and not again for the same
    contents unless the attempt failed and `retry` seconds have passed."""

    settle: float = SETTLE_SECONDS
    retry: float = RETRY_SECONDS
    seen: Snapshot = frozenset()
    seen_since: float = 0.0
    handled: Snapshot | None = None
    retry_at: float | None = None

    def due(self, current: Snapshot, now: float) -> bool:
        if current != self.seen:
            self.seen, self.seen_since = current, now
            return False
        if not current or now - self.seen_since < self.settle:
            return False
        if current == self.handled:
            return self.retry_at is not None and now >= self.retry_at
        return True

    def handle(self, current: Snapshot, *, failed: bool, now: float) -> None:
        self.handled = current
        self.retry_at = now + self.retry if failed else None

    def pause(self, poll: float) -> float:
        """How long to sleep before the next scan: short while a change is settling, else the poll interval."""
        settling = bool(self.seen) and self.seen != self.handled
        return min(poll, self.settle) if settling else poll


def consider_once(consider: Callable[[], list[services.Verdict]], retry: float = RETRY_SECONDS) -> bool:
    """Run one consideration in the calling (watcher) thread; False when it failed, which is logged as one
    line. Connections are handled as the server's other background loops do: stale ones closed around it."""
    close_old_connections()
    try:
        verdicts = consider()
    # The loop's boundary: a bad file, a full disk or an unreachable database must not end the watcher, nor
    # print a traceback every half second.
    except Exception as exc:
        logger.warning(
            "roster watcher: could not consider %s (%s: %s); trying again in %.0f s or when the folder changes",
            incoming_folder(),
            type(exc).__name__,
            exc,
            retry,
        )
        return False
    finally:
        close_old_connections()
    for verdict in verdicts:
        logger.info("roster watcher: %s: %s", verdict.outcome, verdict.message)
    return True


def _consider_incoming() -> list[services.Verdict]:
    return services.consider_incoming(actor="roster-watcher")


async def watch_incoming(
    *,
    folder: Path | None = None,
    consider: Callable[[], list[services.Verdict]] = _consider_incoming,
    poll: float = POLL_SECONDS,
    settle: float = SETTLE_SECONDS,
    retry: float = RETRY_SECONDS,
) -> None:
    """Consider what is dropped into `folder` (FORGE_ROSTER_DIR/incoming/) once it has settled, until cancelled."""
    watched = folder or incoming_folder()
    settling = Settling(settle=settle, retry=retry)
    loop = asyncio.get_running_loop()
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="roster-watcher")
    try:
        while True:
            current = snapshot(watched)
            if settling.due(current, loop.time()):
                ok = await loop.run_in_executor(worker, consider_once, consider, retry)
                settling.handle(current, failed=not ok, now=loop.time())
            await asyncio.sleep(settling.pause(poll))
    finally:
        # A consideration under way is not interrupted (it may be publishing a roster): it finishes in its
        # thread, and nothing new starts.
        worker.shutdown(wait=False, cancel_futures=True)
