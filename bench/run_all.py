"""Run the whole MCP benchmark with one command and print one table.

It starts every server once, each on a free loopback port, waits until it answers, measures their calls side by
side with ``bench/mcp_load.py`` and stops them all at the end:

* ``forge``: the project's server (``manage.py runmcp --server daphne``), on a fresh migrated data dir
  with a fresh token, called with ``Authorization: Bearer``;
* ``forge-uvicorn``: the same served by ``runmcp --server uvicorn`` (uvloop + httptools);
* ``sdk-json``: ``bench/sdk_server.py`` (the official SDK on uvicorn, h11 + asyncio), answers as
  application/json;
* ``sdk-daphne``: the same SDK app on daphne (``--server daphne``), as ``runmcp`` runs daphne, answers as
  application/json: the reference of issue 15's aims (Forge on daphne at most 1.0x its CPU per JSON call,
  Forge on uvicorn at most 0.6x);
* ``sdk-sse``: the SDK on uvicorn with ``--sse-response``, answers as text/event-stream;
* ``null``: ``bench/null_server.py``, the ceiling of the load client and of uvicorn.

Per call mode (``json``: Streamable HTTP; ``sse``: the same with a progress token; ``legacy``: the HTTP+SSE
transport) every server gives sequential p50/p99, calls/s from ``--clients`` sessions and the server's CPU ms per
call. The servers take turns in short blocks: ``--n`` sequential calls each, in blocks of ``--block-calls`` (50)
on one session per server, then ``--seconds`` of load each, in blocks of ``--block-seconds`` (1 s) on
``--clients`` sessions per server opened beforehand; one block of every server makes a cycle, and each cycle
starts one server later than the last. A server's CPU (all its threads and its children, read from each
process's CPU-time clock to the nanosecond) is taken over its own blocks only, and its figures pool its blocks.
The host's speed drifts by tens of percent within a minute, so each Forge/SDK ratio is the median of the ratios
of paired blocks (the two servers' blocks of one cycle, measured seconds apart), printed with the ratio of the
pooled blocks and the pairs' quartiles. ``--rounds R`` repeats the whole measurement R times on the same
processes; the table has each round's figures, the ratios take every round's pairs.

``--in-turn`` keeps the older method: each server alone, started, measured in one go and stopped, the next one
after it, each ratio the median over the rounds of each round's ratio (two servers' figures up to a minute
apart). Each idle-stream kind (Streamable HTTP GET streams, legacy GET /sse streams) runs on its own freshly
started process, one server at a time, because Python reuses memory freed earlier and would make a second kind
look cheaper. Every server gets a fresh temporary directory and is stopped in a ``finally``, whatever happens.

The ``bg %`` column is the CPU that processes other than the server and this client used while a
row was measured (side by side: over that server's blocks), in % of one core (read from /proc/stat); a large
value means the row was disturbed by other work on the machine.

    .venv/bin/python bench/run_all.py              # full run (about 10-15 minutes)
    .venv/bin/python bench/run_all.py --quick      # smoke run (about 2 minutes)
    .venv/bin/python bench/run_all.py --servers forge --profile /tmp/forge.txt   # + py-spy profile
    .venv/bin/python bench/run_all.py --servers forge,forge-uvicorn,sdk-daphne --modes json --no-idle --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import mcp_load as ml
import pairing
from pairing import Block

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = sys.executable
HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
SETUP_TIMEOUT_S = 120.0
IDLE_BUDGET_S = 120.0
FD_LIMIT = 16_384
PR_SET_PDEATHSIG = 1
# Settings that would move Forge off its embedded default (SQLite + in-memory channel layer).
SCALE_OUT_ENV = ("DATABASE_URL", "REDIS_URL")

T = TypeVar("T")


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server and which transports it offers."""

    name: str
    description: str
    argv: Callable[[int], list[str]]
    forge: bool = False


def forge_argv(server: str, port: int) -> list[str]:
    return [PYTHON, str(ROOT / "manage.py"), "runmcp", "--server", server, "--host", HOST, "--port", str(port)]


SERVERS: dict[str, ServerSpec] = {
    spec.name: spec
    for spec in (
        ServerSpec(
            "forge",
            "Forge MCP: manage.py runmcp (daphne, Channels, Django ORM, SQLite WAL), auth + audit per call",
            lambda port: forge_argv("daphne", port),
            forge=True,
        ),
        ServerSpec(
            "forge-uvicorn",
            "Forge MCP: manage.py runmcp --server uvicorn (uvloop + httptools), otherwise as forge",
            lambda port: forge_argv("uvicorn", port),
            forge=True,
        ),
        ServerSpec(
            "sdk-json",
            "official mcp SDK MCPServer on uvicorn (h11, asyncio), --json-response",
            lambda port: [PYTHON, str(BENCH / "sdk_server.py"), "--port", str(port), "--json-response"],
        ),
        ServerSpec(
            "sdk-daphne",
            "official mcp SDK MCPServer on daphne (as runmcp runs it), --json-response",
            lambda port: [
                *[PYTHON, str(BENCH / "sdk_server.py"), "--port", str(port)],
                *["--json-response", "--server", "daphne"],
            ],
        ),
        ServerSpec(
            "sdk-sse",
            "official mcp SDK MCPServer on uvicorn (h11, asyncio), --sse-response",
            lambda port: [PYTHON, str(BENCH / "sdk_server.py"), "--port", str(port), "--sse-response"],
        ),
        ServerSpec(
            "null",
            "raw ASGI null server on uvicorn (client ceiling)",
            lambda port: [PYTHON, str(BENCH / "null_server.py"), "--port", str(port)],
        ),
    )
}

