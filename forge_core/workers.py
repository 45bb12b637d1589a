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

import asyncio
import collections
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from typing import Any

from asgiref.sync import SyncToAsync, _restore_context
from django.conf import settings
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper


class _Work:
    """Work handed through `submit`: its caller waits on a concurrent future."""

    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(self, future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.future, self.fn, self.args, self.kwargs = future, fn, args, kwargs

    def start(self) -> bool:
        """Whether the work is still wanted (its caller has not cancelled it)."""
        return self.future.set_running_or_notify_cancel()

    def call(self) -> Any:
        return self.fn(*self.args, **self.kwargs)

    def settle(self, result: Any, exc: BaseException | None) -> None:
        if exc is not None:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


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
        self.hand(work)
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
        try:
            while work is not _STOP:
                if work is None:
                    me.wake.acquire()
                    work, me.work = me.work, None
                    continue
                work = self._run(work, me)
        finally:
            _let_go()

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
        if not work.start():
            return self._next(me)
        try:
            result = work.call()
        except BaseException as exc:  # as ThreadPoolExecutor: whatever it was, the caller's future carries it
            following = self._next(me)
            work.settle(None, exc)
        else:
            following = self._next(me)
            work.settle(result, None)
        return following

    def hand(self, work: _Work) -> None:
        """Run `work` on the thread idle last, or on a new one, or after the first busy one finishes."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self._name} pool is shut down")
            if self._idle:
                self._idle.pop().hand(work)
                return
            self._waiting.append(work)
            if len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}_{len(self._threads)}", args=(_Thread(),)
                )
                self._threads.append(thread)
                thread.start()


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


def _own_connections() -> list[tuple[BaseDatabaseWrapper, Callable[[], bool] | None]]:
    """This thread's connection of each database, looked up once: each lookup through Django's `connections`
    goes through asgiref's thread-local storage, and Django's `close_old_connections` makes four of them a
    hop (a twentieth of a call's CPU). Each comes with how to tell whether the thread may keep it to its next hop
    though Django would end it (`_kept_between_hops`), or None."""
    held: list[tuple[BaseDatabaseWrapper, Callable[[], bool] | None]] | None = getattr(_thread, "connections", None)
    if held is None:
        held = _thread.connections = [(connection, _kept_between_hops(connection)) for connection in connections.all()]
    return held


def _kept_between_hops(connection: BaseDatabaseWrapper) -> Callable[[], bool] | None:
    """For a connection lent by Django's PostgreSQL pool, its backend's check that it is idle, no transaction open
    on the server (`forge_core.postgresql`): such a connection stays with this thread between hops. Django hands it
    back to the pool at the end of every request (its pool wants `CONN_MAX_AGE=0`), and the next hop's first
    statement took it again through `connect()`: its parameters built again, the pool's `getconn`, its set-up, a
    seventh of a call's instructions on PostgreSQL (docs/PERFORMANCE.md). The threads that keep one are bounded
    (`FORGE_WORKERS` and `FORGE_VIEW_WORKERS`), so this holds only while together they stay below the pool's maximum,
    leaving connections for the threads that take one per use (Channels' and asgiref's executors, `runmcp`'s loops);
    else each hop takes one from the pool and gives it back, as Django does (`manage.py check` warns, forge.W009)."""
    kept_idle: Callable[[], bool] | None = getattr(connection, "kept_idle", None)
    pool = getattr(connection, "pool", None)
    if kept_idle is None or pool is None:
        return None
    return kept_idle if pool.max_size > settings.FORGE_WORKERS + settings.FORGE_VIEW_WORKERS else None


def _upkeep() -> None:
    """What Django does at the edges of a request: close a connection that errors made unusable or that is past
    its `CONN_MAX_AGE` (on PostgreSQL, with Django's pool, that hands it back to the pool).

    An open connection with nothing to look at (its configured autocommit, no error since its last commit or
    rollback, no maximum age, or a pooled connection this thread keeps, `_kept_between_hops`) only has its health
    check marked due, as Django's `close_if_unusable_or_obsolete` would: Django's reads the autocommit through two
    calls that each ask whether an event loop runs in this thread (an exception raised and caught each time), a
    third of a hop's own cost. Any other connection, or a backend with its own `close_if_unusable_or_obsolete`, goes
    through Django's. A pooled connection kept this way is still handed back after an error or with a transaction
    left open, and a dead one is noticed by the error its next statement raises (the pool's own connections are not
    checked before they are lent either)."""
    for connection, kept_idle in _own_connections():
        if (
            connection.connection is not None
            and (connection.close_at is None or (kept_idle is not None and kept_idle()))
            and not connection.errors_occurred
            and connection.autocommit == connection.settings_dict["AUTOCOMMIT"]
            and type(connection).close_if_unusable_or_obsolete is _DJANGOS_UPKEEP
        ):
            connection.health_check_done = False  # type: ignore[attr-defined]  # not in django-stubs
        else:
            connection.close_if_unusable_or_obsolete()


def _let_go() -> None:
    """At a pool thread's end, the connections it kept go back (to Django's pool, which would otherwise count them
    as lent for good)."""
    for connection, _kept_idle in getattr(_thread, "connections", ()):
        with contextlib.suppress(DatabaseError):  # a dead one: the pool drops it either way
            connection.close()


_DJANGOS_UPKEEP = BaseDatabaseWrapper.close_if_unusable_or_obsolete


class _Hop(_Work):
    """Work handed from an event loop (`in_pool`): the coroutine that handed it awaits an asyncio future, which the
    pool thread settles with one `call_soon_threadsafe` on that loop. asgiref's `SyncToAsync` went through
    `run_in_executor`, a concurrent future chained to an asyncio one under `asyncio.shield`, and copied the
    context's variables in and out: a hop of nothing cost 63 us of CPU that way, 25 this way (docs/PERFORMANCE.md)."""

    __slots__ = ("context", "loop", "waiter")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.loop = loop
        self.waiter: asyncio.Future[Any] = loop.create_future()
        self.context = contextvars.copy_context()

    def start(self) -> bool:
        return not self.waiter.cancelled()

    def call(self) -> Any:
        # What asgiref records for a thread it runs sync code in: `async_to_sync` there (Django running an async
        # view, `forge_core.live`) reaches this loop through it. A pool thread serves one loop (a forked child has
        # none of its threads), so it is recorded once, not with a `getpid` system call on every hop.
        recorded = SyncToAsync.threadlocal
        if getattr(recorded, "main_event_loop", None) is not self.loop:
            recorded.main_event_loop, recorded.main_event_loop_pid = self.loop, os.getpid()
        recorded.task_context = None
        _upkeep()
        try:
            # In a copy of the caller's context, as asgiref runs it, with the caller's `asgiref.local.Local` values
            # made this thread's (Django's script prefix, which its ASGI handler sets on the loop).
            return self.context.run(self._call_here)
        finally:
            _upkeep()

    def _call_here(self) -> Any:
        _restore_context(self.context)
        return self.fn(*self.args, **self.kwargs)

    def settle(self, result: Any, exc: BaseException | None) -> None:
        # The pool thread still holds the GIL here while the loop it wakes wants it: as little as possible
        # after the wake-up (a `try` costs nothing, `contextlib.suppress` is a Python object and two calls).
        try:
            self.loop.call_soon_threadsafe(_settle, self.waiter, result, exc)
        except RuntimeError:  # the loop has closed: nobody is left to tell
            return


def _settle(waiter: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if waiter.cancelled():  # the coroutine that handed the work over was cancelled meanwhile
        return
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(result)


def hop_into(work_pool: LastIdleFirst, func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """`func` as a coroutine function that runs in `work_pool`, with the connection upkeep around it. Cancelling
    the coroutine does not stop the work, which finishes in its thread, as with asgiref."""

    async def hop(*args: Any, **kwargs: Any) -> Any:
        work = _Hop(asyncio.get_running_loop(), func, args, kwargs)
        work_pool.hand(work)
        return await work.waiter

    return hop


@functools.cache  # made once per function and pool
def in_pool(func: Callable[..., Any], name: str = "forge-work") -> Callable[..., Awaitable[Any]]:
    """`func` as a coroutine function that runs in the pool `name` (`hop_into`)."""
    return hop_into(pool(name), func)
