"""The pool MCP exchanges hop into (forge_core.workers): the work runs in one of its threads, its answer or its
exception comes back, and the thread's database connection is kept up around it as Django does per request."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import anyio
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections

from forge_core import workers
from forge_core.workers import LastIdleFirst, hop_into, in_pool

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def _where() -> str:
    return threading.current_thread().name


def _fails() -> None:
    raise LookupError("the work failed")


async def test_the_work_runs_in_a_pool_thread_and_its_answer_comes_back():
    assert (await in_pool(_where)()).startswith("forge-work")


async def test_the_work_s_exception_comes_back_as_it_was_raised():
    with pytest.raises(LookupError, match="the work failed"):
        await in_pool(_fails)()


def _open_connection() -> object:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return connection.connection


@pytest.fixture
def one_thread():
    made = LastIdleFirst(1, "forge-work-test")
    yield lambda func: hop_into(made, func)
    made.shutdown()


async def test_a_healthy_connection_stays_open_from_one_hop_to_the_next(one_thread):
    opened = await one_thread(_open_connection)()

    assert await one_thread(lambda: connection.connection)() is opened


async def test_a_connection_errors_left_unusable_is_closed_when_the_work_ends(one_thread):
    closed = []

    def break_it() -> None:
        _open_connection()
        connection.errors_occurred = True
        connection.is_usable = lambda: False  # as after the database went away mid-call
        connection.close = lambda: closed.append(threading.current_thread().name)

    def mend() -> None:
        del connection.is_usable, connection.close
        connection.errors_occurred = False

    try:
        await one_thread(break_it)()
        assert closed and closed[0].startswith("forge-work-test")
    finally:
        await one_thread(mend)()


def _upkeep_checks(monkeypatch) -> list[str]:
    """Count Django's own per-request check of this thread's connection (the autocommit read it starts with)."""
    asked: list[str] = []
    db = connections[DEFAULT_DB_ALIAS]
    assert db in [own for own, _kept_idle in workers._own_connections()]
    get_autocommit = db.get_autocommit

    def counted():
        asked.append("get_autocommit")
        return get_autocommit()

    monkeypatch.setattr(db, "get_autocommit", counted)
    return asked


def test_the_upkeep_of_a_healthy_kept_connection_only_marks_its_health_check_due(monkeypatch):
    _open_connection()
    db = connections[DEFAULT_DB_ALIAS]
    opened = db.connection
    monkeypatch.setattr(db, "health_check_done", True)
    asked = _upkeep_checks(monkeypatch)

    workers._upkeep()

    assert asked == [] and db.connection is opened and db.health_check_done is False


@pytest.mark.parametrize("why", ["errors", "autocommit", "max age", "transaction open"])
def test_the_upkeep_of_any_other_connection_is_djangos_and_closes_what_it_would(monkeypatch, why):
    pooled = connection.vendor == "postgresql"
    if why == "max age" and pooled:
        pytest.skip("a pooled connection has no age of its own: Django's pool wants CONN_MAX_AGE=0")
    if why == "transaction open" and not pooled:
        pytest.skip("kept by its age alone on the embedded database, as Django keeps a persistent connection")
    _open_connection()
    db = connections[DEFAULT_DB_ALIAS]
    asked = _upkeep_checks(monkeypatch)
    closed: list[bool] = []
    monkeypatch.setattr(db, "close", lambda: closed.append(True))
    if why == "errors":
        monkeypatch.setattr(db, "errors_occurred", True)
        monkeypatch.setattr(db, "is_usable", lambda: False)
    elif why == "autocommit":
        monkeypatch.setattr(db, "autocommit", not db.settings_dict["AUTOCOMMIT"])
    elif why == "max age":
        monkeypatch.setattr(db, "close_at", time.monotonic() - 1)
    else:
        db.connection.execute("BEGIN")  # as a script whose COMMIT never came would leave it

    try:
        workers._upkeep()
    finally:
        if why == "transaction open":
            db.connection.rollback()

    assert asked == ["get_autocommit"] and closed == [True]


on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="Django's PostgreSQL pool")


@pytest.fixture
def pool_lendings(monkeypatch) -> tuple[list[object], list[object]]:
    """The connections Django's pool lends (`getconn`) and gets back (`putconn`) from now on."""
    from psycopg_pool import ConnectionPool

    lent: list[object] = []
    back: list[object] = []
    getconn, putconn = ConnectionPool.getconn, ConnectionPool.putconn

    def counted_getconn(self, *args, **kwargs):
        lent.append(made := getconn(self, *args, **kwargs))
        return made

    def counted_putconn(self, conn):
        back.append(conn)
        putconn(self, conn)

    monkeypatch.setattr(ConnectionPool, "getconn", counted_getconn)
    monkeypatch.setattr(ConnectionPool, "putconn", counted_putconn)
    return lent, back


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@on_postgresql
async def test_a_pool_thread_takes_one_pooled_connection_for_many_hops_and_gives_it_back_as_it_ends(pool_lendings):
    lent, back = pool_lendings
    made = LastIdleFirst(1, "forge-work-test")
    try:
        pids = {await hop_into(made, _backend_pid)() for _ in range(10)}
        assert len(lent) == 1 and back == [] and len(pids) == 1
    finally:
        made.shutdown()

    assert back == lent


