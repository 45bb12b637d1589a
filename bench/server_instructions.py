"""What a server process spends on one sequential JSON call, by deployment, counted rather than timed: its
instructions (under callgrind) and its threads' sleeps (voluntary context switches). These are the two halves of
`scaleout_bench.py`'s sequential "PostgreSQL / embedded server CPU per call" ratio, whose CPU time moves between
runs a minute apart on a shared two-core virtual machine.

scaleout_bench's deployments (`--deployments`, embedded and pg-1 by default; pg-* need DATABASE_URL and REDIS_URL
as there) are started twice. First as scaleout_bench starts them: after `--warmup` calls on one session, `--n`
calls on it, each thread's voluntary and involuntary context switches read from `/proc/<pid>/task/*/status`, and
the process's CPU (utime + stime, indicative only). Then each server runs under `valgrind --tool=callgrind
--instr-atstart=no` with PYTHONHASHSEED=0: after the same warm-up the count is switched on with
`callgrind_control` for `--n` calls and dumped, then counted again over as long a span with no calls; the first
count less the second, over `--n`, is the figure, every thread of the process in it, user space only (what the
kernel does for a system call or a sleep is not counted). The second count is the process's own timers' work, which
the calls' span, 20-50 times longer under valgrind, would otherwise swell: 5-7% of an embedded call's count.
Last, this host's price of a sleep in CPU is timed in the bench's own process (`sleep_price_us`).

    .venv/bin/python bench/server_instructions.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/server_instructions.py --n 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import call_instructions as ci
import confirm_latency as cl
import mcp_load as ml
import scaleout_bench as sb
from call_syscalls import switches

DUMP_SETTLE_S = 1.0  # callgrind_control returns once asked; the dump's file is written after


@dataclass
class Counted:
    deployment: str
    instructions: float | None = None
    idle_instructions: float | None = None  # taken off `instructions`: the process's own work in as long a span
    loop_switches: float | None = None  # the event loop's thread (the process's first)
    other_switches: float | None = None  # every other thread: the worker pools', the audit's
    involuntary: float | None = None
    cpu_ms: float | None = None


async def calls_on_one_session(dep: sb.Deployment, args: argparse.Namespace, between: Between) -> None:
    session = await ml.streamable_session(dep.urls[0], dep.headers)
    try:
        for _ in range(args.warmup):
            await session.call(ml.TOOL)
        await between.start()
        for _ in range(args.n):
            await session.call(ml.TOOL)
        await between.stop()
    finally:
        await session.close()


class Between(Protocol):
    """What is counted around the measured calls, on one deployment's first process."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Switches:
    """Each thread's sleeps (voluntary switches), the involuntary switches and the process's CPU."""

    def __init__(self, pid: int, counted: Counted, calls: int) -> None:
        self.pid, self.counted, self.calls = pid, counted, calls
        self.before: dict[str, tuple[int, int]] = {}
        self.cpu_before = 0.0

    async def start(self) -> None:
        self.before, self.cpu_before = switches(self.pid), ml.server_cpu_ms(self.pid)

    async def stop(self) -> None:
        cpu, after = ml.server_cpu_ms(self.pid), switches(self.pid)
        loop = other = involuntary = 0
        for tid, (voluntary, forced) in after.items():
            was_voluntary, was_forced = self.before.get(tid, (0, 0))
            if tid == str(self.pid):
                loop += voluntary - was_voluntary
            else:
                other += voluntary - was_voluntary
            involuntary += forced - was_forced
        self.counted.loop_switches = loop / self.calls
        self.counted.other_switches = other / self.calls
        self.counted.involuntary = involuntary / self.calls
        self.counted.cpu_ms = (cpu - self.cpu_before) / self.calls


class Instructions:
    """The process's instructions, counted by callgrind only between `start` and `stop`, less what the process does
    with no call to answer (its timers' work, counted over as long a span with no calls), which a call's 20-50
    times longer span under valgrind would otherwise swell."""

    def __init__(self, pid: int, counted: Counted, calls: int, output: Path) -> None:
        self.pid, self.counted, self.calls, self.output = pid, counted, calls, output
        self.started = 0.0

    async def count(self, *arguments: str) -> None:
        await asyncio.to_thread(ci.callgrind_control, *arguments, str(self.pid))

    async def start(self) -> None:
        await self.count("--zero")
        await self.count("-i", "on")
        self.started = time.monotonic()

    async def stop(self) -> None:
        await self.count("-i", "off")
        span = time.monotonic() - self.started
        await self.count("--dump")
        await self.count("--zero")
        await self.count("-i", "on")
        await asyncio.sleep(span)
        await self.count("-i", "off")
        await self.count("--dump")
        await asyncio.sleep(DUMP_SETTLE_S)
        idle = ci.dumped_total(self.output, self.pid, 2)
        self.counted.idle_instructions = idle / self.calls
        self.counted.instructions = (ci.dumped_total(self.output, self.pid, 1) - idle) / self.calls


