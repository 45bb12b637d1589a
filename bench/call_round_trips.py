"""What one sequential JSON `tools/call server_info` costs the process, in process: its round trips to the database
(psycopg's waits, each with the statement that made it; not counted under callgrind, where the counting would
be counted), its statements, and (under callgrind) its instructions.

Each call goes through `forge_site.asgi.application` as the tests drive it (Channels' `HttpCommunicator`, a session
opened first, the bearer token of the tests' operator), the hop into the worker pool and the group-committed audit
row included. `FORGE_PROBE_N` (20) counted calls after as many warm ones. It runs as a pytest module on the tests'
fixtures, on the database of DATABASE_URL (PostgreSQL) or SQLite:

    .venv/bin/python -m pytest bench/call_round_trips.py -q -s -p no:cacheprovider

Instructions: run that under `valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.%p` with
PYTHONHASHSEED=0 and FORGE_PROBE_CALLGRIND=1 (the count switched on only around the counted calls, as
`approval_instructions.py` does); the output file's total divided by FORGE_PROBE_N is the figure. With
FORGE_PRINT_STATEMENTS=1 the round trips of the first counted call are printed. With FORGE_PROBE_PIECE=module:function
(`audit.services:_append_alone`, `access.hotpath:PreparedSelect.fetch`) the count is switched on only inside that
function during the counted calls.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import importlib
import os
import pstats
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from approval_instructions import _callgrind_switches
from django.db import connection

from tests.mcp_api.helpers import open_session, post, rpc

pytest_plugins = ["tests.conftest"]
pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def _round_trips() -> Iterator[list[str]]:
    """Each psycopg wait for the server from now on (any thread), named by the statement or command that made it."""
    made: list[str] = []
    if connection.vendor != "postgresql" or os.environ.get("FORGE_PROBE_CALLGRIND"):  # counted, the patch would count
        yield made
        return
    last = ["?"]
    execute, cursor_execute, wait = psycopg.Connection.execute, psycopg.Cursor.execute, psycopg.Connection.wait

    def connection_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        last[0] = str(query)[:150]
        return execute(self, query, *args, **kwargs)

    def cursor_execute_named(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        last[0] = str(query)[:150]
        return cursor_execute(self, query, *args, **kwargs)

    def counted_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(last[0])
        last[0] = "(commit, rollback or another wait)"
        return wait(self, *args, **kwargs)

    psycopg.Connection.execute = connection_execute  # type: ignore[method-assign]
    psycopg.Cursor.execute = cursor_execute_named  # type: ignore[method-assign]
    psycopg.Connection.wait = counted_wait  # type: ignore[method-assign]
    try:
        yield made
    finally:
        psycopg.Connection.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.execute = cursor_execute  # type: ignore[method-assign]
        psycopg.Connection.wait = wait  # type: ignore[method-assign]


# With FORGE_PROBE_PROFILE=1 and a piece, a cProfile of the piece's calls (by the thread's CPU time), printed at the end.
PROFILE = cProfile.Profile(time.thread_time) if os.environ.get("FORGE_PROBE_PROFILE") else None


def _counted_piece(monkeypatch: pytest.MonkeyPatch, piece: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """With `piece` ("module:function" or "module:Class.method"), callgrind's count switched on only inside that
    function while a counted call runs, and nothing around the call; else the switches for the whole call."""
    start, stop = _callgrind_switches()
    if not piece:
        return start, stop
    counting = [False]
    module_name, _, qualified = piece.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualified.split(".")
    for part in path:
        owner = getattr(owner, part)
    real = getattr(owner, name)

    @functools.wraps(real)
    def counted(*args: Any, **kwargs: Any) -> Any:
        if not counting[0]:
            return real(*args, **kwargs)
        start()
        if PROFILE is not None:
            PROFILE.enable()
        try:
            return real(*args, **kwargs)
        finally:
            if PROFILE is not None:
                PROFILE.disable()
            stop()

    monkeypatch.setattr(owner, name, counted)
    return functools.partial(counting.__setitem__, 0, True), functools.partial(counting.__setitem__, 0, False)


def test_probe_calls(cast, monkeypatch) -> None:
    start, stop = _counted_piece(monkeypatch, os.environ.get("FORGE_PROBE_PIECE", ""))
    n = int(os.environ.get("FORGE_PROBE_N", "20"))
    token = cast.operator.raw_token
    message = rpc("tools/call", {"name": "server_info"})

    async def calls() -> list[list[str]]:
        session_id = await open_session(token)
        for _ in range(n):
            assert (await post(token, message, session_id=session_id)).status == 200
        made = []
        for _ in range(n):
            with _round_trips() as trips:
                start()
                response = await post(token, message, session_id=session_id)
                stop()
            assert response.status == 200
            made.append(trips)
        return made

    made = asyncio.run(calls())
    print(
        f"\n{connection.vendor}: {n} calls, {sum(map(len, made)) / n:.2f} round trips each (none counted under callgrind)"
    )
    if PROFILE is not None:
        pstats.Stats(PROFILE).sort_stats("cumulative").print_stats(40)
    if os.environ.get("FORGE_PRINT_STATEMENTS"):
        for trip in made[0]:
            print("  ", trip)
