"""Scale-out bench: Forge's JSON call on the embedded deployment and on PostgreSQL + Redis, one and two processes.

Issue 15 asks that the scale-out path cost little more than the embedded one per call and that a second
process not make a call dearer nor the whole slower. In one run this bench starts, side by side:

* ``embedded``: one ``manage.py runmcp`` (daphne) on SQLite and the in-memory channel layer (the default);
* ``pg-1``: one ``runmcp`` on a scratch PostgreSQL database (made from ``DATABASE_URL``, dropped after) and
  Redis (``REDIS_URL``);
* ``pg-2``: that process and a second one on the same database, Redis, secrets and projects directory
  (``confirm_latency``'s two-process deployment), the clients split evenly between the two.

Every deployment gets the workload ``run_all.py`` measures for JSON answers (``tools/call server_info`` with
a bearer token, audited): ``--n`` back-to-back calls on one session (p50/p99, the server CPU per call), then
``--clients`` sessions calling back to back for ``--seconds`` (calls/s, the server CPU per call). Server CPU
is the sum over a deployment's server processes (from /proc). All processes stay up for the whole run, and the
deployments take turns in short blocks as ``run_all.py``'s servers do (``pairing.py``): ``--n`` sequential calls
each in blocks of ``--block-calls`` (50, after a few unmeasured calls) on one session per deployment, then
``--seconds`` of load each in blocks of ``--block-seconds`` (1 s) on ``--clients`` sessions per deployment opened
beforehand; one block of every deployment makes a cycle, each cycle starting one deployment later than the last.
A deployment's figures (its servers' CPU, PostgreSQL's, Redis's, the machine's) are taken over its own blocks
only; a process not being measured is idle (``pg-2``'s first process is ``pg-1``'s: its CPU counts to the
deployment whose block it served). The machine's speed drifts by tens of percent within a minute, so each
ratio is the median of the ratios of paired blocks (the two deployments' blocks of one cycle, seconds apart),
printed with the ratio of the pooled blocks and the pairs' quartiles. ``--rounds`` (2) repeats the whole
measurement on the same processes. ``--in-turn`` keeps the older method: each deployment measured in one go,
round by round (each round in the reverse order of the one before), each ratio the ratio of the means.

``--deployments`` can add ``pg-2-mirror``: ``pg-2`` with a third process in the second one's place that appends
to the first process's audit mirror file rather than keeping its own (each process's own mirror must copy in
the other's lines before every append of its own).

On this kind of machine (two cores) the load client, PostgreSQL, Redis and the servers share the cores, so
the bench also reports PostgreSQL's CPU per call (the backends connected to the scratch database, found in
``pg_stat_activity``, and the WAL writer, background writer and checkpointer), redis-server's, the commands
Redis ran per call (all its clients), how busy the machine was (``busy %``, of all cores) and what ran
besides all these (``other``, % of one core: other people's work on a shared machine shows there). The
PostgreSQL deployments are skipped, with a message, unless both DATABASE_URL and REDIS_URL are set.

``--profile FILE`` then looks at ``pg-1`` and ``pg-2`` more closely: the database work of one call (from
PostgreSQL's statistics views: transactions, rows read and written, scans per table), then a load phase on
each with py-spy on its first process, once sampling the GIL's holder (where the CPU goes) and once all
threads (where the worker threads' wall time goes, waits included), written as collapsed stacks to FILE,
FILE.wall, FILE.pg-2 and FILE.pg-2.wall and summarised with ``profile_summary.py``, while what their database
connections were doing is sampled from ``pg_stat_activity`` (running, idle in a transaction, waiting for the
audit chain's advisory lock or another lock) and the transactions per call under load are counted (two reads,
then the audit's group-committed batches: the fewer, the fuller the batches).

    .venv/bin/python bench/scaleout_bench.py                       # embedded only (no DATABASE_URL/REDIS_URL)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/scaleout_bench.py --rounds 4 --deployments embedded,pg-1,pg-2,pg-2-mirror \\
        --profile /tmp/scaleout.txt --json /tmp/scaleout.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import confirm_latency as cl
import httpx
import mcp_load as ml
import pairing
import profile_summary
import psycopg
import redis
import run_all as ra

DEPLOYMENTS = {
    "embedded": "one runmcp, SQLite + in-memory channel layer",
    "pg-1": "one runmcp, scratch PostgreSQL database + Redis",
    "pg-2": "two runmcp on that database, Redis, secrets and projects; clients split evenly",
    "pg-2-mirror": "pg-2, but the second process appends to the first's audit mirror file instead of its own",
}
SCALE_OUT = ("pg-1", "pg-2", "pg-2-mirror")
DEFAULT_DEPLOYMENTS = ("embedded", "pg-1", "pg-2")
# Issue 15's aims: (figure, attribute, deployment, reference, aim, whether higher is better).
AIMS = (
    ("server CPU ms/call seq", "seq_cpu_ms", "pg-1", "embedded", 1.3, False),
    ("server CPU ms/call load", "load_cpu_ms", "pg-1", "embedded", 1.3, False),
    ("server CPU ms/call seq", "seq_cpu_ms", "pg-2", "pg-1", 1.1, False),
    ("server CPU ms/call load", "load_cpu_ms", "pg-2", "pg-1", 1.1, False),
    ("calls/s", "calls_per_s", "pg-2", "pg-1", 1.0, True),
)
# Figures shown beside the aims, for what they explain.
CONTEXT = (
    ("calls/s", "calls_per_s", "pg-1", "embedded"),
    ("server+PG CPU ms/call load", "deployment_cpu_ms", "pg-1", "embedded"),
    ("server+PG CPU ms/call load", "deployment_cpu_ms", "pg-2", "pg-1"),
    ("server CPU ms/call load", "load_cpu_ms", "pg-2-mirror", "pg-1"),
    ("calls/s", "calls_per_s", "pg-2-mirror", "pg-1"),
    ("p50 ms", "p50_ms", "pg-1", "embedded"),
    ("p99 ms", "p99_ms", "pg-1", "embedded"),
)
WARM_UP_S = 2.0
STATS_FLUSH_S = 11.0  # PostgreSQL 15 flushes an idle backend's statistics within 10 s
SAMPLE_EVERY_S = 0.02


# --------------------------------------------------------------------------
# The deployments
# --------------------------------------------------------------------------


@dataclass
class Deployment:
    """Where a deployment's clients call (split evenly over ``urls``) and the pids of its server processes."""

    name: str
    urls: list[str]
    pids: list[int]
    headers: dict[str, str]
    database_url: str = ""
    redis_url: str = ""

    def session_factory(self) -> ml.SessionFactory:
        urls = itertools.cycle(self.urls)

        async def factory() -> ml.Session:
            return await ml.streamable_session(next(urls), self.headers)

        return factory


