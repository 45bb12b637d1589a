"""What one approval costs the deciding process, in process: statements, psycopg waits, and (under callgrind)
instructions, or a cProfile by own time.

Each approval runs as a request makes it: `do_approve_confirmation` to the executed outcome and the answer's
`ConfirmationDetail(...).data`, a user read fresh, the kept result of `projects.capability` cleared first (as when
another process made the preview). A warm approval first, then `FORGE_PROBE_N` (10) counted ones. It runs as a
pytest module on the tests' fixtures (the database of DATABASE_URL, PostgreSQL or SQLite):

    .venv/bin/python -m pytest bench/approval_instructions.py -q -s -p no:cacheprovider

Instructions: run that under `valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.%p`; with
FORGE_PROBE_CALLGRIND=1 the probe switches the count on only around each approval (valgrind.h's
CALLGRIND_START/STOP_INSTRUMENTATION, built with `cc`, called through ctypes); the output file's total
(`callgrind_annotate`) divided by FORGE_PROBE_N is the figure.
The CPU figure is this thread's (`time.thread_time`), the median over the approvals.
`FORGE_PROBE_PROFILE=1` prints a cProfile of the counted approvals by own time instead.
"""

from __future__ import annotations

import cProfile
import ctypes
import gc
import os
import pstats
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from confirmations.api import ConfirmationDetail
from confirmations.models import ConfirmationState
from confirmations.services import do_approve_confirmation
from projects import capability
from tests.confirmations.operator_helpers import ask

# The tests' fixtures (a cast of users, a registered project, the audit set up as the tests have it).
pytest_plugins = ["tests.conftest", "tests.confirmations.conftest"]
pytestmark = pytest.mark.django_db(transaction=True)


_SWITCH_SOURCE = """
#include <valgrind/callgrind.h>
void callgrind_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void callgrind_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


def _callgrind_switches() -> tuple[Callable[[], None], Callable[[], None]]:
    """Callgrind's start and stop of instrumentation (valgrind.h's client requests, a no-op outside valgrind),
    built with the C compiler into a small library: ctypes cannot send a client request itself. Both do nothing
    unless FORGE_PROBE_CALLGRIND is set."""
    if not os.environ.get("FORGE_PROBE_CALLGRIND"):
        return (lambda: None), (lambda: None)
    folder = Path(tempfile.mkdtemp(prefix="forge-callgrind-"))
    (folder / "switch.c").write_text(_SWITCH_SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", folder / "switch.so", folder / "switch.c"], check=True)
    library = ctypes.CDLL(str(folder / "switch.so"))
    return library.callgrind_start, library.callgrind_stop


@contextmanager
def _psycopg_waits() -> Iterator[list[int]]:
    counted = [0]
    if connection.vendor != "postgresql":
        yield counted
        return
    import psycopg

    original = psycopg.Connection.wait

    def wait(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted[0] += 1
        return original(self, *args, **kwargs)

    psycopg.Connection.wait = wait  # type: ignore[method-assign]
    try:
        yield counted
    finally:
        psycopg.Connection.wait = original  # type: ignore[method-assign]


def test_probe_approvals(cast, project) -> None:
    start, stop = _callgrind_switches()
    n = int(os.environ.get("FORGE_PROBE_N", "10"))
    # By the thread's CPU time, not the wall: a wall-clock profile puts every round trip's wait on the call sending it.
    profile = cProfile.Profile(time.thread_time) if os.environ.get("FORGE_PROBE_PROFILE") else None
    warm = ask(cast.caretaker, project, name="warm")
    do_approve_confirmation(warm.pk, acting_user=cast.operator.user)
    statements = waits = 0
    cpu: list[float] = []
    for index in range(n):
        pending = ask(cast.caretaker, project, name=f"v{index}")
        capability._results.clear()
        operator = User.objects.get(pk=cast.operator.user.pk)
        # A full collection now, outside the count: which approval a later one fell in would move the figure by
        # more than the cuts it measures.
        gc.collect()
        with CaptureQueriesContext(connection) as queries, _psycopg_waits() as counted:
            if profile is not None:
                profile.enable()
            start()
            began = time.thread_time()
            done = do_approve_confirmation(pending.pk, acting_user=operator)
            ConfirmationDetail(done).data  # noqa: B018  # the answer, as the view makes it
            cpu.append(time.thread_time() - began)
            stop()
            if profile is not None:
                profile.disable()
        assert done.state == ConfirmationState.EXECUTED, done.outcome
        statements += len(queries.captured_queries)
        waits += counted[0]
        if os.environ.get("FORGE_PRINT_STATEMENTS") and index == 0:
            for query in queries.captured_queries:
                print(query["sql"][:200])
    print(
        f"\n{connection.vendor}: {n} approvals, {statements / n:.1f} statements, {waits / n:.1f} psycopg waits, "
        f"CPU {sorted(cpu)[len(cpu) // 2] * 1000:.2f} ms (median) each"
    )
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(45)
        if os.environ.get("FORGE_PROBE_PROFILE_OUT"):
            profile.dump_stats(os.environ["FORGE_PROBE_PROFILE_OUT"])