BLOCK_WARMUP_CALLS = 3  # unmeasured calls opening a sequential block: the server sat idle through the others'
BLOCK_TIMEOUT_S = 60.0
MODES = ("json", "sse", "legacy")
IDLE_KINDS = ("streamable", "legacy")
# Like-for-like reference for the Forge/SDK ratios: the SDK server answering in the same form.
REFERENCE = {"json": "sdk-json", "sse": "sdk-sse", "legacy": "sdk-json", "streamable": "sdk-json"}
# Issue 15's aims for JSON answers: each Forge server's CPU per call against the SDK app on daphne.
SERVER_AIMS = (("forge", "sdk-daphne", 1.0), ("forge-uvicorn", "sdk-daphne", 0.6))


# --------------------------------------------------------------------------
# Machine figures
# --------------------------------------------------------------------------


def machine_busy_ms() -> float:
    """CPU time (ms, all cores) the whole machine spent busy so far, from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) * 1000 / ml.CLK_TCK


class BackgroundWindow:
    """CPU used by everything except the server and this client, over a span of wall time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.wall = time.monotonic()
        self.machine = machine_busy_ms()
        self.server = ml.server_cpu_ms(pid)
        self.client = time.process_time() * 1000

    def percent_of_core(self) -> float:
        wall_ms = (time.monotonic() - self.wall) * 1000
        other = (
            machine_busy_ms()
            - self.machine
            - (ml.server_cpu_ms(self.pid) - self.server)
            - (time.process_time() * 1000 - self.client)
        )
        return max(other, 0.0) * 100 / max(wall_ms, 1.0)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# --------------------------------------------------------------------------
# Server processes
# --------------------------------------------------------------------------


def free_port() -> int:
    """A port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if this runner dies, so no server is left behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def server_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """A Forge server's environment: embedded (SQLite, in-memory channel layer) on ``data_dir`` unless
    ``settings`` name a database and Redis (``DATABASE_URL``, ``REDIS_URL``) or other settings."""
    env = {k: v for k, v in os.environ.items() if k not in SCALE_OUT_ENV}
    env["FORGE_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    # One bench token holds every idle stream: lift the per-token caps a deployment keeps low.
    for cap in ("FORGE_MAX_SESSIONS_PER_TOKEN", "FORGE_MAX_STREAMS_PER_TOKEN"):
        env[cap] = "1000000"
    env.update(settings)
    return env


def prepare_forge(data_dir: Path, **settings: str) -> str:
    """Migrate a fresh data dir (and the database ``settings`` name, if any) and create a token in it; return
    the token."""
    env = server_env(data_dir, **settings)
    manage = [PYTHON, str(ROOT / "manage.py")]
    subprocess.run(
        [*manage, "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=SETUP_TIMEOUT_S,
    )
    created = subprocess.run(
        [*manage, "create_token", "--user", "bench", "--create-user", "--label", "bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
    )
    token = created.stdout.strip().splitlines()[-1].strip()
    if not token.startswith("fmcp_"):
        raise RuntimeError(f"create_token printed no token: {created.stdout[-300:]!r}")
    return token


@dataclass
class Running:
    """A started server: where to reach it and its pid."""

    spec: ServerSpec
    pid: int
    url: str
    sse_url: str
    headers: dict[str, str]
    log: Path


def _log_tail(log: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""


async def _wait_until_answering(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Poll the endpoint until any HTTP answer comes back (bounded); fail early if the process dies."""
    deadline = time.monotonic() + START_TIMEOUT_S
    # A bodyless notification: every server answers it at once (Forge with 401, before any database work).
    probe = {"Content-Type": "application/json", "Accept": ml.ACCEPT_BOTH}
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0)) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode} before answering:\n{_log_tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                await client.post(url, content=b'{"jsonrpc":"2.0","method":"ping/probe"}', headers=probe)
                return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"server did not answer within {START_TIMEOUT_S:.0f} s:\n{_log_tail(log)}")