@contextlib.asynccontextmanager
async def deployments(
    names: list[str], workdir: Path, wrapper: Sequence[str] = ()
) -> AsyncIterator[dict[str, Deployment]]:
    """Start every process the named deployments need (the PostgreSQL ones share their first process), each under
    `wrapper` if one is given (`cl.servers`); stop them all and drop the scratch database whatever happens."""
    with contextlib.ExitStack() as stack:
        embedded = workdir / "embedded"
        embedded.mkdir()
        token = await asyncio.to_thread(ra.prepare_forge, embedded)
        envs = [ra.server_env(embedded)]
        shared: dict[str, str] = {}
        if any(name in SCALE_OUT for name in names):
            shared = stack.enter_context(cl.scale_out_settings())
            first, second, third = workdir / "pg-a", workdir / "pg-b", workdir / "pg-c"
            for data_dir in (first, second, third):
                data_dir.mkdir()
            mirror = {"FORGE_AUDIT_LOG": str(first / "audit" / "audit.jsonl")}
            pg_token = await asyncio.to_thread(ra.prepare_forge, first, **shared, **mirror)
            envs += [
                ra.server_env(first, **shared, **mirror),
                ra.server_env(second, **shared, **cl.sibling_settings(first)),
            ]
            if "pg-2-mirror" in names:
                envs.append(ra.server_env(third, **shared, **cl.sibling_settings(first), **mirror))
        async with cl.servers(envs, workdir, wrapper) as started:
            urls = [f"{base}/mcp" for base, _pid, _log in started]
            pids = [pid for _base, pid, _log in started]
            found = {"embedded": Deployment("embedded", urls[:1], pids[:1], {"Authorization": f"Bearer {token}"})}
            if shared:
                pg = {"Authorization": f"Bearer {pg_token}"}
                database, cache = shared["DATABASE_URL"], shared["REDIS_URL"]
                found["pg-1"] = Deployment("pg-1", urls[1:2], pids[1:2], pg, database, cache)
                found["pg-2"] = Deployment("pg-2", urls[1:3], pids[1:3], pg, database, cache)
                if len(pids) > 3:
                    both = [urls[1], urls[3]], [pids[1], pids[3]]
                    found["pg-2-mirror"] = Deployment("pg-2-mirror", *both, pg, database, cache)
            yield {name: found[name] for name in names}


# --------------------------------------------------------------------------
# What else ran: PostgreSQL, Redis, the machine
# --------------------------------------------------------------------------


def service_roots(command: str) -> list[int]:
    """The processes named ``command`` whose parent is not: the roots of a local service's process tree
    (redis-server). Empty when the service runs elsewhere."""
    named: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if (entry / "comm").read_text().strip() == command:
                    named[int(entry.name)] = int(ml._stat_fields(int(entry.name))[1])
    return [pid for pid, parent in named.items() if parent not in named]


def redis_commands(url: str) -> int:
    """Commands Redis has run since its statistics were last reset (all clients)."""
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        stats = client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


POSTGRES_PROCESSES = """
SELECT pid FROM pg_stat_activity
WHERE (datname = current_database() AND pid <> pg_backend_pid())
   OR backend_type IN ('walwriter', 'background writer', 'checkpointer')
"""