@on_postgresql
async def test_pool_threads_that_could_hold_the_whole_pool_take_a_connection_per_hop(pool_lendings, settings):
    lent, back = pool_lendings
    settings.FORGE_WORKERS = settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    made = LastIdleFirst(1, "forge-work-test")
    try:
        for _ in range(3):
            await hop_into(made, _backend_pid)()
    finally:
        made.shutdown()

    assert len(lent) == 3 and back == lent


def _end_session(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


@on_postgresql
async def test_a_kept_connection_the_server_ended_fails_its_hop_then_goes_back_for_a_new_one(one_thread, pool_lendings):
    lent, back = pool_lendings
    first = await one_thread(_backend_pid)()
    await sync_to_async(_end_session)(first)

    with pytest.raises(OperationalError):
        await one_thread(_backend_pid)()

    assert back == lent[:1]
    assert await one_thread(_backend_pid)() != first


@pytest.fixture
def two_threads():
    made = LastIdleFirst(2, "forge-test-pool")
    yield made
    made.shutdown()


def _both_busy(pool: LastIdleFirst) -> list[str]:
    """Two pieces of work side by side: each waits until the other has started (bounded), so two threads run."""
    started = threading.Barrier(2, timeout=5)

    def meet() -> str:
        started.wait()
        return threading.current_thread().name

    return sorted(future.result(timeout=5) for future in [pool.submit(meet), pool.submit(meet)])


def test_work_beyond_the_idle_threads_runs_beside_the_busy_one_up_to_the_pool_s_size(two_threads):
    assert _both_busy(two_threads) == ["forge-test-pool_0", "forge-test-pool_1"]

    release = threading.Event()
    first = two_threads.submit(release.wait, 5)
    second = two_threads.submit(release.wait, 5)
    third = two_threads.submit(threading.current_thread)  # both threads busy: it waits for the first to finish

    assert not third.done()
    release.set()
    assert first.result(timeout=5) and second.result(timeout=5)
    assert third.result(timeout=5).name.startswith("forge-test-pool")


def test_back_to_back_work_runs_on_the_thread_that_went_idle_last(two_threads):
    _both_busy(two_threads)

    ran_on = {two_threads.submit(_where).result(timeout=5) for _ in range(20)}

    assert len(ran_on) == 1  # ThreadPoolExecutor woke its two idle threads in turn


def test_the_work_s_answer_and_exception_come_back_from_the_pool(two_threads):
    assert two_threads.submit(sum, [1, 2, 3]).result(timeout=5) == 6
    with pytest.raises(LookupError, match="the work failed"):
        two_threads.submit(_fails).result(timeout=5)


def test_a_pool_shut_down_finishes_its_work_ends_its_threads_and_takes_no_more(two_threads):
    release = threading.Event()
    busy = two_threads.submit(release.wait, 5)
    queued = [two_threads.submit(_where) for _ in range(3)]
    release.set()

    two_threads.shutdown(wait=True)

    assert busy.result(timeout=0) is True
    assert all(future.result(timeout=0).startswith("forge-test-pool") for future in queued)
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("forge-test-pool")]
    with pytest.raises(RuntimeError, match="shut down"):
        two_threads.submit(_where)


_asked = contextvars.ContextVar("asked", default="nobody")


def _read_then_set() -> str:
    seen = _asked.get()
    _asked.set("the work")
    return seen


async def test_the_work_sees_its_caller_s_context_and_keeps_what_it_sets_to_itself():
    _asked.set("the caller")

    assert await in_pool(_read_then_set)() == "the caller"
    assert _asked.get() == "the caller"


async def _on_the_loop() -> str:
    return threading.current_thread().name


def _back_to_the_loop() -> str:
    return async_to_sync(_on_the_loop)()


async def test_async_code_the_work_runs_goes_back_to_the_loop_it_came_from():
    assert await in_pool(_back_to_the_loop)() == threading.current_thread().name


async def test_a_cancelled_caller_leaves_its_work_to_finish_and_the_pool_to_serve(one_thread):
    loop, began = asyncio.get_running_loop(), asyncio.Event()
    release, finished = threading.Event(), threading.Event()

    def slow() -> None:
        loop.call_soon_threadsafe(began.set)
        release.wait(5)
        finished.set()

    waiting = asyncio.ensure_future(one_thread(slow)())
    with anyio.fail_after(5):
        await began.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()

    with anyio.fail_after(5):
        assert (await one_thread(_where)()).startswith("forge-work-test")  # one thread: after the slow work
    assert finished.is_set()
