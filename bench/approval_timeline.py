"""Approval timeline: where the wall time of one approval goes, step by step, in both server processes.

Runs `confirm_latency.py`'s deployment (``--mode redis``: two ``runmcp`` on a scratch PostgreSQL database and
Redis, the client's waiting call on process B and the approve on process A; or ``memory``) with every server
started through this file (``--serve``), which wraps, once Django is set up, the steps of an approval in probes
that note their monotonic start and end (one clock for every process of the machine) and their thread: the
operator API request (Django's one-hop handler), the services' and the executor's steps, the capability's reads
and write, every SQL statement and commit, the fsyncs, the channel layer's sends and receives, and the waiting
call's writes to its client. Nothing in the servers' code changes; the probes cost a few microseconds each, so
the figures are a little above the plain bench's.

After the iterations, each approval's events are cut out of both processes' notes from the approve request's
arrival to the waiting call's last write (the outcome on the client's stream), and the medians over the
approvals are printed: when each step starts and ends after the request arrived, how long it takes, and how
many SQL statements (round trips, on PostgreSQL) and commits it makes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python bench/approval_timeline.py --n 50
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

NOTES_DIR = "FORGE_BENCH_TIMELINE_DIR"

# --------------------------------------------------------------------------
# In a server: the probes
# --------------------------------------------------------------------------

_notes: list[tuple[int, int, str, int]] = []


def _note(start: int, name: str) -> None:
    _notes.append((start, time.monotonic_ns(), name, threading.get_ident()))


def _spanned(name: str | Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
    label = name if callable(name) else (lambda *a, **k: name)
    if asyncio.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_probe(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                _note(start, label(*args, **kwargs))

        return async_probe

    @functools.wraps(fn)
    def probe(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            _note(start, label(*args, **kwargs))

    return probe


def _replace_everywhere(original: Any, wrapped: Any) -> None:
    """Every module-level name bound to `original` (``from x import f`` copies) now names `wrapped`."""
    for module in list(sys.modules.values()):
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if value is original:
                setattr(module, attr, wrapped)


def _wrap_function(module: Any, attr: str, name: str | None = None) -> None:
    original = getattr(module, attr)
    _replace_everywhere(original, _spanned(name or f"{module.__name__.rsplit('.', 1)[-1]}.{attr}", original))


def _wrap_method(cls: type, attr: str, name: str | Callable[..., str]) -> None:
    setattr(cls, attr, _spanned(name, getattr(cls, attr)))


_SQL_TABLE = re.compile(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', re.IGNORECASE)


def _sql_label(_cursor: Any, sql: Any, *args: Any, **kwargs: Any) -> str:
    text = str(sql).lstrip()
    verb = text.split(None, 1)[0].upper() if text else "?"
    table = _SQL_TABLE.search(text)
    return f"sql {verb} {table.group(1) if table else ''}".rstrip()


def _request_label(_handler: Any, request: Any) -> str:
    path = getattr(request, "path", "")
    return "request approve (view chain)" if path.endswith("/approve") else "request other (view chain)"


def _install_probes() -> None:
    import channels.layers
    from django.core.handlers.asgi import ASGIHandler
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

    from audit import services as audit_services
    from confirmations import executor, services
    from forge_core import live
    from forge_site.django_views import OneHopHandler
    from mcp_api import consumers
    from projects.capability import ProjectFileCapability

    for cls in (CursorWrapper, CursorDebugWrapper):
        _wrap_method(cls, "execute", _sql_label)
        _wrap_method(cls, "executemany", _sql_label)
    _wrap_method(BaseDatabaseWrapper, "commit", "commit")
    os.fsync = _spanned("fsync", os.fsync)
    _wrap_method(OneHopHandler, "get_response", _request_label)

    original_call = ASGIHandler.__call__

    async def handled(self: Any, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        start = time.monotonic_ns()
        try:
            return await original_call(self, scope, receive, send)
        finally:
            if scope.get("path", "").endswith("/approve"):
                _note(start, "request approve (ASGI, to the answer sent)")

    OneHopHandler.__call__ = handled  # type: ignore[method-assign]
    for attr in ("do_approve_confirmation", "_decide", "_carry_out", "_approved_as_sealed", "_executed", "_finish"):
        _wrap_function(services, attr)
    for attr in ("prepare", "execute", "transition", "_forward", "_verify", "verify", "_reserve"):
        _wrap_function(executor, attr)
    for attr in ("identity", "read", "forward", "write", "settle"):
        _wrap_method(ProjectFileCapability, attr, f"capability.{attr}")
    _wrap_function(audit_services, "record", "audit.record")
    _wrap_function(live, "notify_streams")
    layer = channels.layers.get_channel_layer()
    layer_cls = type(layer)
    _wrap_method(layer_cls, "group_send", lambda _layer, group, message: f"layer.group_send {message.get('type')}")

    original_receive = layer_cls.receive

    async def received(self: Any, channel: str) -> Any:
        message = await original_receive(self, channel)
        _notes.append((time.monotonic_ns(), time.monotonic_ns(), f"layer.received {message.get('type')}", 0))
        return message

    layer_cls.receive = received
    _wrap_method(
        consumers.McpHttpConsumer,
        "send_body",
        lambda _c, body, *, more: "client stream: last write" if not more else "client stream: write",
    )


def _flush_forever(path: Path) -> None:
    written = 0
    while True:
        time.sleep(0.5)
        _flush(path, written)
        written = len(_notes)


def _flush(path: Path, written: int) -> None:
    upto = len(_notes)
    if upto > written:
        with path.open("a") as out:
            out.writelines(f"{s} {e} {t} {n}\n" for s, e, n, t in _notes[written:upto])


def serve(argv: list[str]) -> None:
    """Run ``manage.py argv...`` with the probes installed once Django is set up."""
    import runpy

    import django

    notes = Path(os.environ[NOTES_DIR]) / f"{os.getpid()}.notes"
    setup = django.setup

    def setup_then_probe(*args: Any, **kwargs: Any) -> None:
        setup(*args, **kwargs)
        if not getattr(setup_then_probe, "done", False):
            setup_then_probe.done = True  # type: ignore[attr-defined]
            _install_probes()
            threading.Thread(target=_flush_forever, args=(notes,), daemon=True, name="timeline-notes").start()

    django.setup = setup_then_probe
    manage = Path(__file__).resolve().parent.parent / "manage.py"
    sys.path.insert(0, str(manage.parent))
    sys.argv = [str(manage), *argv]
    runpy.run_path(str(manage), run_name="__main__")


# --------------------------------------------------------------------------
# In the bench: iterations, then the notes cut per approval
# --------------------------------------------------------------------------

Event = tuple[int, int, int, int, str]  # start, end, pid, thread, name


def read_notes(folder: Path) -> list[Event]:
    events: list[Event] = []
    for path in folder.glob("*.notes"):
        pid = int(path.stem)
        for line in path.read_text().splitlines():
            start, end, thread, name = line.split(" ", 3)
            events.append((int(start), int(end), pid, int(thread), name))
    return sorted(events)


def per_approval(events: list[Event], operator_pid: int) -> list[list[Event]]:
    """Each approval's events: from its approve request's arrival (ASGI) to the waiting call's last write."""
    requests = [e for e in events if e[4].startswith("request approve (ASGI") and e[2] == operator_pid]
    approvals = []
    for start, *_ in requests:
        ends = [e for e in events if e[0] >= start and e[4] == "client stream: last write"]
        if not ends:
            continue
        end = ends[0][1]
        approvals.append([e for e in events if start <= e[0] <= end])
    return approvals