def postgres_cpu_ms(url: str) -> dict[int, float]:
    """CPU (ms) used so far by each PostgreSQL process working for the database at ``url``: its backends, and the
    WAL writer, background writer and checkpointer (which also serve any other busy database). Empty when
    PostgreSQL runs on another machine."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [int(row[0]) for row in conn.execute(POSTGRES_PROCESSES).fetchall()]
    used: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = ml._stat_fields(pid)
            used[pid] = (int(fields[11]) + int(fields[12])) * 1000 / ml.CLK_TCK
    return used


@dataclass(frozen=True)
class Snapshot:
    """CPU used so far (ms) by the servers, PostgreSQL (by process), Redis, this client and the whole machine."""

    wall: float
    machine: float
    servers: float
    postgres: dict[int, float]
    redis: float
    client: float
    redis_commands: int

    @classmethod
    def take(cls, dep: Deployment, redis_roots: list[int]) -> Snapshot:
        return cls(
            wall=time.monotonic(),
            machine=ra.machine_busy_ms(),
            servers=ml.server_cpu_ms(dep.pids),
            postgres=postgres_cpu_ms(dep.database_url) if dep.database_url else {},
            redis=ml.server_cpu_ms(redis_roots) if redis_roots else 0.0,
            client=time.process_time() * 1000,
            redis_commands=redis_commands(dep.redis_url) if dep.redis_url else 0,
        )


@dataclass
class Phase:
    """What a span of calls cost outside the servers' own CPU (per call, or in % of cores)."""

    postgres_ms: float | None = None
    redis_ms: float | None = None
    redis_commands: float | None = None
    busy_pct: float | None = None
    other_pct: float | None = None

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot, calls: int) -> Phase:
        wall_ms = max((after.wall - before.wall) * 1000, 1.0)
        calls = max(calls, 1)
        # A backend the pool opened during the span counts whole: all its CPU is the span's.
        postgres = sum(used - before.postgres.get(pid, 0.0) for pid, used in after.postgres.items())
        used = {
            name: getattr(after, name) - getattr(before, name) for name in ("machine", "servers", "redis", "client")
        }
        other = used["machine"] - used["servers"] - postgres - used["redis"] - used["client"]
        return cls(
            postgres_ms=postgres / calls if after.postgres else None,
            redis_ms=used["redis"] / calls if after.redis else None,
            redis_commands=(after.redis_commands - before.redis_commands) / calls if after.redis_commands else None,
            busy_pct=used["machine"] * 100 / (wall_ms * (os.cpu_count() or 1)),
            other_pct=max(other, 0.0) * 100 / wall_ms,
        )

    @classmethod
    def combined(cls, blocks: list[DeploymentBlock]) -> Phase:
        """The blocks' costs together: per call weighted by the calls each block's span counted, in % weighted by
        each block's wall time."""

        def weighted(attr: str, weight: str) -> float | None:
            parts = [(getattr(b.costs, attr), getattr(b, weight)) for b in blocks]
            parts = [(value, w) for value, w in parts if value is not None]
            total = sum(w for _value, w in parts)
            return sum(value * w for value, w in parts) / total if parts and total else None

        per_call = ("postgres_ms", "redis_ms", "redis_commands")
        per_wall = ("busy_pct", "other_pct")
        return cls(**{a: weighted(a, "span_calls") for a in per_call}, **{a: weighted(a, "span_s") for a in per_wall})


@dataclass
class DeploymentBlock(pairing.Block):
    """One deployment's block (``server``: the deployment; ``server_cpu_ms``: all its server processes'), with what
    the block's span cost PostgreSQL, Redis and the machine (``costs``, per call of the ``span_calls`` the span
    held, warm-up calls included, over ``span_s`` seconds)."""

    costs: Phase = field(default_factory=Phase)
    span_calls: int = 1
    span_s: float = 0.0

    def cpu_ms(self, attr: str) -> float | None:
        """The servers' CPU over the block; for ``deployment_cpu_ms``, PostgreSQL's added."""
        if attr != "deployment_cpu_ms" or self.server_cpu_ms is None:
            return self.server_cpu_ms
        return self.server_cpu_ms + (self.costs.postgres_ms or 0.0) * self.span_calls


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------


@dataclass
class Figures(ra.CallFigures):
    """run_all's figures of the JSON call (``server`` is the deployment) with the round, the number of server
    processes, and what each phase cost PostgreSQL, Redis and the machine (``background_pct``: load's other)."""

    round: int = 0
    processes: int = 1
    seq: Phase = field(default_factory=Phase)
    load: Phase = field(default_factory=Phase)

    @property
    def deployment_cpu_ms(self) -> float | None:
        """Under load, the servers' and PostgreSQL's CPU per call together (the embedded server's alone)."""
        if self.load_cpu_ms is None:
            return None
        return self.load_cpu_ms + (self.load.postgres_ms or 0.0)


class Services:
    """The local Redis server's process tree, found once (PostgreSQL's processes are found at each snapshot)."""

    def __init__(self, deps: dict[str, Deployment]) -> None:
        scale_out = next((d for d in deps.values() if d.redis_url), None)
        self.redis = service_roots("redis-server") if scale_out and _is_local(scale_out.redis_url) else []

    def snapshot(self, dep: Deployment) -> Snapshot:
        return Snapshot.take(dep, self.redis if dep.redis_url else [])


def _is_local(url: str) -> bool:
    return urlsplit(url).hostname in {"127.0.0.1", "localhost", "::1"}


async def warm_up(dep: Deployment, args: argparse.Namespace) -> None:
    """An unmeasured load phase, so that no round pays for threads, pooled connections or caches made once."""
    await ra.bounded(ml.concurrent_throughput(dep.session_factory(), args.clients, WARM_UP_S), 120)


