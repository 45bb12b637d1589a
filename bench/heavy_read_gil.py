"""How long a heavy project read keeps other threads from the GIL, in process: the read in a loop on the
50,000-variable generated project (``projects_bench.generate``, 500 POUs, as ``hol_bench`` uses), beside a
thread that sleeps 1 ms at a time and notes how late it wakes (what a request's thread waits for the GIL at
each hand-off), with ``gc.callbacks`` timing every collection in CPU time.

The interpreter is set as ``runmcp`` sets it (``settle_interpreter``): the start-up freeze before the project is
read, the youngest generation's threshold (``--young``, 5,000) and the switch interval (``--switch-ms``, 0.2).
The first read is a warm-up (parse, element index, ST analyses), not measured.

It prints the read's CPU per call, the lateness percentiles, the wake-ups later than 2 and 5 ms and, for each,
where the read was when the watcher got the GIL back (the read's frame: a late wake-up right after a C call
that let go of the GIL names it), and the collections over 2 ms. Lateness also counts the machine's other
load: alternate the code before and after and say the load.

Voluntary GIL releases (C code that lets go of it: lxml's XPath evaluator lock, sqlite3, I/O) counted with a
uprobe, which no load moves: ``perf probe -x <libpython3.11.so> PyEval_SaveThread``, then
``perf stat -e probe_libpython3:PyEval_SaveThread .venv/bin/python bench/heavy_read_gil.py --calls N``
for two values of N; the difference over the calls is the releases per read.

    .venv/bin/python bench/heavy_read_gil.py                    # project.check's findings, 6 calls
    .venv/bin/python bench/heavy_read_gil.py --read placement --calls 20
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")

from projects_bench import generate

from projects import findings, placement
from projects.plcopen import documents, queries

READS: dict[str, Callable[[documents.ProjectDocument], Any]] = {
    "check": findings.document_findings,
    "placement": lambda doc: placement.suggest_placement(doc, "conveyor speed", 200),
    "find": lambda doc: queries.find(doc, text="no-such-element-anywhere", limit=200),
    "list_variables": lambda doc: queries.list_variables(doc, limit=200),
    "overview": queries.overview,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", choices=sorted(READS), default="check")
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--variables", type=int, default=50_000)
    parser.add_argument("--young", type=int, default=5_000, help="the youngest generation's threshold (5000)")
    parser.add_argument("--switch-ms", type=float, default=0.2, help="the GIL switch interval (0.2)")
    args = parser.parse_args()
    data = generate(500, args.variables)
    gc.collect()
    gc.freeze()
    gc.set_threshold(args.young, *gc.get_threshold()[1:])
    sys.setswitchinterval(args.switch_ms / 1000)
    read = READS[args.read]
    document = documents.load(data)
    read(document)
    if args.calls == 0:
        return

    collections_ms: list[tuple[int, float]] = []
    started = [0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time_ns()
        else:
            collections_ms.append((info["generation"], (time.thread_time_ns() - started[0]) / 1e6))

    late: list[float] = []
    where: collections.Counter[str] = collections.Counter()
    reader = threading.get_ident()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            time.sleep(0.001)
            lateness = (time.perf_counter() - start - 0.001) * 1000
            late.append(lateness)
            frame = sys._current_frames().get(reader) if lateness > 2 else None
            if frame is not None:
                stack = traceback.extract_stack(frame)[-2:]
                where[" < ".join(f"{f.name}:{f.lineno}" for f in reversed(stack))] += 1

    gc.callbacks.append(timed)
    watcher = threading.Thread(target=watch, name="watcher")
    watcher.start()
    cpu = time.thread_time()
    for _ in range(args.calls):
        read(document)
    cpu_ms = (time.thread_time() - cpu) * 1000 / args.calls
    stop.set()
    watcher.join()
    gc.callbacks.remove(timed)

    late.sort()
    n = len(late)
    print(f"{args.read}: {cpu_ms:.0f} ms CPU a call, {args.calls} calls; load average {os.getloadavg()[0]:.2f}")
    print(
        f"watcher lateness, ms: p50 {late[n // 2]:.2f}  p99 {late[int(n * 0.99)]:.2f}  p99.9 {late[int(n * 0.999)]:.2f}"
        f"  max {late[-1]:.2f}  ({n} wake-ups, {sum(x > 2 for x in late)} later than 2 ms, {sum(x > 5 for x in late)}"
        " later than 5)"
    )
    print("the read's frame at wake-ups later than 2 ms:")
    for frame_text, count in where.most_common(8):
        print(f"  {count:5d}  {frame_text}")
    long_ones = sorted((round(ms, 1), generation) for generation, ms in collections_ms if ms > 2)
    print(f"collections: {len(collections_ms)}, over 2 ms CPU (ms, generation): {long_ones}")


if __name__ == "__main__":
    main()
