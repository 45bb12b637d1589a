"""What the audit log costs: appends per second, the time it adds to a tool call, proofs at a million events.

Each measurement runs in a child process of its own, on a freshly migrated data dir (``FORGE_DATA_DIR``
in a temporary directory, ``manage.py migrate`` in a subprocess first), and prints its figures as one
JSON line that this runner collects into a table:

* ``appends``: ``audit.services.record`` in a loop for ``--seconds``, first from one writer thread,
  then from ``--writers`` threads at once (each with its own database connection, so they queue on the
  chain lock: SQLite's write lock, PostgreSQL's advisory lock). Appends per second, and p50/p99 of one
  ``record`` call as its caller waits for it. On SQLite (a file in the temporary directory, WAL) and on
  PostgreSQL: a scratch database created on the server of ``--postgres`` and dropped afterwards, so the
  bench neither migrates nor fills the shared database (``--postgres ''`` skips it).
* ``call``: ``mcp_api.transports.streamable.handle_post`` for a ``tools/call server_info`` on an open
  session, in-process and sequential, wall and CPU time (p50/p99) per call, with the real audit and
  with ``audit.services.record`` replaced (in every module that imported it) by a no-op returning an
  unsaved ``AuditEvent``; blocks of the two alternate so drift hits both. The difference of the p50s is
  what the audit adds to a call. The transaction around the tool call stays in both.
* ``pages``: SQLite's WAL frames per commit of one row and of ``--writers`` rows (a batch of the group commit:
  ``record`` called that many times in one transaction), after ``--stored`` rows, each commit's frames counted
  in the WAL file (automatic checkpoints off) and mapped to the b-tree that owns their page (``dbstat``). A
  count, not a time: the same on a busy machine. Every page is written again at the next checkpoint.
* ``proofs``: ``--leaves`` random leaves loaded into ``AuditTreeNode`` of a temporary SQLite database
  (nodes computed with ``merkle.nodes_for_append`` over a ``MemoryNodeStore``, inserted with
  ``executemany`` in batches; the append-only triggers refuse only UPDATE and DELETE), then
  ``inclusion_proof`` and ``consistency_proof`` through ``DatabaseNodeStore`` for ``--proofs`` random
  cases each, timed in ms (p50/p99/max). Every proof is verified against the in-memory roots, outside
  the timing, so a fast wrong answer cannot pass.

    .venv/bin/python bench/audit_bench.py                       # everything, about 1 minute
    .venv/bin/python bench/audit_bench.py --quick               # smoke run: small numbers, under a minute
    .venv/bin/python bench/audit_bench.py --parts proofs --leaves 1000000 --proofs 1000
    .venv/bin/python bench/audit_bench.py --parts pages
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import secrets
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from run_all import cpu_model, load_average, machine_busy_ms

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = sys.executable
PARTS = ("appends", "call", "pages", "proofs")
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/test"
CHILD_TIMEOUT_S = 1800
# Variables that would move a child off the database and files this runner gives it.
OVERRIDDEN_ENV = ("DATABASE_URL", "REDIS_URL", "FORGE_AUDIT_LOG", "FORGE_AUDIT_CHECKPOINT_EVERY")


# --------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``samples``."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(fraction * len(ordered)) - 1))]


def spread(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50": statistics.median(samples),
        "p99": percentile(samples, 0.99),
        "max": max(samples),
    }


# --------------------------------------------------------------------------
# Children: one measurement each, in a process with Django set up on the data dir it was given
# --------------------------------------------------------------------------


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def database_name() -> str:
    from django.db import connection

    if connection.vendor == "postgresql":
        major, minor = divmod(connection.pg_version, 10000)
        return f"PostgreSQL {major}.{minor}"
    return f"SQLite {sqlite3.sqlite_version} (WAL)"


def last_seq() -> int:
    from audit.services import tree_size

    return tree_size()


def append(writer: int, number: int) -> None:
    """One appended row, as a `server_info` call's: the `number`th of `writer` (Django set up)."""
    from audit.models import EventKind
    from audit.services import record

    record(
        EventKind.TOOL_CALL,
        tool="server_info",
        arguments={"writer": writer, "n": number},
        outcome="ok",
        called_by="audit-bench",
        session=f"bench-{writer}",
        client_label="audit-bench",
    )