async def measure(dep: Deployment, number: int, args: argparse.Namespace, services: Services) -> Figures:
    """Sequential calls on one session (on the first process), then ``--clients`` sessions over all processes."""
    figures = Figures(dep.name, "json", answers="json", round=number, processes=len(dep.pids))
    timeout = 120 + args.n * 0.2 + args.seconds * 3
    try:
        session = await ml.streamable_session(dep.urls[0], dep.headers)
        try:
            before = services.snapshot(dep)
            latency = await ra.bounded(ml.sequential_latency(session, args.n, pid=dep.pids), timeout)
            # PostgreSQL's and the machine's figures span the warm-up calls too.
            figures.seq = Phase.between(before, services.snapshot(dep), args.n + ml.WARMUP_CALLS)
        finally:
            await session.close()
        before = services.snapshot(dep)
        load = await ra.bounded(
            ml.concurrent_throughput(dep.session_factory(), args.clients, args.seconds, False, dep.pids), timeout
        )
        figures.load = Phase.between(before, services.snapshot(dep), load.calls)
        figures.background_pct = figures.load.other_pct
    except (ml.CallError, httpx.HTTPError, OSError, TimeoutError, redis.RedisError, psycopg.Error) as exc:
        figures.failure = f"{type(exc).__name__}: {exc}"[:500]
        return figures
    figures.p50_ms, figures.p99_ms, figures.seq_cpu_ms = latency.p50_ms, latency.p99_ms, latency.server_cpu_ms_per_call
    figures.calls_per_s, figures.load_cpu_ms = load.calls_per_s, load.server_cpu_ms_per_call
    figures.client_cpu_ms, figures.errors, figures.first_error = (
        load.client_cpu_ms_per_call,
        load.errors,
        load.first_error,
    )
    if load.calls == 0:
        figures.failure = load.first_error or "no call succeeded"
    return figures


def round_order(names: list[str], number: int) -> list[str]:
    """The deployments of round ``number`` (from 1): in the given order, then reversed, and so on, so that a
    steady drift of the machine's speed falls on every deployment alike over an even number of rounds."""
    return names if number % 2 else names[::-1]


# --------------------------------------------------------------------------
# Side by side: the deployments take turns in short blocks
# --------------------------------------------------------------------------

FAILURES = (ml.CallError, httpx.HTTPError, OSError, TimeoutError, redis.RedisError, psycopg.Error)


@dataclass
class Turns(pairing.Turns[DeploymentBlock]):
    """One deployment in one round of the side-by-side measurement: its sessions and what its blocks gathered."""

    dep: Deployment

    @property
    def name(self) -> str:
        return self.dep.name

    def figures(self, number: int) -> Figures:
        """This round's figures of the deployment, over its own blocks only."""
        if self.failure is not None:
            return Figures(self.name, "json", failure=self.failure, round=number, processes=len(self.dep.pids))
        pooled = pairing.Pooled.of(self.blocks, self.timings_ms)
        figures = Figures(
            self.name,
            "json",
            answers="json",
            round=number,
            processes=len(self.dep.pids),
            **pooled.call_figures(),  # type: ignore[arg-type]
        )
        figures.first_error = self.first_error
        figures.seq = Phase.combined([b for b in self.blocks if b.phase == "seq"])
        figures.load = Phase.combined([b for b in self.blocks if b.phase == "load"])
        figures.background_pct = figures.load.other_pct
        if pooled.no_load_call:
            figures.failure = self.first_error or "no call succeeded"
        return figures


async def sequential_block(turns: Turns, services: Services, number: int, cycle: int, calls: int) -> None:
    """``calls`` timed sequential calls on the deployment's one session, after a few unmeasured ones."""
    dep = turns.dep
    before = services.snapshot(dep)
    latency = await ra.bounded(
        ml.sequential_latency(turns.session, calls, pid=dep.pids, warmup=ra.BLOCK_WARMUP_CALLS),
        ra.BLOCK_TIMEOUT_S + calls * 0.2,
    )
    after = services.snapshot(dep)
    turns.timings_ms.extend(latency.timings_ms)
    cpu = latency.server_cpu_ms_per_call
    span = calls + ra.BLOCK_WARMUP_CALLS  # PostgreSQL's and the machine's figures span the warm-up calls too
    turns.blocks.append(
        DeploymentBlock(
            dep.name,
            "json",
            "seq",
            number,
            cycle,
            calls,
            latency.mean_ms * calls / 1000,
            None if cpu is None else cpu * calls,
            latency.client_cpu_ms_per_call * calls,
            costs=Phase.between(before, after, span),
            span_calls=span,
            span_s=after.wall - before.wall,
        )
    )


async def load_block(turns: Turns, services: Services, number: int, cycle: int, seconds: float) -> None:
    """The deployment's ``--clients`` sessions, opened beforehand, calling back to back for ``seconds``."""
    dep = turns.dep
    before = services.snapshot(dep)
    load = await ra.bounded(
        ml.throughput(turns.load_sessions, seconds, False, dep.pids), ra.BLOCK_TIMEOUT_S + seconds * 3
    )
    after = services.snapshot(dep)
    counted = max(load.calls, 1)  # the per-call figures divide by at least one call
    cpu = load.server_cpu_ms_per_call
    turns.first_error = turns.first_error or load.first_error
    turns.blocks.append(
        DeploymentBlock(
            dep.name,
            "json",
            "load",
            number,
            cycle,
            load.calls,
            load.seconds,
            None if cpu is None else cpu * counted,
            load.client_cpu_ms_per_call * counted,
            load.errors,
            costs=Phase.between(before, after, load.calls),
            span_calls=counted,
            span_s=after.wall - before.wall,
        )
    )