def sleep_price_us(sleep_s: float = 0.0005, rounds: int = 400) -> float:
    """This host's price of a sleep in CPU: how much more CPU (us) four chunks of Python work take with a sleep of
    `sleep_s` between each than back to back, per sleep. Timed on this process's thread, so indicative: a sleep
    between round trips is what a PostgreSQL call has three more of than an embedded one."""

    def chunk() -> None:
        json.dumps({str(number): [number, "x" * (number % 7)] for number in range(200)})

    def four_chunks(pause: float) -> float:
        started = time.thread_time()
        for _ in range(rounds):
            for number in range(4):
                chunk()
                if pause and number < 3:
                    time.sleep(pause)
        return time.thread_time() - started

    four_chunks(0)  # warm
    back_to_back, with_sleeps = four_chunks(0), four_chunks(sleep_s)
    return (with_sleeps - back_to_back) * 1e6 / (rounds * 3)


async def run(args: argparse.Namespace) -> list[Counted]:
    counted = {name: Counted(name) for name in args.deployments}
    workdir = Path(tempfile.mkdtemp(prefix="bench-server-instructions-"))
    plain, counted_dir, output = workdir / "plain", workdir / "counted", workdir / "callgrind"
    for folder in (plain, counted_dir, output):
        folder.mkdir()
    try:
        async with sb.deployments(args.deployments, plain) as deps:
            for name, dep in deps.items():
                await calls_on_one_session(dep, args, Switches(dep.pids[0], counted[name], args.n))
        os.environ["PYTHONHASHSEED"] = "0"  # the servers inherit it: dicts and sets ordered the same in every run
        async with sb.deployments(args.deployments, counted_dir, ci.callgrind_prefix(output)) as deps:
            for name, dep in deps.items():
                await calls_on_one_session(dep, args, Instructions(dep.pids[0], counted[name], args.n, output))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return list(counted.values())


def print_table(rows: list[Counted]) -> None:
    print(
        f"{'deployment':<11} {'instr/call':>12} {'idle/call':>10} {'loop sw':>8} {'other sw':>9} {'invol':>6} {'CPU ms':>7}"
    )
    for r in rows:
        print(
            f"{r.deployment:<11} {sb._f(r.instructions, 0):>12} {sb._f(r.idle_instructions, 0):>10}"
            f" {sb._f(r.loop_switches):>8}"
            f" {sb._f(r.other_switches):>9} {sb._f(r.involuntary):>6} {sb._f(r.cpu_ms, 3):>7}"
        )
    reference = rows[0]
    for r in rows[1:]:
        print(
            f"{r.deployment} / {reference.deployment}: instructions {sb._x(sb.ratio(r.instructions, reference.instructions))},"
            f" CPU {sb._x(sb.ratio(r.cpu_ms, reference.cpu_ms))} (timed: indicative only)"
        )
    print(
        "instr/call: the server process's instructions per call, every thread, user space (callgrind), less idle/call,"
        " what it did in as long a span with no calls (its timers; valgrind makes the calls' span 20-50 times longer);"
        " loop sw /"
        " other sw: voluntary context switches (sleeps) per call of the event loop's thread / of all other threads;"
        " invol: involuntary switches per call; CPU ms: the process's utime + stime per call, without valgrind."
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="counted calls per deployment (300)")
    parser.add_argument("--warmup", type=int, default=30, help="calls before the count on the same session (30)")
    parser.add_argument(
        "--deployments",
        default="embedded,pg-1",
        help="scaleout_bench's deployments, the first the reference of the ratios (embedded,pg-1)",
    )
    args = parser.parse_args(argv)
    args.deployments = [name.strip() for name in args.deployments.split(",") if name.strip()]
    unknown = [name for name in args.deployments if name not in sb.DEPLOYMENTS]
    if unknown:
        parser.error(f"unknown deployments: {', '.join(unknown)}")
    if any(name in sb.SCALE_OUT for name in args.deployments) and not cl.scale_out_configured():
        parser.error(f"{', '.join(sb.SCALE_OUT)} need DATABASE_URL (postgres://) and REDIS_URL")
    return args


def main() -> None:
    args = parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is needed: apt-get install valgrind")
    started = time.monotonic()
    rows = asyncio.run(run(args))
    print_table(rows)
    print(
        f"this host's price of a 0.5 ms sleep between chunks of Python work: {sleep_price_us():.0f} us of CPU"
        f" (timed in this process; indicative) ({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
