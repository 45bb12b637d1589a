"""What a row of the audit append costs in process: instructions (under callgrind) or a cProfile by own time, for a
batch of eight rows, a batch of one, and eight `record()` threads.

Batches: one thread builds each row as `record()` does (`_event`) and appends them through `_append_alone`, the
group commit's batch, `FORGE_PROBE_BATCHES` (50) batches of eight and four times that of one, after 50 warm ones.
Threads: eight threads call `record()` `FORGE_PROBE_EACH` (100) times each, after a batch of one row on each
thread's connection and 20 warm calls each; valgrind's thread scheduling makes the batches, so their mean size is
printed beside the figure (counted by a wrapper around `_append_alone`, which is in the count too). A pytest module
on the tests' fixtures, on the database that DATABASE_URL names (SQLite by default):

    PYTHONHASHSEED=0 FORGE_PROBE_CALLGRIND=1 valgrind --tool=callgrind --instr-atstart=no \\
        --callgrind-out-file=/tmp/cg.%p .venv/bin/python -m pytest bench/audit_instructions.py -q -s \\
        -p no:cacheprovider -k batch_of_8

One probe a valgrind run (`-k batch_of_8`, `-k batch_of_1`, `-k threads`): the output file's total
(`callgrind_annotate`) divided by the rows printed is the figure. `FORGE_PROBE_PROFILE=1` prints a cProfile by own
time of the counted rows instead (of the batches' thread only). CPU per row is printed too (the process's, so all
threads'): indicative on a busy machine.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import threading
import time
from typing import Any

import pytest
from approval_instructions import _callgrind_switches
from django.db import DEFAULT_DB_ALIAS, connection, connections

from audit import services
from audit.models import EventKind

pytest_plugins = ["tests.conftest"]
pytestmark = pytest.mark.django_db(transaction=True)

WARM = 50
THREADS = 8


def _fields(writer: int, number: int) -> dict[str, Any]:
    """A read-only tool call's row, as `bench/audit_bench.py` appends it."""
    return {
        "tool": "server_info",
        "arguments": {"writer": writer, "n": number},
        "outcome": "ok",
        "called_by": "audit-bench",
        "session": f"bench-{writer}",
        "client_label": "audit-bench",
    }


def _report(what: str, rows: int, cpu: float, profile: cProfile.Profile | None) -> None:
    print(f"\n{connection.vendor}: {what}: {rows} rows counted, CPU {cpu / rows * 1e6:.1f} us a row")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)


@pytest.mark.parametrize("size", [8, 1], ids=["batch_of_8", "batch_of_1"])
def test_probe_batches(size: int) -> None:
    start, stop = _callgrind_switches()
    profile = cProfile.Profile(time.thread_time) if os.environ.get("FORGE_PROBE_PROFILE") else None
    db = connections[DEFAULT_DB_ALIAS]
    batches = int(os.environ.get("FORGE_PROBE_BATCHES", "50")) * (8 // size)

    def batch(number: int) -> None:
        events = [services._event(EventKind.TOOL_CALL, _fields(0, number * size + row)) for row in range(size)]
        services._append_alone(lambda: events, db)

    for number in range(WARM):
        batch(number)
    gc.collect()
    if profile is not None:
        profile.enable()
    start()
    began = time.thread_time()
    for number in range(WARM, WARM + batches):
        batch(number)
    cpu = time.thread_time() - began
    stop()
    if profile is not None:
        profile.disable()
    assert services.tree_size() == (WARM + batches) * size
    _report(f"batches of {size}", batches * size, cpu, profile)


def test_probe_threads() -> None:
    start, stop = _callgrind_switches()
    each = int(os.environ.get("FORGE_PROBE_EACH", "100"))
    warmed, go = threading.Barrier(THREADS + 1), threading.Barrier(THREADS + 1)
    batches = [0]
    real = services._append_alone

    def counted(take: Any, db: Any) -> None:
        batches[0] += 1
        real(take, db)

    def writer(index: int) -> None:
        try:
            # A batch on this thread's own connection first: a caller that leads no batch while warming up would
            # open its connection, read the schema and prepare the INSERTs in the count.
            services._append_alone(
                lambda: [services._event(EventKind.TOOL_CALL, _fields(index, -1))], connections[DEFAULT_DB_ALIAS]
            )
            for number in range(20):
                services.record(EventKind.TOOL_CALL, **_fields(index, number))
            warmed.wait()
            go.wait()
            for number in range(20, 20 + each):
                services.record(EventKind.TOOL_CALL, **_fields(index, number))
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    warmed.wait()
    gc.collect()
    services._append_alone = counted
    try:
        start()
        began = time.process_time()
        go.wait()
        for thread in threads:
            thread.join(timeout=600)
        cpu = time.process_time() - began
        stop()
    finally:
        services._append_alone = real
    rows = THREADS * each
    assert services.tree_size() == THREADS * (21 + each)
    _report(f"{THREADS} record() threads, {batches[0]} batches ({rows / batches[0]:.2f} rows each)", rows, cpu, None)