def child_appends(args: argparse.Namespace) -> dict[str, Any]:
    for number in range(20):  # warm-up: connection, prepared SQL, key files, mirror
        append(0, number)
    rows = {}
    for writers in sorted({1, args.writers}):
        before = last_seq()
        rows[str(writers)] = run_writers(append, writers, args.seconds)
        rows[str(writers)]["rows_written"] = last_seq() - before
    return {"database": database_name(), "writers": rows}


def run_writers(append: Callable[[int, int], None], writers: int, seconds: float) -> dict[str, Any]:
    """``writers`` threads appending until ``seconds`` have passed; their count, rate and latencies."""
    from django.db import connection

    from forge_core.errors import AuditUnavailable

    latencies: list[list[float]] = [[] for _ in range(writers)]
    errors: list[str] = []
    ready = threading.Barrier(writers + 1)
    deadline = [0.0]

    def writer(index: int) -> None:
        mine = latencies[index]
        try:
            ready.wait()
            while time.perf_counter() < deadline[0]:
                start = time.perf_counter_ns()
                append(index, len(mine))
                mine.append((time.perf_counter_ns() - start) / 1e6)
        except AuditUnavailable as exc:
            errors.append(str(exc)[:200])
        finally:
            connection.close()  # Django's connections are per thread; this one ends with it

    threads = [threading.Thread(target=writer, args=(index,), daemon=True) for index in range(writers)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    deadline[0] = start + seconds
    ready.wait()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    elapsed = time.perf_counter() - start
    samples = [ms for mine in latencies for ms in mine]
    return {
        "appends": len(samples),
        "seconds": elapsed,
        "per_s": len(samples) / elapsed,
        "latency_ms": spread(samples) if samples else None,
        "errors": errors,
    }


def child_call(args: argparse.Namespace) -> dict[str, Any]:
    from django.utils import timezone
    from forge_microbench import prepare_tools_call

    from audit.models import AuditEvent
    from mcp_api.transports.streamable import handle_post

    def record_nothing(kind: str, *, tool: str = "", outcome: str = "", **_fields: Any) -> AuditEvent:
        return AuditEvent(ts=timezone.now(), kind=str(kind), tool=tool, outcome=outcome)

    exchange = prepare_tools_call().exchange

    def call() -> None:
        reply = handle_post(exchange)
        if reply.status != 200 or reply.body["result"]["isError"]:
            raise SystemExit(f"tools/call failed: {reply.status} {reply.body}")

    samples: dict[str, dict[str, list[float]]] = {mode: {"wall": [], "cpu": []} for mode in ("audit", "no_audit")}
    rows_before = last_seq()
    for _ in range(200):  # warm-up of both paths
        call()
    with audit_replaced(record_nothing):
        for _ in range(200):
            call()
    rows_after_warm_up = last_seq()
    for _ in range(max(1, args.calls // args.block)):
        for mode in ("audit", "no_audit"):
            with audit_replaced(record_nothing if mode == "no_audit" else None):
                wall, cpu = samples[mode]["wall"], samples[mode]["cpu"]
                for _ in range(args.block):
                    wall_start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
                    call()
                    cpu.append((time.thread_time_ns() - cpu_start) / 1e6)
                    wall.append((time.perf_counter_ns() - wall_start) / 1e6)
    audited = last_seq() - rows_after_warm_up
    if audited != len(samples["audit"]["wall"]) or rows_after_warm_up - rows_before != 200:
        raise SystemExit(f"expected one audit row per audited call, got {audited} for {len(samples['audit']['wall'])}")
    return {
        "database": database_name(),
        "calls": {
            mode: {kind: spread(values) for kind, values in figures.items()} for mode, figures in samples.items()
        },
    }


@contextmanager
def audit_replaced(replacement: Callable[..., Any] | None) -> Iterator[None]:
    """``audit.services.record`` replaced by ``replacement`` in every module that holds it by name."""
    from audit import services

    real = services.record
    if replacement is None:
        yield
        return
    holders = [module for module in list(sys.modules.values()) if getattr(module, "__dict__", {}).get("record") is real]
    for module in holders:
        module.record = replacement
    try:
        yield
    finally:
        for module in holders:
            module.record = real


def child_proofs(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection, transaction

    from audit import merkle
    from audit.models import AuditTreeNode
    from audit.services import DatabaseNodeStore, node_key

    rng = random.Random(args.seed)
    n = args.leaves
    memory = merkle.MemoryNodeStore()
    quote = connection.ops.quote_name
    meta = AuditTreeNode._meta
    columns = ", ".join(quote(meta.get_field(name).column) for name in ("key", "level", "index", "hash"))
    insert = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES (%s, %s, %s, %s)"

    def flush(rows: list[tuple[int, int, int, bytes]]) -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(insert, rows)
        rows.clear()

    started = time.perf_counter()
    pending: list[tuple[int, int, int, bytes]] = []
    for size in range(n):
        nodes = merkle.nodes_for_append(size, rng.randbytes(merkle.HASH_SIZE), memory)
        memory.put_many(nodes)
        pending.extend((node_key(level, index), level, index, digest) for level, index, digest in nodes)
        if len(pending) >= args.batch:
            flush(pending)
    flush(pending)
    load_s = time.perf_counter() - started
    stored = AuditTreeNode.objects.count()
    if stored != len(memory.nodes):
        raise SystemExit(f"loaded {stored} nodes, computed {len(memory.nodes)}")

    store = DatabaseNodeStore()
    inclusion: list[float] = []
    for _ in range(args.proofs):
        size = rng.randint(1, n)
        index = rng.randrange(size)
        start = time.perf_counter_ns()
        proof = merkle.inclusion_proof(index, size, store)
        inclusion.append((time.perf_counter_ns() - start) / 1e6)
        if not merkle.verify_inclusion(memory.nodes[(0, index)], index, size, proof, merkle.root(size, memory)):
            raise SystemExit(f"inclusion proof of leaf {index} in {size} does not verify")
    consistency: list[float] = []
    for _ in range(args.proofs):
        old, new = sorted(rng.sample(range(1, n + 1), 2))
        start = time.perf_counter_ns()
        proof = merkle.consistency_proof(old, new, store)
        consistency.append((time.perf_counter_ns() - start) / 1e6)
        if not merkle.verify_consistency(old, new, merkle.root(old, memory), merkle.root(new, memory), proof):
            raise SystemExit(f"consistency proof from {old} to {new} does not verify")
    database_file = Path(connection.settings_dict["NAME"])
    return {
        "database": database_name(),
        "leaves": n,
        "nodes": stored,
        "load_s": load_s,
        "database_mb": database_file.stat().st_size / 2**20,
        "inclusion_ms": spread(inclusion),
        "consistency_ms": spread(consistency),
    }


PAGE_COMMITS = 200  # commits counted per size


def child_pages(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection, transaction

    from audit.models import EventKind
    from audit.services import record

    def commit(rows: int) -> None:
        with transaction.atomic():
            for number in range(rows):
                record(EventKind.TOOL_CALL, tool="server_info", arguments={"n": number}, outcome="ok")

    for _ in range(-(-args.stored // args.writers)):
        commit(args.writers)
    wal = Path(connection.settings_dict["NAME"] + "-wal")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute("PRAGMA page_size")
        frame = 24 + cursor.fetchone()[0]  # each frame: a 24-byte header (its page number first), then the page
    sizes: dict[str, Any] = {}
    for rows in sorted({1, args.writers}):
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(PAGE_COMMITS):
            commit(rows)
        data = wal.read_bytes()
        pages = [struct.unpack_from(">I", data, offset)[0] for offset in range(32, len(data) - frame + 1, frame)]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pageno, name FROM dbstat")
            owners = dict(cursor.fetchall())
        by_tree: dict[str, float] = {}
        for page in pages:
            by_tree[owners.get(page, "?")] = by_tree.get(owners.get(page, "?"), 0) + 1 / PAGE_COMMITS
        sizes[str(rows)] = {"frames": len(pages) / PAGE_COMMITS, "by_tree": by_tree}
    return {"database": database_name(), "stored": args.stored, "rows": sizes}


CHILDREN: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "appends": child_appends,
    "call": child_call,
    "pages": child_pages,
    "proofs": child_proofs,
}


def run_child_here(args: argparse.Namespace) -> None:
    setup_django()
    figures = CHILDREN[args.child](args)
    from django.db import connection

    connection.close()
    print(json.dumps(figures))


# --------------------------------------------------------------------------
# Runner: data dirs, migrations, the children, the table
# --------------------------------------------------------------------------


def child_env(data_dir: Path, database_url: str = "") -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in OVERRIDDEN_ENV}
    env["FORGE_DATA_DIR"] = str(data_dir)
    env["DJANGO_SETTINGS_MODULE"] = "forge_site.settings"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH", "")]))
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


def measure(part: str, args: argparse.Namespace, database_url: str = "") -> dict[str, Any]:
    """Migrate a fresh data dir (and database) in one subprocess, then measure ``part`` in another."""
    label = "postgres" if database_url else "sqlite"
    print(f"== {part} on {label}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix=f"forge-audit-bench-{part}-") as tmp:
        env = child_env(Path(tmp), database_url)
        subprocess.run(
            [PYTHON, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], env=env, check=True, timeout=300
        )
        command = [PYTHON, str(Path(__file__).resolve()), "--child", part, *child_options(args)]
        wall, busy, own = time.monotonic(), machine_busy_ms(), children_cpu_ms()
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT_S)
        other = machine_busy_ms() - busy - (children_cpu_ms() - own)
        wall_ms = (time.monotonic() - wall) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{part} on {label} failed with exit code {done.returncode}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["background_pct"] = max(other, 0.0) * 100 / max(wall_ms, 1.0)
    print(f"   {json.dumps(figures)[:300]}", file=sys.stderr, flush=True)
    return figures


def children_cpu_ms() -> float:
    """CPU (ms) used so far by this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def child_options(args: argparse.Namespace) -> list[str]:
    names = ("seconds", "writers", "calls", "block", "leaves", "proofs", "batch", "stored", "seed")
    return [item for name in names for item in (f"--{name}", str(getattr(args, name)))]


@contextmanager
def scratch_postgres(url: str) -> Iterator[str]:
    """A fresh database on the server of ``url``, dropped afterwards; yields its URL."""
    import psycopg

    name = f"forge_audit_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def print_table(results: dict[str, Any], args: argparse.Namespace) -> None:
    header = (
        f"{'measure':<52} {'database':<20} {'count':>7} {'per s':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
        f" {'bg %':>5}"
    )
    print(header)
    print("-" * len(header))

    def line(measure: str, part: dict[str, Any], count: int, per_s: str, figures: dict[str, float] | None) -> None:
        p50, p99, most = (f"{figures[k]:.3f}" for k in ("p50", "p99", "max")) if figures else ("-", "-", "-")
        print(
            f"{measure:<52} {part['database']:<20} {count:>7} {per_s:>6} {p50:>8} {p99:>8} {most:>8}"
            f" {part['background_pct']:>5.0f}"
        )

    for key in ("appends sqlite", "appends postgres"):
        appends = results.get(key)
        for writers, row in (appends or {}).get("writers", {}).items():
            noun = "writer" if writers == "1" else "writers"
            per_s = f"{row['per_s']:.0f}"
            line(f"audit append, {writers} {noun} (record)", appends, row["appends"], per_s, row["latency_ms"])
            for error in row["errors"][:3]:
                print(f"    error: {error}")

    call = results.get("call")
    if call is not None:
        for mode, label in (("audit", "real audit"), ("no_audit", "record() a no-op")):
            for kind in ("wall", "cpu"):
                figures = call["calls"][mode][kind]
                line(f"tools/call in-process, {label}, {kind}", call, figures["n"], "-", figures)
        wall = call["calls"]["audit"]["wall"]["p50"] - call["calls"]["no_audit"]["wall"]["p50"]
        cpu = call["calls"]["audit"]["cpu"]["p50"] - call["calls"]["no_audit"]["cpu"]["p50"]
        verdict = "met" if wall < 1.0 else "NOT met"
        print(f"{'  audit adds to one call, p50':<52} wall +{wall:.3f} ms, CPU +{cpu:.3f} ms (aim: < 1 ms, {verdict})")

    pages = results.get("pages")
    if pages is not None:
        for rows, figures in pages["rows"].items():
            trees = ", ".join(f"{name} {count:.2f}" for name, count in sorted(figures["by_tree"].items(), key=by_count))
            print(
                f"{f'WAL frames per commit of {rows} row(s)':<52} {pages['database']:<20} {figures['frames']:.2f} "
                f"after {pages['stored']:,} rows: {trees}"
            )

    proofs = results.get("proofs")
    if proofs is not None:
        leaves = f"{proofs['leaves']:,}"
        for kind in ("inclusion", "consistency"):
            figures = proofs[f"{kind}_ms"]
            line(f"{kind} proof, {leaves} events, DB store", proofs, figures["n"], "-", figures)
        worst = max(proofs["inclusion_ms"]["p50"], proofs["consistency_ms"]["p50"])
        verdict = "met" if worst < 5 else "NOT met"
        print(
            f"  tree: {proofs['nodes']:,} nodes loaded in {proofs['load_s']:.1f} s, database file "
            f"{proofs['database_mb']:.0f} MB (aim: a proof < 5 ms at p50, {verdict})"
        )
    print(
        "count: appends made / calls or proofs timed; bg %: CPU of other processes while the part ran, % of one"
        " core (on PostgreSQL it includes the database server's own work)"
    )


def by_count(item: tuple[str, float]) -> tuple[float, str]:
    return -item[1], item[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"some of {','.join(PARTS)} (all)")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument("--seconds", type=float, help="duration of each append phase (10; --quick 2)")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writer threads (8)")
    parser.add_argument("--calls", type=int, help="timed tools/calls per variant (2000; --quick 200)")
    parser.add_argument("--block", type=int, default=100, help="calls per block; the variants alternate (100)")
    parser.add_argument("--leaves", type=int, help="tree size for the proofs (1000000; --quick 20000)")
    parser.add_argument("--proofs", type=int, default=1000, help="random cases per proof kind (1000)")
    parser.add_argument("--batch", type=int, default=50_000, help="tree nodes per INSERT batch (50000)")
    parser.add_argument("--stored", type=int, help="rows stored before pages are counted (20000; --quick 2000)")
    parser.add_argument("--seed", type=int, default=9162)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("DATABASE_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server to create a scratch database on, for appends ($DATABASE_URL, else "
        f"{DEFAULT_POSTGRES}); '' skips PostgreSQL",
    )
    parser.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    parser.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seconds, calls, leaves, stored = (2.0, 200, 20_000, 2000) if args.quick else (10.0, 2000, 1_000_000, 20_000)
    args.stored = stored if args.stored is None else args.stored
    args.seconds = seconds if args.seconds is None else args.seconds
    args.calls = calls if args.calls is None else args.calls
    args.leaves = leaves if args.leaves is None else args.leaves
    args.parts = [part for part in PARTS if part in args.parts.split(",")]
    if min(args.seconds, args.writers, args.calls, args.block, args.leaves, args.proofs, args.batch) <= 0:
        parser.error("--seconds, --writers, --calls, --block, --leaves, --proofs and --batch must be positive")
    if args.leaves < 2:
        parser.error("--leaves must be at least 2 (a consistency proof needs two sizes)")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        run_child_here(args)
        return
    started = datetime.now().astimezone()
    results: dict[str, Any] = {}
    if "appends" in args.parts:
        results["appends sqlite"] = measure("appends", args)
        if args.postgres:
            with scratch_postgres(args.postgres) as url:
                results["appends postgres"] = measure("appends", args, url)
    if "call" in args.parts:
        results["call"] = measure("call", args)
    if "pages" in args.parts:
        results["pages"] = measure("pages", args)
    if "proofs" in args.parts:
        results["proofs"] = measure("proofs", args)
    minutes = (datetime.now().astimezone() - started).total_seconds() / 60
    print(f"Audit log benchmark, {started:%Y-%m-%d %H:%M %Z} ({minutes:.1f} min, load average at end {load_average()})")
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), Linux {platform.release()}, Python "
        f"{platform.python_version()}; --seconds {args.seconds:g} --writers {args.writers} --calls {args.calls} "
        f"--leaves {args.leaves} --proofs {args.proofs}"
    )
    print()
    print_table(results, args)
    if args.json:
        args.json.write_text(json.dumps({"date": started.isoformat(), "cpu": cpu_model(), **results}, indent=2))


if __name__ == "__main__":
    main()