async def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server (only this pid), then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    proc.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextlib.asynccontextmanager
async def running(spec: ServerSpec) -> AsyncIterator[Running]:
    """Start ``spec`` on a free port with a fresh temp dir; always stop it and remove the dir."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{spec.name}-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        data_dir = workdir / "data"
        data_dir.mkdir()
        headers: dict[str, str] = {}
        if spec.forge:
            headers["Authorization"] = f"Bearer {prepare_forge(data_dir)}"
        port = free_port()
        log = workdir / "server.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                spec.argv(port),
                cwd=ROOT,
                env=server_env(data_dir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        base = f"http://{HOST}:{port}"
        await _wait_until_answering(proc, f"{base}/mcp", log)
        yield Running(spec, proc.pid, f"{base}/mcp", f"{base}/sse", headers, log)
    finally:
        if proc is not None:
            await _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------


@dataclass
class CallFigures:
    server: str
    mode: str
    answers: str = "-"
    p50_ms: float | None = None
    p99_ms: float | None = None
    seq_cpu_ms: float | None = None
    calls_per_s: float | None = None
    load_cpu_ms: float | None = None
    client_cpu_ms: float | None = None
    errors: int | None = None
    background_pct: float | None = None
    first_error: str | None = None
    failure: str | None = None
    round: int = 1


@dataclass
class IdleFigures:
    server: str
    kind: str
    opened: str = "-"
    open_s: float | None = None
    rss_before_mb: float | None = None
    rss_after_mb: float | None = None
    kb_per_stream: float | None = None
    kb_per_get: float | None = None
    background_pct: float | None = None
    failure: str | None = None


@dataclass
class Results:
    calls: list[CallFigures] = field(default_factory=list)
    idle: list[IdleFigures] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)

    def call(self, server: str, mode: str, round: int | None = None) -> CallFigures | None:
        """The figures of ``server`` in ``mode``: of one round, or (``round=None``) the first that has them."""
        return next(
            (
                c
                for c in self.calls
                if c.server == server and c.mode == mode and not c.failure and round in (None, c.round)
            ),
            None,
        )

    def rounds(self) -> list[int]:
        return sorted({c.round for c in self.calls})

    def across_rounds(self, server: str, mode: str, attr: str) -> float | None:
        """The median over the rounds of one figure of ``server`` in ``mode``."""
        values = [getattr(c, attr) for r in self.rounds() if (c := self.call(server, mode, r)) is not None]
        return _median([v for v in values if v is not None])

    def round_ratios(self, ours: str, ref: str, mode: str, attr: str) -> list[float | None]:
        """Per round, ``ours``'s figure over ``ref``'s, both measured in that round (None where one is missing)."""
        ratios: list[float | None] = []
        for r in self.rounds():
            forge, sdk = self.call(ours, mode, r), self.call(ref, mode, r)
            value, reference = getattr(forge, attr, None), getattr(sdk, attr, None)
            ratios.append(value / reference if value is not None and reference else None)
        return ratios

    def paired_blocks(self, ours: str, ref: str, mode: str, attr: str) -> list[tuple[Block, Block]]:
        return pairing.paired_blocks(self.blocks, ours, ref, mode, attr)

    def block_ratios(self, ours: str, ref: str, mode: str, attr: str) -> list[float]:
        return pairing.block_ratios(self.blocks, ours, ref, mode, attr)

    def pooled_ratio(self, ours: str, ref: str, mode: str, attr: str) -> float | None:
        return pairing.pooled_ratio(self.blocks, ours, ref, mode, attr)

    def idle_of(self, server: str, kind: str) -> IdleFigures | None:
        return next((i for i in self.idle if i.server == server and i.kind == kind and not i.failure), None)


_median = pairing.median


async def bounded(awaitable: Awaitable[T], timeout_s: float) -> T:
    return await asyncio.wait_for(awaitable, timeout_s)


async def measure_calls(server: Running, mode: str, args: argparse.Namespace) -> CallFigures:
    """Sequential latency on one session, then calls/s from ``--clients`` sessions."""
    sse = mode == "sse"

    async def factory() -> ml.Session:
        if mode == "legacy":
            return await ml.legacy_sse_session(server.sse_url, server.headers)
        return await ml.streamable_session(server.url, server.headers)

    options = argparse.Namespace(n=args.n, clients=args.clients, seconds=args.seconds, pid=server.pid)
    window = BackgroundWindow(server.pid)
    timeout = 120 + args.n * 0.2 + args.seconds * 3
    row = await bounded(ml.measure_calls(mode, factory, sse, options), timeout)
    lat, load = row.latency, row.load
    return CallFigures(
        server=server.spec.name,
        mode=mode,
        answers=row.answers,
        p50_ms=lat.p50_ms,
        p99_ms=lat.p99_ms,
        seq_cpu_ms=lat.server_cpu_ms_per_call,
        calls_per_s=load.calls_per_s,
        load_cpu_ms=load.server_cpu_ms_per_call,
        client_cpu_ms=load.client_cpu_ms_per_call,
        errors=load.errors,
        background_pct=window.percent_of_core(),
        first_error=load.first_error,
        failure=load.first_error if load.calls == 0 else None,
    )


async def measure_idle(server: Running, kind: ml.StreamKind, args: argparse.Namespace) -> IdleFigures:
    """Hold ``--streams`` idle streams of one kind on this (freshly started) server."""
    target = server.url if kind == "streamable" else server.sse_url
    window = BackgroundWindow(server.pid)
    result = await bounded(
        ml.idle_streams(target, server.headers, args.streams, kind, server.pid, budget_s=IDLE_BUDGET_S),
        IDLE_BUDGET_S * 3 + 120,
    )
    return IdleFigures(
        server=server.spec.name,
        kind=kind,
        opened=f"{result.opened}/{result.requested}",
        open_s=result.open_seconds,
        rss_before_mb=result.rss_before_kb / 1024,
        rss_after_mb=result.rss_after_kb / 1024,
        kb_per_stream=result.kb_per_stream,
        kb_per_get=result.kb_per_stream_only,
        background_pct=window.percent_of_core(),
        failure=result.first_error if result.opened < result.requested else None,
    )


def thread_cpu_ms(pid: int) -> dict[int, float]:
    """User+system CPU (ms) used so far by each thread of ``pid``, by thread id."""
    used: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            text = (task / "stat").read_text()
            fields = text[text.rindex(")") + 2 :].split()
            used[int(task.name)] = (int(fields[11]) + int(fields[12])) * 1000 / ml.CLK_TCK
    return used


def start_py_spy(pid: int, seconds: int, output: Path, *, gil: bool = True) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` for ``seconds`` into ``output`` (collapsed stacks, ``--format raw``).

    With ``gil`` it samples the thread holding the GIL, i.e. where Python spends CPU (but a thread that let the GIL
    go and waits on a socket still counts as its holder while no other thread takes it); without, every thread
    the kernel has on a CPU. --nonblocking keeps the thread split close to /proc's (pausing the process at each
    sample skews it towards the executor)."""
    py_spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "250", "--nonblocking"]
    command += ["--gil"] if gil else []
    command += ["--format", "raw", "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def stop_py_spy(spy: subprocess.Popen[bytes], seconds: int) -> None:
    """Wait for py-spy to write its stacks (saying so if it failed); stop it if it overstays."""
    try:
        _out, err = await asyncio.to_thread(spy.communicate, timeout=seconds + 30)
        if spy.returncode != 0:
            print(f"  profile: py-spy failed ({spy.returncode}): {err.decode(errors='replace')[-500:]}")
    finally:
        if spy.poll() is None:
            spy.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(timeout=STOP_TIMEOUT_S)


async def profile_json_load(server: Running, args: argparse.Namespace) -> None:
    """An extra (unmeasured) JSON load phase with py-spy attached, writing collapsed stacks."""
    seconds = max(int(args.seconds), 5)
    spy = start_py_spy(server.pid, seconds, args.profile)
    try:
        await asyncio.sleep(0.5)  # let py-spy attach before the load starts

        async def factory() -> ml.Session:
            return await ml.streamable_session(server.url, server.headers)

        threads_before = thread_cpu_ms(server.pid)
        load = await bounded(ml.concurrent_throughput(factory, args.clients, seconds + 1.0, False, server.pid), 300)
        threads_after = thread_cpu_ms(server.pid)
        main = threads_after.get(server.pid, 0.0) - threads_before.get(server.pid, 0.0)
        others = sum(threads_after.values()) - sum(threads_before.values()) - main
        calls = max(load.calls, 1)
        print(
            f"  profile: {load.calls} calls, {load.calls_per_s:.0f}/s, server CPU "
            f"{ml._fmt(load.server_cpu_ms_per_call)} ms/call (slowed by py-spy): event-loop thread "
            f"{main / calls:.3f}, other threads {others / calls:.3f} ms/call; stacks in {args.profile}"
        )
    finally:
        await stop_py_spy(spy, seconds)


async def bench_calls(spec: ServerSpec, args: argparse.Namespace, results: Results, round: int) -> None:
    """One round of the call measurements of one server, all on one process."""
    rounds = f", round {round} of {args.rounds}" if args.rounds > 1 else ""
    print(f"== {spec.name}: {spec.description}{rounds}", flush=True)
    try:
        async with running(spec) as server:
            print(f"  pid {server.pid} at {server.url}, load average {load_average()}", flush=True)
            for mode in args.modes:
                try:
                    figures = await measure_calls(server, mode, args)
                except (ml.CallError, httpx.HTTPError, OSError, TimeoutError) as exc:
                    figures = CallFigures(spec.name, mode, failure=repr(exc))
                figures.round = round
                results.calls.append(figures)
                print(f"  {mode}: {_call_summary(figures)}", flush=True)
            if args.profile and spec.forge and round == args.rounds:
                await profile_json_load(server, args)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        results.calls.extend(CallFigures(spec.name, mode, failure=repr(exc), round=round) for mode in args.modes)
        print(f"  failed: {exc}", flush=True)


CALL_FAILURES = (ml.CallError, httpx.HTTPError, OSError, TimeoutError)


@dataclass
class Contender(pairing.Turns[Block]):
    """One server in one call mode of the side-by-side measurement: its sessions and what its blocks gathered."""

    server: Running
    background_ms: float = 0.0  # other processes' CPU over this server's blocks, weighted by their wall time
    wall_ms: float = 0.0

    @property
    def name(self) -> str:
        return self.server.spec.name

    def took(self, block: Block, window: BackgroundWindow) -> None:
        wall_ms = (time.monotonic() - window.wall) * 1000
        self.background_ms += window.percent_of_core() * wall_ms / 100
        self.wall_ms += wall_ms
        self.blocks.append(block)

    def figures(self, mode: str, round: int) -> CallFigures:
        """This round's figures of the server in ``mode``, over its own blocks only."""
        if self.failure is not None:
            return CallFigures(self.name, mode, failure=self.failure, round=round)
        pooled = pairing.Pooled.of(self.blocks, self.timings_ms)
        if isinstance(self.session, ml.StreamableSession):
            answers = "+".join(sorted(self.session.answer_forms))
        else:
            answers = "on GET /sse"
        return CallFigures(
            server=self.name,
            mode=mode,
            answers=answers,
            **pooled.call_figures(),  # type: ignore[arg-type]
            background_pct=self.background_ms * 100 / self.wall_ms if self.wall_ms else None,
            first_error=self.first_error,
            failure=self.first_error if pooled.no_load_call else None,
            round=round,
        )


def session_factory(server: Running, mode: str) -> ml.SessionFactory:
    async def factory() -> ml.Session:
        if mode == "legacy":
            return await ml.legacy_sse_session(server.sse_url, server.headers)
        return await ml.streamable_session(server.url, server.headers)

    return factory


async def sequential_block(contender: Contender, mode: str, round: int, cycle: int, calls: int) -> None:
    """``calls`` timed sequential calls on the server's one session, after a few unmeasured ones."""
    window = BackgroundWindow(contender.server.pid)
    latency = await bounded(
        ml.sequential_latency(
            contender.session, calls, sse=mode == "sse", pid=contender.server.pid, warmup=BLOCK_WARMUP_CALLS
        ),
        BLOCK_TIMEOUT_S + calls * 0.2,
    )
    contender.timings_ms.extend(latency.timings_ms)
    cpu = latency.server_cpu_ms_per_call
    block = Block(
        contender.name,
        mode,
        "seq",
        round,
        cycle,
        calls,
        latency.mean_ms * calls / 1000,
        None if cpu is None else cpu * calls,
        latency.client_cpu_ms_per_call * calls,
    )
    contender.took(block, window)


async def load_block(contender: Contender, mode: str, round: int, cycle: int, seconds: float) -> None:
    """``--clients`` sessions of the server calling back to back for ``seconds``."""
    window = BackgroundWindow(contender.server.pid)
    load = await bounded(
        ml.throughput(contender.load_sessions, seconds, mode == "sse", contender.server.pid),
        BLOCK_TIMEOUT_S + seconds * 3,
    )
    counted = max(load.calls, 1)  # the per-call figures divide by at least one call
    cpu = load.server_cpu_ms_per_call
    block = Block(
        contender.name,
        mode,
        "load",
        round,
        cycle,
        load.calls,
        load.seconds,
        None if cpu is None else cpu * counted,
        load.client_cpu_ms_per_call * counted,
        load.errors,
    )
    contender.first_error = contender.first_error or load.first_error
    contender.took(block, window)


async def measure_side_by_side(
    servers: list[Running], mode: str, args: argparse.Namespace, results: Results, round: int
) -> None:
    """One round of one call mode on all the servers at once: ``--n`` sequential calls each in blocks of
    ``--block-calls``, then ``--seconds`` of load each in blocks of ``--block-seconds``, the servers taking turns
    block by block."""
    sse = mode == "sse"
    contenders: list[Contender] = []
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            try:
                session = await bounded(session_factory(server, mode)(), BLOCK_TIMEOUT_S)
                stack.push_async_callback(session.close)
                for _ in range(ml.WARMUP_CALLS):
                    await bounded(session.call(ml.TOOL, sse=sse), BLOCK_TIMEOUT_S)
            except CALL_FAILURES as exc:
                results.calls.append(CallFigures(server.spec.name, mode, failure=repr(exc), round=round))
                print(f"  {server.spec.name} {mode}: failed: {exc!r}", flush=True)
                continue
            contenders.append(Contender(server, session=session))
        seq_cycles = -(-args.n // args.block_calls)

        async def sequential(contender: Contender, cycle: int) -> None:
            calls = min(args.block_calls, args.n - cycle * args.block_calls)
            await sequential_block(contender, mode, round, cycle, calls)

        await pairing.take_turns(contenders, seq_cycles, sequential, CALL_FAILURES)
        for contender in contenders:
            if contender.failure is None:
                try:
                    factory = session_factory(contender.server, mode)
                    contender.load_sessions = await bounded(ml.open_all(factory, args.clients), BLOCK_TIMEOUT_S * 2)
                except CALL_FAILURES as exc:
                    contender.failure = repr(exc)
                for opened in contender.load_sessions:
                    stack.push_async_callback(opened.close)
        load_cycles = max(1, round_half_up(args.seconds / args.block_seconds))
        block_seconds = args.seconds / load_cycles

        async def loaded(contender: Contender, cycle: int) -> None:
            await load_block(contender, mode, round, cycle, block_seconds)

        await pairing.take_turns(contenders, load_cycles, loaded, CALL_FAILURES)
    for contender in contenders:
        figures = contender.figures(mode, round)
        results.calls.append(figures)
        results.blocks.extend(contender.blocks)
        print(f"  {contender.name} {mode}: {_call_summary(figures)}", flush=True)


def round_half_up(value: float) -> int:
    return int(value + 0.5)


async def bench_side_by_side(args: argparse.Namespace, results: Results) -> None:
    """Every server started once and kept up; each round, each call mode measured on all of them in turns."""
    started: list[Running] = []
    async with contextlib.AsyncExitStack() as stack:
        for name in args.servers:
            spec = SERVERS[name]
            print(f"== {spec.name}: {spec.description}", flush=True)
            try:
                server = await stack.enter_async_context(running(spec))
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                results.calls.extend(CallFigures(name, mode, failure=repr(exc)) for mode in args.modes)
                print(f"  failed: {exc}", flush=True)
                continue
            print(f"  pid {server.pid} at {server.url}", flush=True)
            started.append(server)
        for round in range(1, args.rounds + 1):
            for mode in args.modes:
                rounds = f", round {round} of {args.rounds}" if args.rounds > 1 else ""
                print(f"== {mode} calls, side by side{rounds}, load average {load_average()}", flush=True)
                await measure_side_by_side(started, mode, args, results, round)
        if args.profile:
            for server in started:
                if server.spec.forge:
                    await profile_json_load(server, args)


async def bench_idle(spec: ServerSpec, args: argparse.Namespace, results: Results) -> None:
    """Each idle-stream kind of one server, each on a fresh process."""
    if args.idle_kinds:
        print(f"== {spec.name}: idle streams", flush=True)
    for kind in args.idle_kinds:
        try:
            async with running(spec) as server:
                figures = await measure_idle(server, kind, args)
        except (ml.CallError, httpx.HTTPError, OSError, TimeoutError, RuntimeError, subprocess.SubprocessError) as exc:
            figures = IdleFigures(spec.name, kind, failure=repr(exc))
        results.idle.append(figures)
        print(f"  idle {kind}: {_idle_summary(figures)}", flush=True)


def _call_summary(c: CallFigures) -> str:
    if c.failure and c.p50_ms is None:
        return f"failed: {c.failure}"
    return (
        f"{c.answers}, p50 {c.p50_ms:.2f} ms, {c.calls_per_s:.0f} calls/s, server CPU "
        f"{_f(c.seq_cpu_ms)}/{_f(c.load_cpu_ms)} ms/call, bg {_f(c.background_pct, 0)}%"
    )


def _idle_summary(i: IdleFigures) -> str:
    if i.kb_per_stream is None:
        return f"failed: {i.failure}"
    return f"{i.opened} open, {i.kb_per_stream:.1f} KB/stream, bg {_f(i.background_pct, 0)}%"


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(ours: float | None, reference: float | None) -> str:
    if ours is None or not reference:
        return "-"
    return f"{ours / reference:.2f}x"


def print_table(results: Results) -> None:
    """One table: a line per server and call mode, then a line per server and idle kind."""
    header = (
        f"{'server':<13} {'round':>5} {'measure':<16} {'answers':<11} {'p50 ms':>7} {'p99 ms':>7} {'seq srv':>8}"
        f" {'calls/s':>8} {'load srv':>8} {'client':>7} {'err':>4} {'opened':>10} {'KB/strm':>8}"
        f" {'KB/GET':>7} {'RSS MB':>7} {'bg %':>5}"
    )
    print(header)
    print("-" * len(header))
    for c in results.calls:
        print(
            f"{c.server:<13} {c.round:>5} {c.mode:<16} {c.answers:<11} {_f(c.p50_ms):>7} {_f(c.p99_ms):>7}"
            f" {_f(c.seq_cpu_ms, 3):>8} {_f(c.calls_per_s, 0):>8} {_f(c.load_cpu_ms, 3):>8}"
            f" {_f(c.client_cpu_ms):>7} {c.errors if c.errors is not None else '-':>4}"
            f" {'-':>10} {'-':>8} {'-':>7} {'-':>7} {_f(c.background_pct, 0):>5}"
        )
    for i in results.idle:
        print(
            f"{i.server:<13} {'-':>5} {'idle ' + i.kind:<16} {'-':<11} {'-':>7} {'-':>7} {'-':>8} {'-':>8} {'-':>8}"
            f" {'-':>7} {'-':>4} {i.opened:>10} {_f(i.kb_per_stream, 1):>8} {_f(i.kb_per_get, 1):>7}"
            f" {_f(i.rss_before_mb, 1):>7} {_f(i.background_pct, 0):>5}"
        )
    failures = [(c.server, c.mode, c.failure or c.first_error) for c in results.calls if c.failure or c.first_error]
    failures += [(i.server, "idle " + i.kind, i.failure) for i in results.idle if i.failure]
    for server, what, failure in failures:
        print(f"  {server} {what}: {failure}")
    print(
        "seq srv / load srv: server CPU ms per call, sequential / at --clients; client: load client CPU ms"
        " per call; KB/strm: server RSS growth per idle stream (session included); KB/GET: per GET stream"
        " on top of open sessions; RSS MB: the fresh server's RSS before the streams; bg %: CPU of other"
        " processes while measuring, % of one core"
    )


@dataclass(frozen=True)
class FigureRow:
    """One line of the ratios: a figure of a Forge server against an SDK reference (and the null server's), the
    values as medians over the rounds. Side by side, the ratio is the median of the paired blocks' ratios, with
    the ratio of the pooled blocks and the blocks' quartiles; in turn (``--in-turn``), the median of each round's
    ratio."""

    figure: str
    ours: str
    ref: str
    value: float | None
    reference: float | None
    null: float | None
    aim: str
    ratio: float | None
    per_round: list[float | None]
    pooled: float | None = None
    quartiles: tuple[float, float] | None = None
    pairs: int = 0


quartiles = pairing.quartiles


def figure_row(results: Results, figure: str, ours: str, ref: str, mode: str, attr: str, aim: str) -> FigureRow:
    per_round = results.round_ratios(ours, ref, mode, attr)
    paired = results.block_ratios(ours, ref, mode, attr)
    return FigureRow(
        figure,
        ours,
        ref,
        results.across_rounds(ours, mode, attr),
        results.across_rounds(ref, mode, attr),
        results.across_rounds("null", mode, attr),
        aim,
        _median(paired) if paired else _median([r for r in per_round if r is not None]),
        per_round,
        results.pooled_ratio(ours, ref, mode, attr),
        quartiles(paired),
        len(paired),
    )


def ratio_rows(results: Results) -> list[FigureRow]:
    """Forge against the SDK server answering in the same form (and the null server for scale), then each Forge
    server against the SDK on daphne for JSON answers, with issue 15's aims; then the idle streams' memory."""
    lines: list[FigureRow] = []
    metrics = (("CPU ms/call seq", "seq_cpu_ms"), ("CPU ms/call load", "load_cpu_ms"), ("calls/s", "calls_per_s"))
    for mode in ("json", "sse", "legacy"):
        pairs = [("forge", REFERENCE[mode], "")]
        if mode == "json":
            pairs += [
                (ours, ref, f"<= {aim:.2f}x")
                for ours, ref, aim in SERVER_AIMS
                if results.call(ours, mode) is not None or results.call(ref, mode) is not None
            ]
        for label, attr in metrics:
            for ours, ref, aim in pairs:
                shown_aim = "higher" if aim and attr == "calls_per_s" else aim  # the aims bound CPU
                lines.append(figure_row(results, f"{mode} {label}", ours, ref, mode, attr, shown_aim))
    for kind in ("streamable", "legacy"):
        ref = REFERENCE.get(kind, "sdk-json")
        forge, sdk, null = results.idle_of("forge", kind), results.idle_of(ref, kind), results.idle_of("null", kind)
        idle_metrics = [("KB/stream", "kb_per_stream")] + (
            [("KB/GET only", "kb_per_get")] if kind == "streamable" else []
        )
        for label, attr in idle_metrics:
            value, reference = getattr(forge, attr, None), getattr(sdk, attr, None)
            ratio = value / reference if value is not None and reference else None
            lines.append(
                FigureRow(
                    f"{kind} {label}", "forge", ref, value, reference, getattr(null, attr, None), "", ratio, [ratio]
                )
            )
    return [line for line in lines if line.value is not None or line.reference is not None]


def _spread(line: FigureRow) -> str:
    return "-" if line.quartiles is None else f"{line.quartiles[0]:.2f}-{line.quartiles[1]:.2f}"


def print_ratios(results: Results) -> None:
    """The ratios of ``ratio_rows``, a line each, and what their columns mean."""
    lines = ratio_rows(results)
    several = len(results.rounds()) > 1
    header = (
        f"{'figure':<24} {'server':<13} {'SDK ref':<10} {'forge':>9} {'SDK':>9} {'forge/SDK':>10} {'pooled':>7}"
        f" {'quartiles':>10} {'pairs':>5} {'aim':>9} {'null':>9}" + ("  rounds" if several else "")
    )
    print(header)
    print("-" * len(header))
    for line in lines:
        rounds = "  " + " ".join(_ratio(r, 1.0) for r in line.per_round) if several and len(line.per_round) > 1 else ""
        print(
            f"{line.figure:<24} {line.ours:<13} {line.ref:<10} {_f(line.value, 3):>9} {_f(line.reference, 3):>9}"
            f" {_ratio(line.ratio, 1.0):>10} {_ratio(line.pooled, 1.0):>7} {_spread(line):>10}"
            f" {line.pairs or '-':>5} {line.aim or '-':>9} {_f(line.null, 3):>9}{rounds}"
        )
    side_by_side = bool(results.blocks)
    print(
        "SDK ref: the SDK server answering in the same form as Forge (sdk-sse for SSE answers; sdk-daphne: the SDK"
        " app on daphne); forge/SDK below 1.00x meets the aim for CPU and memory (above 1.00x for calls/s); aim:"
        " issue 15's bound on the CPU ratio against the SDK on daphne"
        + (
            "; forge/SDK: the median of the ratios of paired blocks (the two servers' turns in one cycle, seconds"
            " apart), pooled: all the paired blocks' CPU over their calls (or calls over seconds), quartiles: of the"
            " paired blocks' ratios, pairs: how many"
            if side_by_side
            else ""
        )
        + (
            "; values are medians over the rounds, rounds: each round's ratio"
            + ("" if side_by_side else ", forge/SDK the median of the rounds' ratios")
            if several
            else ""
        )
    )


def print_header(args: argparse.Namespace) -> None:
    print_heading(
        "MCP benchmark",
        f"--n {args.n} --clients {args.clients} --seconds {args.seconds:g} --streams {args.streams} --rounds {args.rounds}"
        f" servers {','.join(args.servers)}",
    )


def print_heading(title: str, options: str) -> None:
    """The start of a bench run, the same for every bench: what, when, on which machine, with which options."""
    print(f"{title}, {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), Linux {platform.release()}, Python {platform.python_version()}"
    )
    print(f"options: {options}; load average at start {load_average()}")
    print()


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, help="sequential calls per server and mode, for p50/p99 (500; --quick 100)")
    parser.add_argument("--seconds", type=float, help="seconds of load per server and mode (10; --quick 2)")
    parser.add_argument("--streams", type=int, help="idle streams held per kind (2000; --quick 100)")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients for calls/s (20)")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every server's calls this many times; side by side the ratios take every round's paired "
        "blocks, with --in-turn they are the median of the rounds' (1)",
    )
    parser.add_argument(
        "--servers",
        type=ml.csv_of(tuple(SERVERS)),
        default=",".join(SERVERS),
        help=f"subset of {','.join(SERVERS)} (all)",
    )
    parser.add_argument(
        "--modes",
        type=ml.csv_of(MODES),
        default=",".join(MODES),
        help=f"call modes, a subset of {','.join(MODES)} (all)",
    )
    parser.add_argument(
        "--block-calls",
        type=int,
        default=50,
        help="sequential calls in a server's turn when the servers are measured side by side (50)",
    )
    parser.add_argument(
        "--block-seconds",
        type=float,
        default=1.0,
        help="seconds of load in a server's turn when the servers are measured side by side (1)",
    )
    parser.add_argument(
        "--in-turn",
        action="store_true",
        help="the older method: start each server alone, measure all its calls, stop it, then the next",
    )
    parser.add_argument("--no-idle", action="store_true", help="skip the idle-stream measurements")
    parser.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    parser.add_argument(
        "--profile",
        type=Path,
        help="after Forge's call measurements, run one more JSON load phase under py-spy and write its "
        "collapsed stacks here (summarise with bench/profile_summary.py); with both forge servers, the later "
        "one's overwrite the earlier's, so name one in --servers",
    )
    args = parser.parse_args(argv)
    defaults = (100, 2.0, 100) if args.quick else (500, 10.0, 2000)
    args.n = args.n if args.n is not None else defaults[0]
    args.seconds = args.seconds if args.seconds is not None else defaults[1]
    args.streams = args.streams if args.streams is not None else defaults[2]
    if (
        min(args.n, args.clients, args.streams, args.rounds, args.block_calls) < 1
        or min(args.seconds, args.block_seconds) <= 0
    ):
        parser.error(
            "--n, --clients, --streams, --rounds, --block-calls, --seconds and --block-seconds must be positive"
        )
    args.servers = [name for name in SERVERS if name in args.servers]  # fixed order
    args.modes = [mode for mode in MODES if mode in args.modes]
    args.idle_kinds = [] if args.no_idle else list(IDLE_KINDS)
    return args


