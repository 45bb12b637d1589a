"""Head-of-line blocking (issue 15): another client's ``ping`` while one client loops a heavy read, against the
same probe with no heavy client, on one ``runmcp``, measured side by side in one run.

Each ``--workers`` value (default ``1,8``: ``FORGE_WORKERS=1``, roughly the old single database thread, then
the default pool) gets one ``manage.py runmcp`` on a fresh migrated data dir, one after the other, never two
at once: MCP switched on, an operator with a client token (the heavy client), a second user with its own token
(the probe client), and the 50,000-variable project that ``projects_bench.generate`` makes (500 POUs, as
``draft_bench`` uses) registered with ``import_project``. The heavy client's session is allowed on it (its
first project call asks, then ``manage.py access_requests allow --pending``).

* **heavy call**: the read-only project calls that could be the heavy one (``project.export``,
  ``project.check``, ``project.find`` of a name that matches nothing, ``project.list_variables`` and
  ``project.suggest_placement`` with the largest page) are each timed alone (one warm-up, then
  ``--heavy-samples``) and the one with the highest p50 is the heavy call (``--heavy`` names one instead).
* **probe**: a second Streamable HTTP session (2025-11-25) sends, every ``--interval-ms`` (10), a JSON-RPC
  ``ping`` and a ``tools/call server_info`` in turn (a probe that comes back late is followed at once, with no
  catch-up burst) and keeps each one's latency.
* **phases**: ``alone`` (the probe only) and ``loaded`` (the probe while the heavy client calls the heavy call
  back to back on its own session), ``--phase-seconds`` each, ``--rounds`` of each alternated (alone, loaded,
  loaded, alone, ...) so a drift of the VM's speed weighs on both. A loaded phase starts its heavy loop first
  and ends only when the heavy call in flight has come back, so no alone phase has a heavy call running. The
  heavy client runs in a process of its own (``--heavy-child``, on the heavy session), as another client would:
  on the probe's event loop, its reading and parsing of each answer (122 KB for ``project.check``) delayed the
  probes due meanwhile. Its CPU is in a loaded phase's ``bg %``.

It prints p50/p99/max of each probe in each phase (all rounds' probes pooled) and the issue's figure, loaded p99
/ alone p99 (aim: at most 1.5x; before the pool, a probe waited for the heavy call's whole duration): the median
of the rounds' ratios, each from a round's two phases measured back to back, with each round's ratio and the ratio
of all the rounds' probes pooled (on a busy host the worst round's tail sets a pooled p99, so the pooled ratio
moves more between runs), per ``--workers`` value side by side, with the heavy call's p50 alone and under the
probe, the server's CPU (of its process tree, as % of one core) and ``bg %``, the CPU of other processes while a
phase ran (as in ``run_all``).

    .venv/bin/python bench/hol_bench.py                        # FORGE_WORKERS 1 and 8, about 4 minutes
    .venv/bin/python bench/hol_bench.py --quick                # smoke run, about 2 minutes
    .venv/bin/python bench/hol_bench.py --workers 8 --json /tmp/hol.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import confirm_latency as cl
import mcp_load as ml
import run_all as ra
from projects_bench import generate

POUS = 500
SLUG = "bench-hol"
OPERATOR = "bench-operator"
PROBE_USER = "bench-probe"
MISS = "no-such-element-anywhere"
MAX_PAGE = 200  # projects.plcopen.MAX_LIMIT
HEAVY_CANDIDATES: dict[str, dict[str, Any]] = {
    "project.export": {"project": SLUG},
    "project.check": {"project": SLUG, "limit": MAX_PAGE},
    "project.find": {"project": SLUG, "text": MISS, "limit": MAX_PAGE},
    "project.list_variables": {"project": SLUG, "limit": MAX_PAGE},
    "project.suggest_placement": {"project": SLUG, "topic": "conveyor speed", "limit": MAX_PAGE},
}
PROBES = ("ping", "server_info")
PHASES = ("alone", "loaded")
# Variables that would move the server off the data dir, database and files this runner gives it.
OVERRIDDEN_ENV = (
    *ra.SCALE_OUT_ENV,
    "DJANGO_SETTINGS_MODULE",
    "FORGE_SECRETS_DIR",
    "FORGE_PROJECTS_ROOT",
    "FORGE_AUDIT_LOG",
    "FORGE_WORKERS",
)
HEAVY_STOP_TIMEOUT_S = 120.0
HEAVY_CHILD_IDS = 1_000_000


# --------------------------------------------------------------------------
# The server: a fresh data dir with the generated project
# --------------------------------------------------------------------------


@dataclass
class Server:
    workers: str
    pid: int
    url: str
    heavy_token: str
    probe_token: str
    env: dict[str, str]

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def prepare(data_dir: Path, source: Path, workers: str) -> tuple[dict[str, str], str, str]:
    """Migrate, switch MCP on, make the operator (heavy client's token) and the probe user's token, import the
    project; return the server's env and both tokens."""
    env = {k: v for k, v in os.environ.items() if k not in OVERRIDDEN_ENV}
    count, _, switch_ms = workers.partition("@")
    env.update({"FORGE_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", "FORGE_WORKERS": count})
    if switch_ms:
        env["FORGE_GIL_SWITCH_MS"] = switch_ms
    cl.manage(env, "migrate", "--noinput", "-v", "0")
    cl.manage(env, "mcp_switch", "on")
    password = data_dir / "operator-password"
    password.write_text("hol-bench-operator-password")
    cl.manage(env, "create_operator", OPERATOR, "--password-file", str(password))
    heavy_token = cl.last_line(cl.manage(env, "create_token", "--user", OPERATOR, "--label", "hol-heavy"))
    probe_token = cl.last_line(
        cl.manage(env, "create_token", "--user", PROBE_USER, "--create-user", "--label", "hol-probe")
    )
    if not heavy_token.startswith("fmcp_") or not probe_token.startswith("fmcp_"):
        raise RuntimeError("create_token printed no token")
    cl.manage(env, "import_project", str(source), "--slug", SLUG)
    return env, heavy_token, probe_token


@contextlib.asynccontextmanager
async def running(source: Path, workers: str) -> AsyncIterator[Server]:
    """One runmcp with FORGE_WORKERS=workers on a fresh data dir; always stopped, its dir removed."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-hol-w{workers.replace('@', '-')}-"))
    try:
        data_dir = workdir / "data"
        data_dir.mkdir()
        env, heavy_token, probe_token = await asyncio.to_thread(prepare, data_dir, source, workers)
        async with cl.servers([env], workdir) as started:
            ((base, pid, _log),) = started
            yield Server(workers, pid, f"{base}/mcp", heavy_token, probe_token, env)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------


async def tool(session: ml.StreamableSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call; its structured outcome, raising on a JSON-RPC error or a refusal."""
    request_id = next(session.ids)
    response = await session.post(ml.jsonrpc_request(request_id, "tools/call", {"name": name, "arguments": arguments}))
    outcome = cl.tool_outcome(ml.response_message(response, request_id))
    if outcome.get("error"):
        raise RuntimeError(f"{name} refused: {str(outcome)[:300]}")
    return outcome


async def heavy_session(server: Server) -> ml.StreamableSession:
    """The heavy client's session, allowed on the project (its first project call asks; the operator allows)."""
    session = await ml.streamable_session(server.url, server.headers(server.heavy_token))
    try:
        request_id = next(session.ids)
        params = {"name": "project.overview", "arguments": {"project": SLUG}}
        response = await session.post(ml.jsonrpc_request(request_id, "tools/call", params))
        first = cl.tool_outcome(ml.response_message(response, request_id))
        if first.get("error") == "FORGE_ERR_PROJECT_ACCESS_PENDING":
            await asyncio.to_thread(cl.manage, server.env, "access_requests", "allow", "--pending", "--as", OPERATOR)
            await tool(session, "project.overview", {"project": SLUG})
        elif first.get("error"):
            raise RuntimeError(f"project.overview refused: {first}")
    except BaseException:
        await session.close()
        raise
    return session


async def probe_once(session: ml.StreamableSession, kind: str) -> float:
    """One probe's round trip in ms: a JSON-RPC ping, or tools/call server_info."""
    start = time.perf_counter()
    if kind == "ping":
        request_id = next(session.ids)
        response = await session.post(ml.jsonrpc_request(request_id, "ping", {}))
        ml.checked(ml.response_message(response, request_id))
    else:
        await session.call(ml.TOOL)
    return (time.perf_counter() - start) * 1000


async def probe_for(session: ml.StreamableSession, seconds: float, interval_s: float) -> dict[str, list[float]]:
    """Probes in turn (ping, server_info, ...) every ``interval_s`` for ``seconds``; a late one is followed at
    once, never by a burst."""
    samples: dict[str, list[float]] = {kind: [] for kind in PROBES}
    deadline = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < deadline:
        tick = time.monotonic()
        kind = PROBES[turn % len(PROBES)]
        samples[kind].append(await probe_once(session, kind))
        turn += 1
        await asyncio.sleep(max(0.0, tick + interval_s - time.monotonic()))
    return samples


class HeavyLoop:
    """The heavy client calling one tool back to back until told to stop, in a process of its own (``--heavy-child``)
    on the heavy session: another client is another process, so its reading and parsing of each large answer must
    not hold up the probe's event loop, as it did when the loop ran beside the probe."""

    def __init__(self, session: ml.StreamableSession, name: str, arguments: dict[str, Any], first_id: int) -> None:
        self.spec = {
            "url": session.url,
            "headers": session.headers,
            "name": name,
            "arguments": arguments,
            "first_id": first_id,
        }
        self.durations: list[float] = []
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Start the child and return once its first heavy call is on its way."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).resolve()),
            "--heavy-child",
            json.dumps(self.spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = await ra.bounded(self.process.stdout.readline(), HEAVY_STOP_TIMEOUT_S)
        if line.strip() != b"started":
            raise RuntimeError(f"the heavy client did not start: {line[:300]!r}")

    async def stop(self) -> None:
        """Tell the child to stop; it answers once the call in flight has come back, with every call's duration."""
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(b"stop\n")
            await process.stdin.drain()
            line = await ra.bounded(process.stdout.readline(), HEAVY_STOP_TIMEOUT_S)
            outcome = json.loads(line or b"{}")
            if outcome.get("error"):
                raise RuntimeError(f"the heavy client failed: {outcome['error']}")
            self.durations = outcome["durations"]
            await ra.bounded(process.wait(), HEAVY_STOP_TIMEOUT_S)
        finally:
            if process.returncode is None:  # it failed to answer or to end: it is not left behind
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


async def heavy_child(spec: dict[str, Any]) -> None:
    """``--heavy-child``: call the tool back to back on the given session until a line arrives on stdin, then print
    the calls' durations (ms) as one JSON line."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=lambda: (sys.stdin.readline(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    session = ml.StreamableSession(ml.new_client(), spec["url"], spec["headers"], None)
    session.ids = itertools.count(spec["first_id"])
    durations: list[float] = []
    error = None
    print("started", flush=True)
    try:
        while not stop.is_set():
            start = time.perf_counter()
            await tool(session, spec["name"], spec["arguments"])
            durations.append((time.perf_counter() - start) * 1000)
    except Exception as exc:  # told to the parent, which stops the run with it
        error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        await session.close()  # no session id of its own: the connection pool only, the session stays the parent's
    print(json.dumps({"durations": durations, "error": error}), flush=True)


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------


@dataclass
class Spread:
    count: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        if not samples:
            return cls()
        ordered = sorted(samples)
        return cls(len(ordered), ml.percentile(ordered, 0.5), ml.percentile(ordered, 0.99), ordered[-1])


@dataclass
class WorkersFigures:
    workers: str
    heavy_tool: str = ""
    candidates: dict[str, Spread] = field(default_factory=dict)
    heavy_loaded: Spread = field(default_factory=Spread)
    probes: dict[str, dict[str, Spread]] = field(default_factory=dict)  # phase -> probe -> spread
    server_cpu_pct: dict[str, float] = field(default_factory=dict)  # phase -> % of one core
    background_pct: dict[str, float] = field(default_factory=dict)
    # Each round's probe latencies (ms): round -> phase -> probe -> samples.
    round_samples: list[dict[str, dict[str, list[float]]]] = field(default_factory=list)

    def round_ratios(self, probe: str) -> list[float | None]:
        """Per round, the probe's loaded p99 over its alone p99, both from that round's phases."""
        ratios: list[float | None] = []
        for phases in self.round_samples:
            alone, loaded = Spread.of(phases["alone"][probe]).p99_ms, Spread.of(phases["loaded"][probe]).p99_ms
            ratios.append(loaded / alone if alone and loaded is not None else None)
        return ratios

    def ratio(self, probe: str) -> float | None:
        """The issue's figure: the median of the rounds' loaded p99 / alone p99. A round's two phases run back to
        back, so a drift of the host's speed or of other work between rounds stays out of its ratio; pooling
        every round's probes instead lets the worst round's tail set the p99 of either phase."""
        ratios = [r for r in self.round_ratios(probe) if r is not None]
        return statistics.median(ratios) if ratios else None

    def pooled_ratio(self, probe: str) -> float | None:
        """Loaded p99 / alone p99 of all the rounds' probes pooled."""
        alone = self.probes.get("alone", {}).get(probe)
        loaded = self.probes.get("loaded", {}).get(probe)
        if alone is None or loaded is None or not alone.p99_ms or loaded.p99_ms is None:
            return None
        return loaded.p99_ms / alone.p99_ms

    @property
    def heavy_alone(self) -> Spread:
        return self.candidates.get(self.heavy_tool, Spread())


async def time_candidates(session: ml.StreamableSession, names: list[str], samples: int) -> dict[str, Spread]:
    timed: dict[str, Spread] = {}
    for name in names:
        arguments = HEAVY_CANDIDATES[name]
        await tool(session, name, arguments)  # warm-up: the first read parses and indexes the project
        durations = []
        for _ in range(samples):
            start = time.perf_counter()
            await tool(session, name, arguments)
            durations.append((time.perf_counter() - start) * 1000)
        timed[name] = Spread.of(durations)
        print(f"    {name}: p50 {_f(timed[name].p50_ms)} ms alone", flush=True)
    return timed


async def measure(server: Server, args: argparse.Namespace) -> WorkersFigures:
    figures = WorkersFigures(server.workers)
    heavy = await heavy_session(server)
    probe = await ml.streamable_session(server.url, server.headers(server.probe_token))
    try:
        names = [args.heavy] if args.heavy else list(HEAVY_CANDIDATES)
        figures.candidates = await time_candidates(heavy, names, args.heavy_samples)
        figures.heavy_tool = max(figures.candidates, key=lambda n: figures.candidates[n].p50_ms or 0.0)
        print(f"  heavy call: {figures.heavy_tool}", flush=True)
        for _ in range(ml.WARMUP_CALLS):
            for kind in PROBES:
                await probe_once(probe, kind)
        samples: dict[str, dict[str, list[float]]] = {phase: {kind: [] for kind in PROBES} for phase in PHASES}
        cpu_ms = dict.fromkeys(PHASES, 0.0)
        wall_ms = dict.fromkeys(PHASES, 0.0)
        background = dict.fromkeys(PHASES, 0.0)
        heavy_durations: list[float] = []
        interval_s = args.interval_ms / 1000
        for round_ in range(args.rounds):
            figures.round_samples.append({})
            for phase in PHASES if round_ % 2 == 0 else tuple(reversed(PHASES)):
                window = ra.BackgroundWindow(server.pid)
                cpu_before, wall_before = ml.server_cpu_ms(server.pid), time.monotonic()
                loop: HeavyLoop | None = None
                if phase == "loaded":
                    first_id = HEAVY_CHILD_IDS * (round_ + 1)  # ids the parent's calls on the session never reach
                    loop = HeavyLoop(heavy, figures.heavy_tool, HEAVY_CANDIDATES[figures.heavy_tool], first_id)
                    await loop.start()
                try:
                    got = await probe_for(probe, args.phase_seconds, interval_s)
                finally:
                    if loop is not None:
                        await loop.stop()  # the call in flight comes back first
                if loop is not None:
                    heavy_durations.extend(loop.durations)
                cpu_ms[phase] += ml.server_cpu_ms(server.pid) - cpu_before
                wall_ms[phase] += (time.monotonic() - wall_before) * 1000
                background[phase] += window.percent_of_core()
                for kind in PROBES:
                    samples[phase][kind].extend(got[kind])
                figures.round_samples[-1][phase] = got
                loaded_note = f", {len(loop.durations)} heavy calls" if loop is not None else ""
                print(
                    f"  round {round_ + 1} {phase}: ping p99 {_f(Spread.of(got['ping']).p99_ms)} ms,"
                    f" server_info p99 {_f(Spread.of(got['server_info']).p99_ms)} ms{loaded_note}",
                    flush=True,
                )
        figures.probes = {phase: {kind: Spread.of(samples[phase][kind]) for kind in PROBES} for phase in PHASES}
        figures.heavy_loaded = Spread.of(heavy_durations)
        figures.server_cpu_pct = {phase: cpu_ms[phase] * 100 / max(wall_ms[phase], 1.0) for phase in PHASES}
        figures.background_pct = {phase: background[phase] / args.rounds for phase in PHASES}
    finally:
        await probe.close()
        await heavy.close()
    return figures


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


_f = ra._f


def _label(workers: str) -> str:
    return f"workers={workers}"


def _ratio(ours: float | None, reference: float | None) -> str:
    return "-" if ours is None or not reference else f"{ours / reference:.2f}x"


def print_candidates(results: list[WorkersFigures]) -> None:
    names = list(dict.fromkeys(name for figures in results for name in figures.candidates))
    header = f"{'heavy candidate, alone':<28}" + "".join(f" {_label(f.workers) + ' p50/p99 ms':>26}" for f in results)
    print(header)
    print("-" * len(header))
    for name in names:
        cells = []
        for figures in results:
            spread = figures.candidates.get(name)
            cells.append("-" if spread is None else f"{_f(spread.p50_ms, 1)} / {_f(spread.p99_ms, 1)}")
        print(f"{name:<28}" + "".join(f" {cell:>26}" for cell in cells))


def print_phases(results: list[WorkersFigures]) -> None:
    header = (
        f"{'workers':>7} {'phase':<7} {'probe':<12} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
        f" {'srv %':>6} {'bg %':>5}"
    )
    print(header)
    print("-" * len(header))
    for figures in results:
        for phase in PHASES:
            for kind in PROBES:
                spread = figures.probes.get(phase, {}).get(kind, Spread())
                print(
                    f"{figures.workers:>7} {phase:<7} {kind:<12} {spread.count:>6} {_f(spread.p50_ms):>8}"
                    f" {_f(spread.p99_ms):>8} {_f(spread.max_ms):>8} {_f(figures.server_cpu_pct.get(phase), 0):>6}"
                    f" {_f(figures.background_pct.get(phase), 0):>5}"
                )
    print(
        "n: probes answered (one held behind a heavy call is one sample, so a blocked loaded phase has few);"
        " srv %: the server's CPU over the phases of that kind, % of one core; bg %: other processes' CPU, % of one"
        " core"
    )


def print_ratios(results: list[WorkersFigures]) -> None:
    header = f"{'figure':<44}" + "".join(f" {_label(f.workers):>14}" for f in results)
    print(header)
    print("-" * len(header))
    rows: list[tuple[str, list[str]]] = [("heavy call", [f.heavy_tool for f in results])]
    for kind in PROBES:
        rows.append((f"{kind} p99 loaded / alone (aim <= 1.5x)", [_ratio(f.ratio(kind), 1.0) for f in results]))
        rows.append((f"{kind}, all rounds' probes pooled", [_ratio(f.pooled_ratio(kind), 1.0) for f in results]))
    rows += [
        ("heavy call p50 ms, alone", [_f(f.heavy_alone.p50_ms, 1) for f in results]),
        ("heavy call p50 ms, under the probe", [_f(f.heavy_loaded.p50_ms, 1) for f in results]),
        ("heavy calls made under the probe", [str(f.heavy_loaded.count) for f in results]),
        (
            "ping p99 loaded / heavy call p50",
            [_ratio(f.probes.get("loaded", {}).get("ping", Spread()).p99_ms, f.heavy_alone.p50_ms) for f in results],
        ),
    ]
    for label, cells in rows:
        print(f"{label:<44}" + "".join(f" {cell[:14]:>14}" for cell in cells))
    for figures in results:
        for kind in PROBES:
            each = " ".join(_ratio(r, 1.0) for r in figures.round_ratios(kind))
            print(f"{_label(figures.workers)}, {kind} p99 loaded / alone in each round: {each}")
    print(
        "the issue's figure is the ping row, the median of the rounds' ratios (each round's loaded and alone phases"
        " back to back); near 1.0x under 'ping p99 loaded / heavy call p50' means a ping waited for a whole heavy"
        " call"
    )


def print_header(args: argparse.Namespace) -> None:
    print(f"Head-of-line benchmark, {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(
        f"machine: {os.cpu_count()} cores ({ra.cpu_model()}), Linux {platform.release()},"
        f" Python {platform.python_version()}"
    )
    print(
        f"options: --workers {','.join(map(str, args.workers))} --variables {args.variables}"
        f" --rounds {args.rounds} --phase-seconds {args.phase_seconds:g} --interval-ms {args.interval_ms:g}"
        f" --heavy-samples {args.heavy_samples}{' --heavy ' + args.heavy if args.heavy else ''};"
        f" load average at start {ra.load_average()}"
    )
    print()


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def _workers(text: str) -> list[str]:
    """Server configurations: FORGE_WORKERS, each optionally with FORGE_GIL_SWITCH_MS after an @ (8@5)."""
    values = [part.strip() for part in text.split(",") if part.strip()]
    try:
        if not values or any(int(v.partition("@")[0]) < 1 or float(v.partition("@")[2] or 1) <= 0 for v in values):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            "a comma-separated list of thread counts, each optionally @ms (1,8,8@5)"
        ) from None
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workers",
        type=_workers,
        default=["1", "8"],
        help="FORGE_WORKERS of each server, in turn, each optionally @FORGE_GIL_SWITCH_MS (1,8; e.g. 1,8@5,8)",
    )
    parser.add_argument("--variables", type=int, default=50_000, help="variables of the generated project (50000)")
    parser.add_argument("--rounds", type=int, help="alone and loaded phases each (4; --quick 2)")
    parser.add_argument("--phase-seconds", type=float, help="duration of one phase (8; --quick 3)")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="one probe every this many ms (10)")
    parser.add_argument("--heavy", choices=sorted(HEAVY_CANDIDATES), help="the heavy call (the slowest candidate)")
    parser.add_argument("--heavy-samples", type=int, help="timed calls of each heavy candidate alone (5; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    args = parser.parse_args(argv)
    defaults = (2, 3.0, 3) if args.quick else (4, 8.0, 5)
    args.rounds = args.rounds if args.rounds is not None else defaults[0]
    args.phase_seconds = args.phase_seconds if args.phase_seconds is not None else defaults[1]
    args.heavy_samples = args.heavy_samples if args.heavy_samples is not None else defaults[2]
    if min(args.rounds, args.heavy_samples, args.variables) < 1 or min(args.phase_seconds, args.interval_ms) <= 0:
        parser.error("counts and durations must be positive")
    return args


async def run(args: argparse.Namespace) -> list[WorkersFigures]:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)  # stop the server on SIGTERM too
    results: list[WorkersFigures] = []
    with tempfile.TemporaryDirectory(prefix="bench-hol-project-") as tmp:
        source = Path(tmp) / "generated.xml"
        source.write_bytes(await asyncio.to_thread(generate, POUS, args.variables))
        for workers in args.workers:
            print(f"== FORGE_WORKERS={workers}: runmcp, fresh data dir, {args.variables:,} variables", flush=True)
            async with running(source, workers) as server:
                print(f"  pid {server.pid}, {server.url}", flush=True)
                results.append(await measure(server, args))
    return results


def main() -> None:
    if sys.argv[1:2] == ["--heavy-child"]:
        asyncio.run(heavy_child(json.loads(sys.argv[2])))
        return
    args = parse_args()
    print_header(args)
    started = time.monotonic()
    results = asyncio.run(run(args))
    servers = [
        {
            **asdict(figures),
            "ratios": {kind: figures.ratio(kind) for kind in PROBES},
            "pooled_ratios": {kind: figures.pooled_ratio(kind) for kind in PROBES},
            "round_ratios": {kind: figures.round_ratios(kind) for kind in PROBES},
        }
        for figures in results
    ]
    parts = [lambda: print_candidates(results), lambda: print_phases(results), lambda: print_ratios(results)]
    ra.report(args, started, parts, {"servers": servers})


if __name__ == "__main__":
    main()