async def measure_side_by_side(
    deps: dict[str, Deployment], number: int, args: argparse.Namespace, services: Services
) -> tuple[list[Figures], list[DeploymentBlock]]:
    """One round on all the deployments at once: ``--n`` sequential calls each in blocks of ``--block-calls``,
    then ``--seconds`` of load each in blocks of ``--block-seconds`` on ``--clients`` sessions opened beforehand,
    the deployments taking turns block by block."""
    rows: list[Figures] = []
    all_turns: list[Turns] = []
    async with contextlib.AsyncExitStack() as stack:
        for dep in deps.values():
            try:
                session = await ra.bounded(ml.streamable_session(dep.urls[0], dep.headers), ra.BLOCK_TIMEOUT_S)
                stack.push_async_callback(session.close)
                for _ in range(ml.WARMUP_CALLS):
                    await ra.bounded(session.call(ml.TOOL), ra.BLOCK_TIMEOUT_S)
            except FAILURES as exc:
                failure = f"{type(exc).__name__}: {exc}"[:500]
                rows.append(Figures(dep.name, "json", failure=failure, round=number, processes=len(dep.pids)))
                print(f"  {dep.name}: failed: {failure}", flush=True)
                continue
            all_turns.append(Turns(dep, session=session))

        async def sequential(turns: Turns, cycle: int) -> None:
            calls = min(args.block_calls, args.n - cycle * args.block_calls)
            await sequential_block(turns, services, number, cycle, calls)

        await pairing.take_turns(all_turns, math.ceil(args.n / args.block_calls), sequential, FAILURES)
        for turns in all_turns:
            if turns.failure is None:
                try:
                    turns.load_sessions = await ra.bounded(
                        ml.open_all(turns.dep.session_factory(), args.clients), ra.BLOCK_TIMEOUT_S * 2
                    )
                except FAILURES as exc:
                    turns.failure = f"{type(exc).__name__}: {exc}"[:500]
                for opened in turns.load_sessions:
                    stack.push_async_callback(opened.close)
        load_cycles = max(1, ra.round_half_up(args.seconds / args.block_seconds))

        async def loaded(turns: Turns, cycle: int) -> None:
            await load_block(turns, services, number, cycle, args.seconds / load_cycles)

        await pairing.take_turns(all_turns, load_cycles, loaded, FAILURES)
    rows += [turns.figures(number) for turns in all_turns]
    return rows, [block for turns in all_turns for block in turns.blocks]


# --------------------------------------------------------------------------
# Profile: database work per call, py-spy, what the connections wait on
# --------------------------------------------------------------------------

TABLE_STATS = """
SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0), n_tup_ins, n_tup_upd, n_tup_del
FROM pg_stat_user_tables
"""
DATABASE_STATS = """
SELECT xact_commit + xact_rollback, tup_returned, tup_fetched, tup_inserted, tup_updated, tup_deleted
FROM pg_stat_database WHERE datname = current_database()
"""
ACTIVITY = """
SELECT state, wait_event_type, wait_event FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def database_stats(url: str) -> tuple[list[int], dict[str, list[int]]]:
    """The database's transaction and row counters, and per table: scans, rows inserted, updated, deleted."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(DATABASE_STATS).fetchone()
        tables = {name: [int(v or 0) for v in rest] for name, *rest in conn.execute(TABLE_STATS).fetchall()}
    return [int(v) for v in row or ()], tables


async def settled_stats(url: str) -> tuple[list[int], dict[str, list[int]]]:
    """``database_stats`` once the backends have flushed what they counted."""
    await asyncio.sleep(STATS_FLUSH_S)
    return await asyncio.to_thread(database_stats, url)


async def database_work_per_call(dep: Deployment, calls: int) -> None:
    """Back-to-back calls on one session of ``dep``, PostgreSQL's statistics read before and after, printed per
    call."""
    totals_before, tables_before = await settled_stats(dep.database_url)
    session = await ml.streamable_session(dep.urls[0], dep.headers)
    try:
        for _ in range(calls):
            await session.call(ml.TOOL)
    finally:
        await session.close()
    totals_after, tables_after = await settled_stats(dep.database_url)
    delta = [(a - b) / calls for a, b in zip(totals_after, totals_before, strict=True)]
    print(
        f"  database work per call ({calls} sequential calls on {dep.name}, one session opened and closed):"
        f" {delta[0]:.2f} transactions, rows returned {delta[1]:.1f} / fetched {delta[2]:.1f} / inserted"
        f" {delta[3]:.2f} / updated {delta[4]:.2f} / deleted {delta[5]:.2f}"
    )
    for name in sorted(tables_after):
        before = tables_before.get(name, [0, 0, 0, 0])
        moved = [(a - b) / calls for a, b in zip(tables_after[name], before, strict=True)]
        if any(value >= 0.005 for value in moved):
            print(
                f"    {name:<36} scans {moved[0]:.2f}, inserted {moved[1]:.2f}, updated {moved[2]:.2f},"
                f" deleted {moved[3]:.2f}"
            )


