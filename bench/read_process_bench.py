"""The read processes (``projects.read_pool``) against reads in process: the same answers, what a small read
costs the server, and what a heavy read leaves of the server's GIL.

* **answers**: every read of each fixture and of the generated project (``projects_bench.generate``, 500 POUs,
  ``--variables``), as ``tests/projects/test_read_pool.every_read`` enumerates them (cursors and offsets
  followed, refusals included; of the generated project the first ``--elements`` element ids and 20 pages of
  each paged read), answered in process
  and by a read process, one SHA-256 over each way's outcomes.
* **small reads**: ``get_element`` of a variable and of a POU, ``find`` of one name, ``--calls`` each, in process
  and through the pool alternated twice: the server thread's CPU (``time.thread_time``) and wall time per read.
  The document is already held on both sides; the file's read and fingerprint, the same either way, are left out.
* **heavy read**: ``check`` (``--checks`` calls) in process and through the pool, beside a thread that sleeps
  1 ms at a time and notes how late it wakes (a request's thread-hand-off waiting for the GIL), the interpreter
  set as ``runmcp`` sets it: the server thread's CPU per check and the watcher's lateness.

Wall figures move with the machine's load (printed): alternate and compare within a run.

    .venv/bin/python bench/read_process_bench.py
    .venv/bin/python bench/read_process_bench.py --variables 5000 --calls 200 --checks 2
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")

import django  # noqa: E402

django.setup()

from projects_bench import generate  # noqa: E402

from projects import read_pool  # noqa: E402
from projects.document_reads import READS  # noqa: E402
from projects.plcopen import documents  # noqa: E402
from tests.projects.conftest import FIXTURES, fixture_bytes  # noqa: E402
from tests.projects.test_read_pool import Request, every_read, outcome  # noqa: E402

Run = Callable[..., Any]


def ways(pool: read_pool.ReadPool, data: bytes) -> tuple[Run, Run]:
    """The same read in process (on a document parsed here) and through the pool."""
    document = documents.load(data)
    fingerprint = documents.fingerprint(data)

    def in_process(name: str, *args: Any, **kwargs: Any) -> Any:
        return READS[name](document, *args, **kwargs)

    def in_pool(name: str, *args: Any, **kwargs: Any) -> Any:
        return pool.run(fingerprint, lambda: data, name, *args, **kwargs)

    return in_process, in_pool


def digest(run: Run, requests: list[Request]) -> str:
    hashed = hashlib.sha256()
    for request in requests:
        hashed.update(repr(outcome(run, request)).encode())
    return hashed.hexdigest()


def answers(pool: read_pool.ReadPool, generated: bytes, elements: int) -> None:
    print("answers: one SHA-256 over every read's outcome, in process / read process")
    projects = [(name, fixture_bytes(name), {}) for name in FIXTURES]
    projects.append(("generated", generated, {"elements": elements, "page": 200, "chunk": 32_000, "pages": 20}))
    for name, data, options in projects:
        in_process, in_pool = ways(pool, data)
        requests = every_read(documents.load(data), **options)
        here, there = digest(in_process, requests), digest(in_pool, requests)
        print(
            f"  {name:<20} {len(requests):>6} reads  {here[:16]} / {there[:16]}  {'same' if here == there else 'DIFFERENT'}"
        )


def per_read(run: Run, request: Request, calls: int) -> tuple[float, float]:
    """Median server-thread CPU and wall time of one read, in microseconds."""
    name, args, kwargs = request
    cpu, wall = [], []
    for _ in range(calls):
        cpu_start, wall_start = time.thread_time_ns(), time.perf_counter_ns()
        run(name, *args, **kwargs)
        cpu.append(time.thread_time_ns() - cpu_start)
        wall.append(time.perf_counter_ns() - wall_start)
    return statistics.median(cpu) / 1000, statistics.median(wall) / 1000


def small_reads(pool: read_pool.ReadPool, data: bytes, calls: int) -> None:
    in_process, in_pool = ways(pool, data)
    reads: list[tuple[str, Request]] = [
        ("get_element variable", ("get_element", ("pou/Pou_1/var/Input_1_0",), {})),
        ("get_element POU", ("get_element", ("pou/Pou_1",), {})),
        ("find one name", ("find", (), {"text": "Local_7_3", "limit": 10})),
    ]
    print(f"small reads: server thread CPU / wall per read, median of {calls}, us (load {os.getloadavg()[0]:.2f})")
    for label, request in reads:
        in_pool(request[0], *request[1], **request[2])  # the process parses and indexes it once
        in_process(request[0], *request[1], **request[2])
        figures = [per_read(run, request, calls) for run in (in_process, in_pool, in_process, in_pool)]
        shown = "  ".join(f"{cpu:8.0f} / {wall:8.0f}" for cpu, wall in figures)
        print(f"  {label:<22} in process, pool, in process, pool: {shown}")


def heavy_read(pool: read_pool.ReadPool, data: bytes, checks: int) -> None:
    in_process, in_pool = ways(pool, data)
    gc.collect()
    gc.freeze()
    gc.set_threshold(5_000, *gc.get_threshold()[1:])
    sys.setswitchinterval(0.0002)
    print(f"heavy read: check, {checks} calls, beside a 1 ms sleeper (load {os.getloadavg()[0]:.2f})")
    for label, run in (("in process", in_process), ("read process", in_pool)) * 2:
        run("check", limit=50, offset=0)  # warm: parse, index, analyses
        late: list[float] = []
        stop = threading.Event()

        def watch(late: list[float] = late, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                start = time.perf_counter()
                time.sleep(0.001)
                late.append((time.perf_counter() - start - 0.001) * 1000)

        watcher = threading.Thread(target=watch)
        watcher.start()
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(checks):
            run("check", limit=50, offset=0)
        cpu_ms, wall_ms = (time.thread_time() - cpu) * 1000 / checks, (time.perf_counter() - wall) * 1000 / checks
        stop.set()
        watcher.join()
        late.sort()
        n = len(late)
        print(
            f"  {label:<13} server thread CPU {cpu_ms:7.1f} ms, wall {wall_ms:6.0f} ms a check; sleeper lateness ms "
            f"p50 {late[n // 2]:.2f} p99 {late[int(n * 0.99)]:.2f} max {late[-1]:.2f}, {sum(x > 2 for x in late)} "
            f"of {n} later than 2 ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variables", type=int, default=50_000)
    parser.add_argument("--elements", type=int, default=300, help="element ids read of the generated project (300)")
    parser.add_argument("--calls", type=int, default=500, help="calls of each small read a way and round (500)")
    parser.add_argument("--checks", type=int, default=4, help="checks a way and round (4)")
    parser.add_argument("--skip-answers", action="store_true")
    args = parser.parse_args()
    generated = generate(500, args.variables)
    pool = read_pool.ReadPool(1)
    pool.start()
    try:
        if not args.skip_answers:
            answers(pool, generated, args.elements)
        small_reads(pool, generated, args.calls)
        heavy_read(pool, generated, args.checks)
    finally:
        pool.stop()


if __name__ == "__main__":
    main()