async def run(args: argparse.Namespace) -> Results:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)  # stop the servers on SIGTERM too
    ml.raise_fd_limit(FD_LIMIT)  # inherited by the servers (Forge does not raise its own)
    results = Results()
    if args.in_turn:
        for round in range(1, args.rounds + 1):  # the servers' call figures in turn, each round, against drift
            for name in args.servers:
                await bench_calls(SERVERS[name], args, results, round)
    elif args.modes:
        await bench_side_by_side(args, results)
    for name in args.servers:
        await bench_idle(SERVERS[name], args, results)
    return results


def main() -> None:
    args = parse_args()
    print_header(args)
    started = time.monotonic()
    results = asyncio.run(run(args))
    report(
        args,
        started,
        [lambda: print_table(results), lambda: print_ratios(results)],
        {**asdict(results), "ratios": [asdict(line) for line in ratio_rows(results)]},
        skip=frozenset({"profile"}),
    )


def report(
    args: argparse.Namespace,
    started: float,
    parts: list[Callable[[], None]],
    figures: dict[str, Any],
    *,
    skip: frozenset[str] = frozenset(),
) -> None:
    """The end of a bench run, the same for every bench: the results header, each printed part (a blank line
    between them), and with --json the figures with the date, machine and options."""
    print()
    print(f"== results ({(time.monotonic() - started) / 60:.1f} min, load average at end {load_average()})")
    for number, part in enumerate(parts):
        if number:
            print()
        part()
    if args.json:
        payload: dict[str, Any] = {
            "date": datetime.now().astimezone().isoformat(timespec="seconds"),
            "cores": os.cpu_count(),
            "cpu": cpu_model(),
            "options": {k: v for k, v in vars(args).items() if k not in {"json", *skip}},
            **figures,
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))


if __name__ == "__main__":
    main()