async def profiled_load(dep: Deployment, args: argparse.Namespace, output: Path, *, gil: bool) -> None:
    """A load phase on ``dep`` with py-spy on its first process and ``pg_stat_activity`` sampled: what the
    servers' connections were doing. With ``gil`` py-spy samples the GIL's holder (where Python spends CPU);
    without, every thread, and since ``--nonblocking`` cannot tell a waiting thread from a running one that shows
    where the worker threads spend their wall time: waiting for PostgreSQL's answers and for the group commit
    included."""
    seen: Counter[str] = Counter()
    samples = 0
    done = asyncio.Event()

    def sample_until_done() -> None:
        nonlocal samples
        with psycopg.connect(dep.database_url, autocommit=True) as conn:
            while not done.is_set():
                for state, wait_type, wait in conn.execute(ACTIVITY).fetchall():
                    seen[f"{state or '?'}: {wait_type}/{wait}" if wait_type else f"{state or '?'}: on CPU"] += 1
                samples += 1
                time.sleep(SAMPLE_EVERY_S)

    seconds = max(int(args.seconds), 5)
    totals_before, _tables = await settled_stats(dep.database_url)
    spy = ra.start_py_spy(dep.pids[0], seconds, output, gil=gil)
    sampler = asyncio.create_task(asyncio.to_thread(sample_until_done))
    try:
        await asyncio.sleep(0.5)  # let py-spy attach before the load starts
        load = await ra.bounded(
            ml.concurrent_throughput(dep.session_factory(), args.clients, seconds + 1.0, False, dep.pids), 300
        )
    finally:
        done.set()
        await sampler
        await ra.stop_py_spy(spy, seconds)
    print(
        f"  {dep.name} under load with py-spy ({'GIL holder: CPU' if gil else 'all threads: wall time'}) on pid"
        f" {dep.pids[0]}: {load.calls_per_s:.0f} calls/s, server CPU"
        f" {_f(load.server_cpu_ms_per_call, 3)} ms/call (slowed by py-spy); its database connections in"
        f" {samples} samples of pg_stat_activity (mean number per sample in each state):"
    )
    for what, count in seen.most_common(10):
        print(f"    {what:<44} {count / max(samples, 1):.2f}")
    totals_after, _tables = await settled_stats(dep.database_url)
    # Each sample of pg_stat_activity was a transaction of its own on the same database.
    transactions = totals_after[0] - totals_before[0] - samples
    print(
        f"  {dep.name}: {transactions / max(load.calls, 1):.2f} transactions per call under load (two reads, then"
        " the audit batches: fewer per call the more rows a batch holds)"
    )
    with contextlib.suppress(OSError):
        profile_summary.summarise(output, 25, exclude_epoll=True)


async def profile(deps: dict[str, Deployment], args: argparse.Namespace) -> None:
    print("== profile", flush=True)
    pg_1, pg_2 = deps.get("pg-1"), deps.get("pg-2")
    if pg_1 is None or pg_2 is None:
        print("  skipped: --profile needs pg-1 and pg-2")
        return
    await database_work_per_call(pg_1, max(args.n, 100))
    for dep in (pg_1, pg_2):
        for gil in (True, False):
            suffix = ("" if dep is pg_1 else ".pg-2") + ("" if gil else ".wall")
            await profiled_load(dep, args, args.profile.with_name(args.profile.name + suffix), gil=gil)


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mean_of(rows: list[Figures], name: str, attribute: str) -> float | None:
    values = [getattr(r, attribute) for r in rows if r.server == name and not r.failure]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def ratio(ours: float | None, reference: float | None) -> float | None:
    return None if ours is None or not reference else ours / reference


def verdict(value: float | None, aim: float, higher_is_better: bool) -> str:
    if value is None:
        return "-"
    met = value >= aim if higher_is_better else value <= aim
    return "met" if met else "NOT met"


