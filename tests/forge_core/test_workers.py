"""The pool MCP exchanges hop into (forge_core.workers): the work runs in one of its threads, its answer or its
exception comes back, and the thread's database connection is kept up around it as Django does per request."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from forge_core.workers import _PoolHop, in_pool

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
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forge-work-test")
    yield lambda func: _PoolHop(func, thread_sensitive=False, executor=executor)
    executor.shutdown()


async def test_a_healthy_connection_stays_open_from_one_hop_to_the_next(one_thread, settings):
    if settings.DATABASES["default"].get("CONN_MAX_AGE", 0) is not None:
        pytest.skip("persistent on the embedded database only: Django's PostgreSQL pool lends a connection per hop")
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
