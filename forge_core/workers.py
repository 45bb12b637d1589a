"""The bounded pool of threads in which MCP exchanges do their database and file work, side by side.

Channels' `database_sync_to_async` is thread-sensitive by default: every hop of the process runs on one thread,
so one heavy call (a read of a 50,000-variable project) held up every other client's `ping` for as long as it
ran. Exchanges hop into this pool instead (`FORGE_WORKERS` threads, each with its own database connection), so
the work of different requests runs concurrently: SQLite readers in WAL mode beside the one writer, PostgreSQL
through the connection pool. A call still makes one hop. Writes stay serialized where they must be: on SQLite
by the one write lock (`forge_core.sqlite`), for the audit chain by its chain lock (`audit.services`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

_pool: list[ThreadPoolExecutor] = []
_made = threading.Lock()


def pool() -> ThreadPoolExecutor:
    if not _pool:
        with _made:
            if not _pool:
                _pool.append(ThreadPoolExecutor(max_workers=settings.FORGE_WORKERS, thread_name_prefix="forge-work"))
    return _pool[0]


@functools.cache  # made once per function: the wrapper's set-up is a cost on every call otherwise
def in_pool(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` as a coroutine function that runs in the pool (with Channels' connection upkeep around it)."""
    return database_sync_to_async(func, thread_sensitive=False, executor=pool())