def print_table(rows: list[Figures]) -> None:
    header = (
        f"{'deployment':<11} {'rnd':>3} {'procs':>5} {'p50 ms':>7} {'p99 ms':>7} {'seq srv':>8} {'seq PG':>7}"
        f" {'calls/s':>8} {'load srv':>8} {'load PG':>7} {'redis':>6} {'cmd/c':>6} {'client':>7} {'err':>4}"
        f" {'busy %':>6} {'other':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        if r.failure and r.p50_ms is None:
            print(f"{r.server:<11} {r.round:>3} {r.processes:>5} failed: {r.failure}")
            continue
        print(
            f"{r.server:<11} {r.round:>3} {r.processes:>5} {_f(r.p50_ms):>7} {_f(r.p99_ms):>7}"
            f" {_f(r.seq_cpu_ms, 3):>8} {_f(r.seq.postgres_ms, 3):>7} {_f(r.calls_per_s, 0):>8}"
            f" {_f(r.load_cpu_ms, 3):>8} {_f(r.load.postgres_ms, 3):>7} {_f(r.load.redis_ms, 3):>6}"
            f" {_f(r.load.redis_commands, 1):>6} {_f(r.client_cpu_ms):>7} {r.errors if r.errors is not None else '-':>4}"
            f" {_f(r.load.busy_pct, 0):>6} {_f(r.load.other_pct, 0):>6}"
        )
    for r in rows:
        if r.first_error:
            print(f"  {r.server} round {r.round}: {r.first_error}")
    print(
        "seq srv / load srv: the deployment's server processes' CPU ms per call, sequential (one session on the"
        " first process) / under --clients sessions; seq PG / load PG: PostgreSQL's processes' CPU ms per call;"
        " redis: redis-server's CPU ms per call; cmd/c: Redis commands per call; client: the load client's CPU ms"
        " per call; busy %: the whole machine under load, % of all cores; other: CPU of everything else under"
        " load, % of one core"
    )


@dataclass(frozen=True)
class RatioRow:
    """One line of the ratios: a figure of a deployment against a reference, the values as means over the rounds.
    Side by side, the ratio is the median of the paired blocks' ratios (p50 and p99: of the pooled timings), with
    the pooled blocks' ratio and the pairs' quartiles; in turn (``--in-turn``), the ratio of the means."""

    figure: str
    attr: str
    ours: str
    ref: str
    value: float | None
    reference: float | None
    ratio: float | None
    per_round: list[float | None]
    aim: float | None = None
    higher_is_better: bool = False
    pooled: float | None = None
    quartiles: tuple[float, float] | None = None
    pairs: int = 0


def ratio_rows(rows: list[Figures], blocks: list[DeploymentBlock]) -> list[RatioRow]:
    rounds = sorted({r.round for r in rows})
    lines = [(label, attr, ours, ref, aim, higher) for label, attr, ours, ref, aim, higher in AIMS]
    lines += [(label, attr, ours, ref, None, False) for label, attr, ours, ref in CONTEXT]
    found = []
    for label, attr, ours, ref, aim, higher in lines:
        value, reference = mean_of(rows, ours, attr), mean_of(rows, ref, attr)
        if value is None and reference is None:
            continue
        per_round = [
            ratio(
                mean_of([r for r in rows if r.round == n], ours, attr),
                mean_of([r for r in rows if r.round == n], ref, attr),
            )
            for n in rounds
        ]
        paired = pairing.block_ratios(list(blocks), ours, ref, "json", attr) if attr in pairing.PHASE_OF else []
        found.append(
            RatioRow(
                label,
                attr,
                ours,
                ref,
                value,
                reference,
                pairing.median(paired) if paired else ratio(value, reference),
                per_round,
                aim,
                higher,
                pairing.pooled_ratio(list(blocks), ours, ref, "json", attr) if paired else None,
                pairing.quartiles(paired),
                len(paired),
            )
        )
    return found


def print_ratios(rows: list[Figures], blocks: list[DeploymentBlock]) -> None:
    rounds = sorted({r.round for r in rows})
    per_round = " ".join(f"{'r' + str(n):>6}" for n in rounds)
    header = (
        f"{'figure':<27} {'deployment':<11} {'against':<9} {'value':>8} {'ref':>8} {'ratio':>7} {'pooled':>7}"
        f" {'quartiles':>10} {'pairs':>5} {per_round} {'aim':>8} {'':>7}"
    )
    print(header)
    print("-" * len(header))
    for line in ratio_rows(rows, blocks):
        bound = "-" if line.aim is None else f"{'>=' if line.higher_is_better else '<='} {line.aim:.1f}x"
        met = "" if line.aim is None else verdict(line.ratio, line.aim, line.higher_is_better)
        spread = "-" if line.quartiles is None else f"{line.quartiles[0]:.2f}-{line.quartiles[1]:.2f}"
        print(
            f"{line.figure:<27} {line.ours:<11} {line.ref:<9} {_f(line.value, 3):>8} {_f(line.reference, 3):>8}"
            f" {_x(line.ratio):>7} {_x(line.pooled):>7} {spread:>10} {line.pairs or '-':>5}"
            f" {' '.join(f'{_x(e):>6}' for e in line.per_round)} {bound:>8} {met:>7}"
        )
    if blocks:
        print(
            "value / ref: means over the rounds; ratio: the median of the ratios of paired blocks (the two"
            " deployments' turns in one cycle, seconds apart; p50 and p99: the ratio of the means), pooled: all the"
            " paired blocks' CPU over their calls (or calls over seconds), quartiles: of the paired blocks' ratios,"
            " pairs: how many; r1, r2, ...: each round's ratio of its figures; aim: issue 15's bound"
        )
    else:
        print(
            "value / ref: means over the rounds; ratio: of the means; r1, r2, ...: each round's own ratio (rounds that"
            " disagree show the machine's drift); aim: issue 15's bound"
        )


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def print_notes(rows: list[Figures]) -> None:
    busy = [r.load.busy_pct for r in rows if r.load.busy_pct is not None]
    cores = os.cpu_count() or 1
    print(
        f"The load client, PostgreSQL, Redis and every server share this machine's {cores} cores; under load the"
        f" machine was {min(busy, default=0):.0f}-{max(busy, default=0):.0f}% busy. When it is near 100%, calls/s"
        " is bound by the cores, not by the deployment, and a second server process can only share them."
    )
    scale_out = [r for r in rows if r.server in SCALE_OUT and not r.failure]
    if scale_out and all(r.load.postgres_ms is None for r in scale_out):
        print("PostgreSQL was not found on this machine: its CPU and Redis's are not shown.")


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, help="sequential calls per deployment and round (300; --quick 100)")
    parser.add_argument("--seconds", type=float, help="duration of each load phase (10; --quick 3)")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients under load (20)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the deployments, alternating order (2)")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument("--block-calls", type=int, default=50, help="sequential calls per block, side by side (50)")
    parser.add_argument("--block-seconds", type=float, default=1.0, help="seconds of load per block, side by side (1)")
    parser.add_argument(
        "--in-turn",
        action="store_true",
        help="the older method: each deployment measured alone in one go, round by round, the ratios of the means",
    )
    parser.add_argument(
        "--deployments",
        type=ml.csv_of(tuple(DEPLOYMENTS)),
        help=f"any of {','.join(DEPLOYMENTS)} ({','.join(DEFAULT_DEPLOYMENTS)}; all but embedded need DATABASE_URL"
        " and REDIS_URL)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--profile",
        type=Path,
        help="after the rounds, count pg-1's database work per call, then load pg-1 and pg-2 in turn with py-spy on"
        " their first process, sampling the GIL's holder (CPU) and then all threads (wall time), while sampling what"
        " their database connections wait on; the stacks go here and to this name + .wall, .pg-2, .pg-2.wall",
    )
    args = parser.parse_args(argv)
    defaults = (100, 3.0) if args.quick else (300, 10.0)
    args.n = args.n if args.n is not None else defaults[0]
    args.seconds = args.seconds if args.seconds is not None else defaults[1]
    if min(args.n, args.clients, args.rounds, args.block_calls) < 1 or min(args.seconds, args.block_seconds) <= 0:
        parser.error("--n, --clients, --rounds, --block-calls, --seconds and --block-seconds must be positive")
    wanted = args.deployments or set(DEFAULT_DEPLOYMENTS)
    if wanted & set(SCALE_OUT) and not cl.scale_out_configured():
        if args.deployments:
            parser.error(f"{', '.join(SCALE_OUT)} need DATABASE_URL (postgres://) and REDIS_URL")
        wanted -= set(SCALE_OUT)
        print("pg-1 and pg-2 skipped: set DATABASE_URL (postgres://) and REDIS_URL to measure PostgreSQL + Redis")
        print()
    args.deployments = [name for name in DEPLOYMENTS if name in wanted]
    return args


