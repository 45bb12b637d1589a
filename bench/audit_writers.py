"""Where the group commit's writers spend their time on SQLite: `audit.services.record` from threads in process.

`bench/audit_bench.py --parts appends` gives the rates; this says what one row costs at a number of writers and
where the wall clock goes besides CPU, on a freshly migrated data dir (a temporary `FORGE_DATA_DIR`, as the audit
bench makes one):

* the process's CPU a row (user and system), the cores it held on average, and its context switches a row;
* each writer thread's time on a CPU and waiting for one (`/proc/self/task/<tid>/schedstat`): a runnable thread
  that waits is the machine's load, not the code's;
* with `--phases`, the wall and CPU time a row of the batch's steps (each wrapped in a timer, which costs a few
  microseconds a call itself): the batch (`_append_alone`), its BEGIN and head read, INSERTs, mirror lines, the
  mirror's fsync, the commit, and the caller's own `_event`; then, per batch, how long its leader waited for its
  callers (from entering `_lead` to the batch's start: the gather) and how long from a batch's end to the next
  leader, how many gathers ran out (`GATHER_SECONDS`), and how often the next batch's leader was another thread
  (another connection: SQLite then reloads the pages another connection changed).

    .venv/bin/python bench/audit_writers.py                        # 8 writers, then 1, 5 s each
    .venv/bin/python bench/audit_writers.py --writers 8 --seconds 5 --phases --rounds 3
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from audit_bench import append, child_env

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parent.parent


class Phases:
    """Wall and CPU time of wrapped functions, and the batches' timeline."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.wall: collections.Counter[str] = collections.Counter()
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.leads: list[int] = []  # when a leader entered `_lead`
        self.batches: list[tuple[int, int, int, int]] = []  # start, end, rows, leader thread

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[name] += time.perf_counter_ns() - wall
                self.cpu[name] += time.thread_time_ns() - cpu
                self.calls[name] += 1

        return wrapper

    def install(self) -> None:
        from audit import mirror, services

        for name in ("_begin_alone", "_insert_alone", "_commit_alone", "_event", "_sealed_texts"):
            setattr(services, name, self.timed(name, getattr(services, name)))
        mirror.Mirror.append = self.timed("mirror lines", mirror.Mirror.append)  # type: ignore[method-assign]
        os.fsync = self.timed("mirror fsync", os.fsync)
        alone = self.timed("_append_alone (the batch)", services._append_alone)

        def batch(take: Any, db: Any) -> None:
            start = time.perf_counter_ns()
            taken: list[int] = []

            def counted_take() -> list[Any]:
                events = take()
                taken.append(len(events))
                return events

            try:
                alone(counted_take, db)
            finally:
                self.batches.append((start, time.perf_counter_ns(), sum(taken), threading.get_ident()))

        services._append_alone = batch
        lead = services._GroupCommit._lead

        def timed_lead(group: Any, me: Any) -> None:
            self.leads.append(time.perf_counter_ns())
            lead(group, me)

        services._GroupCommit._lead = timed_lead  # type: ignore[method-assign]

    def report(self, rows: int) -> None:
        for name in self.calls:
            print(
                f"  {name:28s} {self.calls[name]:7d} calls   wall {self.wall[name] / rows / 1e3:6.1f} us a row"
                f"   CPU {self.cpu[name] / rows / 1e3:6.1f} us a row"
            )
        gathers, gaps, changes = [], [], 0
        leads = iter(sorted(self.leads))
        lead = next(leads, None)
        previous: tuple[int, int, int, int] | None = None
        for batch in self.batches:
            entered = batch[0]
            while lead is not None and lead <= batch[0]:
                entered, lead = lead, next(leads, None)
            gathers.append(batch[0] - entered)
            if previous is not None:
                gaps.append(entered - previous[1])
                changes += previous[3] != batch[3]
            previous = batch
        count = len(self.batches)
        print(
            f"  batches {count}, {sum(b[2] for b in self.batches) / max(count, 1):.2f} rows each; gather mean "
            f"{statistics.mean(gathers) / 1e3:.0f} us (p50 {statistics.median(gathers) / 1e3:.0f}), "
            f"{sum(g >= 1e6 for g in gathers)} ran out; batch end to next leader mean "
            f"{statistics.mean(gaps or [0]) / 1e3:.0f} us (p50 {statistics.median(gaps or [0]) / 1e3:.0f}); "
            f"next leader another thread in {changes} of {max(count - 1, 0)}"
        )


def _schedstat(tid: int) -> tuple[int, ...]:
    with open(f"/proc/self/task/{tid}/schedstat") as file:
        return tuple(int(value) for value in file.read().split()[:2])  # ns on a CPU, ns waiting for one


def run_writers(writers: int, seconds: float, phases: Phases | None) -> None:
    import resource

    from django.db import connection

    done = [0] * writers
    sched: dict[int, tuple[int, ...]] = {}
    ready = threading.Barrier(writers + 1)
    deadline = [0.0]

    def writer(index: int) -> None:
        tid = threading.get_native_id()
        try:
            ready.wait()
            before = _schedstat(tid)
            number = 0
            while time.perf_counter() < deadline[0]:
                append(index, number)
                number += 1
            sched[index] = tuple(b - a for a, b in zip(before, _schedstat(tid), strict=True))
            done[index] = number
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    deadline[0] = start + seconds
    ready.wait()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    rows = sum(done)
    user, system = after.ru_utime - usage.ru_utime, after.ru_stime - usage.ru_stime
    print(
        f"{writers} writer(s): {rows} rows, {rows / wall:,.0f}/s, wall {wall / rows * 1e6:.1f} us a row, CPU "
        f"{(user + system) / rows * 1e6:.1f} us a row (user {user / rows * 1e6:.1f}, system "
        f"{system / rows * 1e6:.1f}), {(user + system) / wall:.2f} cores; context switches a row: voluntary "
        f"{(after.ru_nvcsw - usage.ru_nvcsw) / rows:.2f}, involuntary {(after.ru_nivcsw - usage.ru_nivcsw) / rows:.2f}"
    )
    on_cpu, waiting = (sum(values[at] for values in sched.values()) for at in (0, 1))
    print(
        f"  writer threads: on a CPU {on_cpu / rows / 1e3:.1f} us a row, runnable but waiting {waiting / rows / 1e3:.1f}"
    )
    if phases is not None:
        phases.report(rows)


def child(args: argparse.Namespace) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from audit.models import EventKind
    from audit.services import record

    for number in range(20):  # warm-up: connection, prepared SQL, key files, mirror
        record(EventKind.TOOL_CALL, tool="server_info", arguments={"n": number}, outcome="ok")
    phases = Phases() if args.phases else None
    if phases is not None:
        phases.install()
    for writers in args.writers:
        if phases is not None:
            phases.reset()
        run_writers(writers, args.seconds, phases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, nargs="+", default=[8, 1])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--phases", action="store_true", help="time the batch's steps (costs a little itself)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="forge-audit-writers-") as tmp:
            env = child_env(Path(tmp))
            subprocess.run([PYTHON, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], env=env, check=True)
            command = [PYTHON, str(Path(__file__).resolve()), "--child", "--seconds", str(args.seconds)]
            command += ["--writers", *map(str, args.writers), *(["--phases"] if args.phases else [])]
            subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