def summarize(approvals: list[list[Event]], pids: dict[int, str]) -> list[str]:
    rows: dict[tuple[str, str], list[tuple[float, float, float, int, int]]] = defaultdict(list)
    for events in approvals:
        t0 = events[0][0]
        sqls = [e for e in events if e[4].startswith("sql ")]
        commits = [e for e in events if e[4] == "commit"]
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for start, end, pid, _thread, name in events:
            if name.startswith("sql ") or name == "commit":
                continue
            key = (pids.get(pid, str(pid)), name)
            seen[key] += 1
            occurrence = f"{name} #{seen[key]}" if seen[key] > 1 else name
            inside = [s for s in sqls if s[2] == pid and start <= s[0] and s[1] <= end]
            committed = [c for c in commits if c[2] == pid and start <= c[0] and c[1] <= end]
            rows[(key[0], occurrence)].append(
                ((start - t0) / 1e6, (end - t0) / 1e6, (end - start) / 1e6, len(inside), len(committed))
            )
        for pid, side in pids.items():
            mine = [s for s in sqls if s[2] == pid]
            rows[(side, "all SQL statements (their own time)")].append(
                (0.0, 0.0, sum(s[1] - s[0] for s in mine) / 1e6, len(mine), 0)
            )
            done = [c for c in commits if c[2] == pid]
            rows[(side, "all commits (their own time)")].append(
                (0.0, 0.0, sum(c[1] - c[0] for c in done) / 1e6, 0, len(done))
            )
        rows[("both", "approval: request arrives -> outcome written")].append(
            (0.0, (events[-1][1] - t0) / 1e6, (events[-1][1] - t0) / 1e6, len(sqls), len(commits))
        )
    lines = [
        f"{'process':<8} {'step (#n: its n-th time in the approval)':<58} {'n':>4} {'from':>7} {'to':>7}"
        f" {'took':>7} {'SQL':>5} {'commits':>7}"
    ]
    wanted = len(approvals) // 2
    for (side, name), values in sorted(rows.items(), key=lambda kv: statistics.median(v[0] for v in kv[1])):
        if len(values) < wanted:
            continue  # a step that happens in fewer than half the approvals (a re-join, a stray request)
        med = [statistics.median(v[i] for v in values) for i in range(5)]
        lines.append(
            f"{side:<8} {name[:58]:<58} {len(values):>4} {med[0]:>7.2f} {med[1]:>7.2f} {med[2]:>7.2f}"
            f" {med[3]:>5.0f} {med[4]:>7.0f}"
        )
    return lines


