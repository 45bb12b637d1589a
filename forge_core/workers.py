"""The bounded pool of threads in which MCP exchanges do their database and file work, side by side.

Channels' `database_sync_to_async` is thread-sensitive by default: every hop of the process runs on one thread,
so one heavy call (a read of a 50,000-variable project) held up every other client's `ping` for as long as it
ran. Exchanges hop into this pool instead (`FORGE_WORKERS` threads, each with its own database connection), so
the work of different requests runs concurrently: SQLite readers in WAL mode beside the one writer, PostgreSQL
through the connection pool. A call still makes one hop. Writes stay serialized where they must be: on SQLite
by the one write lock (`forge_core.sqlite`), for the audit chain by its chain lock (`audit.services`).

A pool hands each piece of work to the thread that went idle last (`LastIdleFirst`), so back-to-back calls run on
one thread and its SQLite connection, whose page cache is still valid: `ThreadPoolExecutor` wakes its idle threads
in turn, and each call's connection read again (16 `pread64` a call on daphne) the pages the other had written.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper


class _Work:
    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(self, future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.future, self.fn, self.args, self.kwargs = future, fn, args, kwargs


_STOP = _Work(Future(), lambda: None, (), {})  # what a thread is handed, or finds, when its pool shuts down


class _Thread:
    """A pool thread between two pieces of work: it waits on `wake` until `hand` gives it the next."""

    __slots__ = ("wake", "work")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.work: _Work | None = None

    def hand(self, work: _Work) -> None:
        self.work = work
        self.wake.release()


class LastIdleFirst(Executor):
    """At most `size` threads; new work goes to the thread that went idle last, or waits for the first that
    finishes, and a thread is started only while every one is busy (one heavy call does not hold up another
    client's `ping`). A thread counts as idle before it hands back its answer, so the next call, which that answer
    lets the client send, finds it idle; `ThreadPoolExecutor` marks a thread idle only after, and started a second
    thread that then took every other call."""

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._lock = threading.Lock()
        self._idle: list[_Thread] = []
        self._waiting: collections.deque[_Work] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        work = _Work(Future(), fn, args, kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self._name} pool is shut down")
            if self._idle:
                self._idle.pop().hand(work)
                return work.future
            self._waiting.append(work)
            if len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}_{len(self._threads)}", args=(_Thread(),)
                )
                self._threads.append(thread)
                thread.start()
        return work.future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if cancel_futures:
                for work in self._waiting:
                    work.future.cancel()
                self._waiting.clear()
            idle, self._idle = self._idle, []
        for thread in idle:
            thread.hand(_STOP)
        if wait:
            for running in list(self._threads):
                if running is not threading.current_thread():
                    running.join()

    def _serve(self, me: _Thread) -> None:
        work = self._next(me)
        while work is not _STOP:
            if work is None:
                me.wake.acquire()
                work, me.work = me.work, None
                continue
            work = self._run(work, me)

    def _next(self, me: _Thread) -> _Work | None:
        """The work waiting longest, or None with `me` marked idle (last in, first woken), or `_STOP`."""
        with self._lock:
            if self._waiting:
                return self._waiting.popleft()
            if self._closed:
                return _STOP
            self._idle.append(me)
            return None

    def _run(self, work: _Work, me: _Thread) -> _Work | None:
        if not work.future.set_running_or_notify_cancel():
            return self._next(me)
        try:
            result = work.fn(*work.args, **work.kwargs)
        except BaseException as exc:  # as ThreadPoolExecutor: whatever it was, the caller's future carries it
            following = self._next(me)
            work.future.set_exception(exc)
        else:
            following = self._next(me)
            work.future.set_result(result)
        return following


_pools: dict[str, LastIdleFirst] = {}
_made = threading.Lock()


def pool(name: str = "forge-work") -> LastIdleFirst:
    """The pool of MCP exchanges (`forge-work`, `FORGE_WORKERS` threads) or of Django's views (`forge-view`,
    `FORGE_VIEW_WORKERS`), made on first use."""
    if name not in _pools:
        with _made:
            if name not in _pools:
                size = settings.FORGE_VIEW_WORKERS if name == VIEWS else settings.FORGE_WORKERS
                _pools[name] = LastIdleFirst(size, name)
    return _pools[name]


def _finish_work_at_exit() -> None:
    """At interpreter exit, as for `ThreadPoolExecutor`: the work already handed to the pools finishes first."""
    for made in list(_pools.values()):
        made.shutdown(wait=True)


# Called before Python joins the threads that are not daemons, which these are; `concurrent.futures` registers
# its executors' exit the same way (not in typeshed).
getattr(threading, "_register_atexit")(_finish_work_at_exit)  # noqa: B009


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
    # asgiref's annotation names ThreadPoolExecutor; it only hands the executor to `loop.run_in_executor`
    return _PoolHop(func, thread_sensitive=False, executor=pool(name))  # type: ignore[arg-type]