async def run(args: argparse.Namespace) -> tuple[list[Figures], list[DeploymentBlock]]:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)  # stop the servers on SIGTERM too
    ml.raise_fd_limit(ra.FD_LIMIT)
    rows: list[Figures] = []
    blocks: list[DeploymentBlock] = []
    with tempfile.TemporaryDirectory(prefix="bench-scaleout-") as workdir:
        async with deployments(args.deployments, Path(workdir)) as deps:
            services = Services(deps)
            for dep in deps.values():
                print(f"== {dep.name}: {DEPLOYMENTS[dep.name]}; pids {','.join(map(str, dep.pids))}", flush=True)
                await warm_up(dep, args)
            for number in range(1, args.rounds + 1):
                if args.in_turn:
                    for name in round_order(args.deployments, number):
                        row = await measure(deps[name], number, args, services)
                        rows.append(row)
                        print(f"  round {number} {name}: {_summary(row)}", flush=True)
                    continue
                print(f"== round {number}, side by side, load average {ra.load_average()}", flush=True)
                found, taken = await measure_side_by_side(deps, number, args, services)
                rows += found
                blocks += taken
                for row in found:
                    print(f"  round {number} {row.server}: {_summary(row)}", flush=True)
            if args.profile:
                await profile(deps, args)
    return rows, blocks


def _summary(r: Figures) -> str:
    if r.failure and r.p50_ms is None:
        return f"failed: {r.failure}"
    return (
        f"p50 {_f(r.p50_ms)} ms, {_f(r.calls_per_s, 0)} calls/s, server CPU {_f(r.seq_cpu_ms, 3)}/"
        f"{_f(r.load_cpu_ms, 3)} ms/call, PG {_f(r.load.postgres_ms, 3)} ms/call, busy {_f(r.load.busy_pct, 0)}%"
    )


def main() -> None:
    args = parse_args()
    ra.print_heading(
        "Scale-out bench",
        f"--n {args.n} --clients {args.clients} --seconds {args.seconds:g} --rounds {args.rounds}"
        + (
            " --in-turn"
            if args.in_turn
            else f" --block-calls {args.block_calls} --block-seconds {args.block_seconds:g}"
        )
        + f" deployments {','.join(args.deployments)}",
    )
    started = time.monotonic()
    try:
        rows, blocks = asyncio.run(run(args))
    except (RuntimeError, OSError, subprocess.SubprocessError, psycopg.Error) as exc:
        raise SystemExit(f"set-up failed: {exc}") from exc
    ra.report(
        args,
        started,
        [lambda: print_table(rows), lambda: print_ratios(rows, blocks), lambda: print_notes(rows)],
        {
            "rows": [asdict(r) | {"deployment_cpu_ms": r.deployment_cpu_ms} for r in rows],
            "ratios": [asdict(line) for line in ratio_rows(rows, blocks)],
            "blocks": [asdict(b) for b in blocks],
        },
        skip=frozenset({"profile"}),
    )


if __name__ == "__main__":
    main()
