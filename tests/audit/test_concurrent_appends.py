"""Appends from many threads in several processes make one gapless chain that verifies.

Two `manage.py shell` processes share a data dir (its keys and mirror) and a database: a SQLite file
there, or on the scale-out path a scratch PostgreSQL database made for the run (the processes run
outside pytest's test database). Each runs eight threads that call `record()` 500 times. The processes
wait on a line from the test before they start, so their threads contend from the first append.
"""

from __future__ import annotations

import itertools
import json
import selectors
import subprocess
import sys
from collections import Counter

import pytest

from tests.live import ROOT, manage, scratch_database, server_env

pytestmark = pytest.mark.live

PROCESSES = 2
THREADS = 8
EVENTS_PER_THREAD = 500
TOTAL = PROCESSES * THREADS * EVENTS_PER_THREAD
BOUND = 300  # seconds for one process to append its share; a few seconds on a laptop

APPEND = """
import sys, threading
from django.db import connection
from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable

failures = []

def append(writer):
    try:
        for number in range({events}):
            record(EventKind.TOOL_CALL, tool="test.concurrent", arguments={{"number": number}}, called_by=writer)
    except AuditUnavailable as exc:
        failures.append(f"{{writer}}: {{exc}}")
    finally:
        connection.close()

threads = [threading.Thread(target=append, args=("{process}-t%d" % i,)) for i in range({threads})]
print("ready", flush=True)
sys.stdin.readline()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
sys.exit("\\n".join(failures) or None)
"""

WRITERS_IN_ORDER = """
import json
from audit.models import AuditEvent
print(json.dumps(list(AuditEvent.objects.order_by("seq").values_list("seq", "called_by"))))
"""


def start_appending(env: dict[str, str], process: str) -> subprocess.Popen:
    code = APPEND.format(events=EVENTS_PER_THREAD, threads=THREADS, process=process)
    return subprocess.Popen(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until_ready(process: subprocess.Popen, bound: float = 60.0) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(bound), f"the appender did not get ready within {bound}s"
    assert process.stdout.readline().strip() == "ready", process.communicate()[1]


def test_eight_threads_in_each_of_two_processes_append_one_gapless_chain_that_verifies(tmp_path):
    with scratch_database() as database:
        env = server_env(tmp_path, FORGE_AUDIT_CHECKPOINT_EVERY="1000", **database)
        manage(env, "migrate", "--noinput", "-v", "0")
        processes = [start_appending(env, f"p{number}") for number in range(PROCESSES)]
        try:
            for process in processes:
                wait_until_ready(process)
            for process in processes:
                process.stdin.write("go\n")
                process.stdin.flush()
            for process in processes:
                _, errors = process.communicate(timeout=BOUND)
                assert process.returncode == 0, errors
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()

        verified = manage(env, "audit_verify").strip()
        written = json.loads(manage(env, "shell", "--no-imports", "-c", WRITERS_IN_ORDER))

    assert verified == f"ok {TOTAL} events, {TOTAL // 1000} checkpoints"
    assert [seq for seq, _ in written] == list(range(1, TOTAL + 1))
    assert Counter(writer for _, writer in written) == {
        f"p{p}-t{t}": EVENTS_PER_THREAD for p in range(PROCESSES) for t in range(THREADS)
    }
    # The processes took turns on the chain lock, rather than one appending all its events first.
    turns = sum(1 for (_, a), (_, b) in itertools.pairwise(written) if a[:2] != b[:2])
    assert turns > 1