def decision_trip(approvals: list[list[Event]]) -> list[str]:
    """Medians, per approval, of the steps between the last commit and the client's outcome."""
    steps: dict[str, list[float]] = defaultdict(list)
    for events in approvals:
        sent = [e for e in events if e[4] == "layer.group_send confirmation.decided"]
        heard = [e for e in events if e[4] == "layer.received confirmation.decided"]
        if not sent or not heard:
            continue
        commits = [e for e in events if e[4] == "commit" and e[1] <= sent[0][0]]
        marks = [
            ("the last commit ends -> the announcement's group send starts", commits[-1][1], sent[0][0]),
            ("the group send, from its start to its end (round trips to Redis)", sent[0][0], sent[0][1]),
            ("the group send ends -> the other process receives it", sent[0][1], heard[0][0]),
            ("received -> the outcome written to the client", heard[0][0], events[-1][1]),
        ]
        for name, start, end in marks:
            steps[name].append((end - start) / 1e6)
    return [f"  {statistics.median(values):>6.2f}  {name}" for name, values in steps.items()]


async def run(args: argparse.Namespace, folder: Path) -> tuple[list[float], dict[int, str]]:
    import confirm_latency as cl

    cl.SERVER_COMMAND = [cl.PYTHON, str(Path(__file__).resolve()), "--serve"]
    outcomes: list[float] = []
    async with cl.deployment(args.mode) as dep:
        bench = cl.Bench(dep)
        try:
            await bench.open()
            for index in range(args.warmup + args.n):
                sample = await bench.once()
                if not sample.ok:
                    print(f"  failed: {sample.error}", flush=True)
                elif index >= args.warmup and sample.outcome_ms is not None:
                    outcomes.append(sample.outcome_ms)
            # The servers flush their notes every half second.
            await asyncio.sleep(1.5)
        finally:
            await bench.close()
        names = {dep.pids[0]: "A" if len(dep.pids) > 1 else "server"}
        if len(dep.pids) > 1:
            names[dep.pids[1]] = "B"
        return outcomes, names


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="approvals timed (50)")
    parser.add_argument("--warmup", type=int, default=10, help="approvals first, left out (10)")
    parser.add_argument("--mode", choices=("memory", "redis"), default="redis")
    parser.add_argument("--raw", action="store_true", help="also print every event of the last approval in order")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="approval-timeline-") as folder:
        os.environ[NOTES_DIR] = folder
        outcomes, names = asyncio.run(run(args, Path(folder)))
        events = read_notes(Path(folder))
    operator = next(iter(names))
    approvals = per_approval(events, operator)[-args.n :]
    outcomes.sort()
    print(
        f"{args.mode}: {len(outcomes)} approvals measured by the client, outcome p50"
        f" {statistics.median(outcomes):.1f} ms, max {outcomes[-1]:.1f}; {len(approvals)} cut from the notes;"
        " medians in ms after the approve request reached the server"
    )
    for line in summarize(approvals, names):
        print(line)
    print("\nThe decision's trip (medians of each approval's own intervals, ms):")
    for line in decision_trip(approvals):
        print(line)
    if args.raw and approvals:
        t0 = approvals[-1][0][0]
        print("\nThe last approval's events in the order they started (ms after the request arrived):")
        for start, end, pid, _thread, name in approvals[-1]:
            print(f"{names.get(pid, pid):<8} {(start - t0) / 1e6:>7.2f} {(end - start) / 1e6:>6.2f}  {name}")


if __name__ == "__main__":
    main()
