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

from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

_pools: dict[str, ThreadPoolExecutor] = {}
_made = threading.Lock()


def pool(name: str = "forge-work") -> ThreadPoolExecutor:
    """The pool of MCP exchanges (`forge-work`, `FORGE_WORKERS` threads) or of Django's views (`forge-view`,
    `FORGE_VIEW_WORKERS`), made on first use."""
    if name not in _pools:
        with _made:
            if name not in _pools:
                size = settings.FORGE_VIEW_WORKERS if name == VIEWS else settings.FORGE_WORKERS
                _pools[name] = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
    return _pools[name]


VIEWS = "forge-view"


_thread = threading.local()


def _own_connections() -> list[BaseDatabaseWrapper]:
    """This thread's connection of each database, looked up once: each lookup through Django's `connections`
    goes through asgiref's thread-local storage, and Django's `close_old_connections` makes four of them a
    hop (a twentieth of a call's CPU)."""
    held: list[BaseDatabaseWrapper] | None = getattr(_thread, "connections", None)
    if held is None:
        held = _thread.connections = [connections[alias] for alias in connections]
    return held


def _upkeep() -> None:
    """What Django does at the edges of a request: close a connection that errors made unusable or that is past
    its `CONN_MAX_AGE` (on PostgreSQL, with Django's pool, that hands it back to the pool)."""
    for connection in _own_connections():
        connection.close_if_unusable_or_obsolete()


class _PoolHop(SyncToAsync):
    """asgiref's hop into a thread, with the connection upkeep around the work that Channels'
    `database_sync_to_async` does, made cheaper."""

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        _upkeep()
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            _upkeep()


@functools.cache  # made once per function: the wrapper's set-up is a cost on every call otherwise
def in_pool(func: Callable[..., Any], name: str = "forge-work") -> Callable[..., Any]:
    """`func` as a coroutine function that runs in the pool `name`, with the connection upkeep around it."""
    return _PoolHop(func, thread_sensitive=False, executor=pool(name))
