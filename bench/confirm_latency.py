"""Confirmation latency: from an operator's approve to the waiting MCP client receiving the outcome.

A client calls ``project.write.add_variable`` (a unique variable name each time) with
``params._meta.progressToken`` and ``Accept: application/json, text/event-stream``. The server suspends the
write into a pending confirmation and, because the client streams, holds the call open on SSE, sending
``notifications/progress`` every ``FORGE_CONFIRM_PROGRESS_SECONDS`` (0.05 here). On the first progress event
(the call is waiting) the bench finds the confirmation through the operator REST API
(``GET /api/confirmations?state=pending``), takes t0 and POSTs ``/api/confirmations/<id>/approve`` with an
operator token on a separate keep-alive client. The approve runs the executor (prepare, reserve, re-read,
atomic write with fsync, read back, VERIFIED, all audited) and announces the decision after commit through
the confirmation's channel-layer group; t1 is when the final ``tools/call`` result event is read. Per
iteration it records:

* ``outcome``: t1 - t0, approve to outcome, the figure the aim is about (under 50 ms p99);
* ``approve``: the approve request's own round trip (t0 to its HTTP answer);
* ``lag``: t1 minus the approve's answer (negative when the outcome reached the client first).

Every outcome must be state ``executed``; anything else (an HTTP error, a refusal, a timeout) is counted as
a failure and shown, never left out. Deployments (``--modes``):

* ``memory``: one ``manage.py runmcp`` (daphne, SQLite, in-memory channel layer);
* ``redis``: two ``runmcp`` processes sharing a scratch PostgreSQL database (made from ``DATABASE_URL``,
  dropped after) and Redis (``REDIS_URL``), the secrets and the projects directory. The client's call is
  held by process B, the operator approves on process A, so the decision crosses processes through Redis.
  Runs only when both variables are set.

Each mode gets a fresh data dir: migrated, MCP switched on, an operator with an operator token, a client
token, the test project ``tests/fixtures/plcopen/dosing_line.xml`` imported, and the client's session
allowed on it (a first project call, then ``manage.py access_requests allow --pending``). Servers listen on
127.0.0.1 only and are stopped in a ``finally`` whatever happens.

    .venv/bin/python bench/confirm_latency.py                # 200 iterations after 10 warm-up, both modes
    .venv/bin/python bench/confirm_latency.py --quick        # 30 iterations
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/confirm_latency.py --modes redis
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import mcp_load as ml
import run_all as ra

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = sys.executable
HOST = ra.HOST
# The main PLCopen test fixture (MAIN in tests/projects/conftest.py), part of the repository.
PROJECT_FILE = ROOT / "tests" / "fixtures" / "plcopen" / "dosing_line.xml"
SLUG = "bench-confirm"
OPERATOR = "bench-operator"
TOOL = "project.write.add_variable"
ADD = {"project": SLUG, "scope": "pou/LineMain", "section": "localVars", "type": "INT"}
MODES = ("memory", "redis")
SERVER_SETTINGS = {
    "FORGE_OVERRIDE_SECURITIES": "1",
    "FORGE_CONFIRM_PROGRESS_SECONDS": "0.05",
    "FORGE_CONFIRM_WAIT_S": "120",
}
STEP_TIMEOUT_S = 30.0  # any one read or request of an iteration
MAX_FAILURES_IN_A_ROW = 10
HEALTH_TIMEOUT_S = 60.0
WRAPPED_SLOWDOWN = 10  # a server under valgrind starts this much more slowly, or less
# How a server is started (before "runmcp ..."); bench/approval_timeline.py starts them through itself.
SERVER_COMMAND = [PYTHON, str(ROOT / "manage.py")]


# --------------------------------------------------------------------------
# Set-up: data dir, tokens, project, servers
# --------------------------------------------------------------------------


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*ra.SCALE_OUT_ENV, "DJANGO_SETTINGS_MODULE")}
    env.update({"FORGE_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", **SERVER_SETTINGS, **extra})
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PYTHON, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=ra.SETUP_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1].strip()


@dataclass
class Deployment:
    """Where the client calls (holder) and where the operator approves (approver), with the tokens."""

    mode: str
    client_base: str
    operator_base: str
    client_token: str
    operator_token: str
    pids: list[int]
    logs: list[Path]
    env: dict[str, str]


def prepare(data_dir: Path, extra: dict[str, str]) -> tuple[dict[str, str], str, str]:
    """Migrate, switch MCP on, make an operator (+ operator token) and a client token, import the project."""
    env = base_env(data_dir, **extra)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "mcp_switch", "on")
    password = data_dir / "operator-password"
    password.write_text("bench-operator-password-1")
    manage(env, "create_operator", OPERATOR, "--password-file", str(password))
    client_token = last_line(manage(env, "create_token", "--user", OPERATOR, "--label", "bench-confirm"))
    operator_token = last_line(manage(env, "create_operator_token", OPERATOR, "--label", "bench-confirm"))
    if not client_token.startswith("fmcp_") or not operator_token.startswith("fop_"):
        raise RuntimeError("create_token / create_operator_token printed no token")
    manage(env, "import_project", str(PROJECT_FILE), "--slug", SLUG)
    return env, client_token, operator_token


async def wait_healthy(
    proc: subprocess.Popen[bytes], base: str, log: Path, timeout_s: float = HEALTH_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0)) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{ra._log_tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.2)  # polling a process that is starting; there is no event to wait on
    raise RuntimeError(f"server did not answer /healthz within {timeout_s:.0f} s:\n{ra._log_tail(log)}")


@contextlib.asynccontextmanager
async def servers(
    envs: list[dict[str, str]], workdir: Path, wrapper: Sequence[str] = ()
) -> AsyncIterator[list[tuple[str, int, Path]]]:
    """Start one runmcp per environment on free loopback ports, each under `wrapper` if one is given (a command
    that runs the server, as valgrind does); always stop every one of them."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        started = []
        for index, env in enumerate(envs):
            port = ra.free_port()
            log = workdir / f"server-{index}-{port}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [*wrapper, *SERVER_COMMAND, "runmcp", "--host", HOST, "--port", str(port)],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=ra._die_with_parent,
                )
            procs.append(proc)
            base = f"http://{HOST}:{port}"
            await wait_healthy(proc, base, log, HEALTH_TIMEOUT_S * (WRAPPED_SLOWDOWN if wrapper else 1))
            started.append((base, proc.pid, log))
        yield started
    finally:
        for proc in procs:
            await ra._stop(proc)


@contextlib.contextmanager
def scratch_database() -> Iterator[dict[str, str]]:
    """tests/live.py's scratch PostgreSQL database (made from DATABASE_URL, dropped after)."""
    sys.path.insert(0, str(ROOT))
    from tests.live import scratch_database as live_scratch_database

    with live_scratch_database() as overrides:
        if not overrides:
            raise RuntimeError("DATABASE_URL is not a postgres:// URL")
        yield overrides


def scale_out_configured() -> bool:
    """Whether DATABASE_URL and REDIS_URL are set, so a scale-out deployment can be measured."""
    return bool(os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))


@contextlib.contextmanager
def scale_out_settings() -> Iterator[dict[str, str]]:
    """The settings every process of one scale-out deployment gets: a scratch PostgreSQL database (dropped
    after) and Redis."""
    with scratch_database() as database:
        yield {**database, "REDIS_URL": os.environ["REDIS_URL"]}


def sibling_settings(first_data_dir: Path) -> dict[str, str]:
    """What a further process of a deployment shares with the first one (on ``first_data_dir``) besides the
    database and Redis: the secrets (one audit chain, the same token digests) and the projects. Each process
    keeps its own data dir (its audit mirror)."""
    return {
        "FORGE_SECRETS_DIR": str(first_data_dir / "secrets"),
        "FORGE_PROJECTS_ROOT": str(first_data_dir / "projects"),
    }


@contextlib.asynccontextmanager
async def deployment(mode: str) -> AsyncIterator[Deployment]:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-confirm-{mode}-"))
    try:
        if mode == "memory":
            data_dir = workdir / "data"
            data_dir.mkdir()
            env, client_token, operator_token = await asyncio.to_thread(prepare, data_dir, {})
            async with servers([env], workdir) as started:
                ((base, pid, log),) = started
                yield Deployment(mode, base, base, client_token, operator_token, [pid], [log], env)
            return
        with scale_out_settings() as shared:
            data_a, data_b = workdir / "data-a", workdir / "data-b"
            data_a.mkdir()
            data_b.mkdir()
            env_a, client_token, operator_token = await asyncio.to_thread(prepare, data_a, shared)
            env_b = base_env(data_b, **shared, **sibling_settings(data_a))
            async with servers([env_a, env_b], workdir) as started:
                (base_a, pid_a, log_a), (base_b, pid_b, log_b) = started
                yield Deployment(
                    mode, base_b, base_a, client_token, operator_token, [pid_a, pid_b], [log_a, log_b], env_a
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------
# One iteration
# --------------------------------------------------------------------------


@dataclass
class Sample:
    ok: bool
    outcome_ms: float | None = None
    approve_ms: float | None = None
    lag_ms: float | None = None
    error: str = ""


class Failed(Exception):
    """An iteration that did not end in an executed outcome; the message says what came back."""


def tool_outcome(message: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a tools/call result (or the JSON in its first text block)."""
    if "error" in message:
        raise Failed(f"JSON-RPC error {message['error']}")
    result = message.get("result") or {}
    structured = result.get("structuredContent")
    if structured is None:
        with contextlib.suppress(LookupError, TypeError, ValueError):
            structured = json.loads(result["content"][0]["text"])
    if not isinstance(structured, dict):
        raise Failed(f"no structured outcome in {str(result)[:200]}")
    return structured


class Bench:
    """A client session allowed on the project, and an operator API client, both keep-alive."""

    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.mcp = ml.new_client()
        self.operator = ml.new_client()
        self.operator_headers = {"Authorization": f"Bearer {dep.operator_token}", "Accept": "application/json"}
        self.session: ml.StreamableSession | None = None
        self.serial = 0
        self.list_path = ""
        self.seen: set[str] = set()
        self.run_tag = os.urandom(3).hex()

    async def open(self) -> None:
        url = f"{self.dep.client_base}/mcp"
        headers = {"Authorization": f"Bearer {self.dep.client_token}"}
        self.session = await ml.streamable_session(url, headers, client=self.mcp)
        first = await self.call_json("project.overview", {"project": SLUG})
        if first.get("error") == "FORGE_ERR_PROJECT_ACCESS_PENDING":
            await asyncio.to_thread(manage, self.dep.env, "access_requests", "allow", "--pending", "--as", OPERATOR)
            first = await self.call_json("project.overview", {"project": SLUG})
        if first.get("error"):
            raise RuntimeError(f"project.overview still refused after allowing access: {first}")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()  # DELETE; the shared client is closed below
        await self.mcp.aclose()
        await self.operator.aclose()

    async def call_json(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        request_id = next(self.session.ids)
        response = await self.session.post(
            ml.jsonrpc_request(request_id, "tools/call", {"name": name, "arguments": arguments})
        )
        return tool_outcome(ml.response_message(response, request_id))

    async def pending_list(self) -> list[dict[str, Any]]:
        """The pending confirmations: GET /api/confirmations?state=pending (the first of the two spellings
        that answers 200, since the routes are still settling)."""
        last = None
        for path in [self.list_path] if self.list_path else ["/api/confirmations", "/api/confirmations/"]:
            response = await self.operator.get(
                f"{self.dep.operator_base}{path}",
                params={"state": "pending", "limit": "200"},
                headers=self.operator_headers,
            )
            if response.status_code == 200:
                self.list_path = path
                return response.json()["confirmations"]
            last = response
        assert last is not None
        raise Failed(f"GET /api/confirmations?state=pending: HTTP {last.status_code} {last.text[:200]}")

    async def pending_id(self, variable: str) -> str:
        """The confirmation this write call is waiting on: pending, asked by this session, not seen before
        (the listing does not carry the arguments; when several are new, the one naming the variable)."""
        assert self.session is not None
        fresh = [
            item
            for item in await self.pending_list()
            if item["session"] == self.session.session_id and item["id"] not in self.seen
        ]
        self.seen.update(item["id"] for item in fresh)
        if len(fresh) > 1:
            details = [
                await self.operator.get(
                    f"{self.dep.operator_base}/api/confirmations/{item['id']}", headers=self.operator_headers
                )
                for item in fresh
            ]
            fresh = [
                d.json() for d in details if d.status_code == 200 and d.json()["arguments"].get("name") == variable
            ]
        if len(fresh) != 1:
            raise Failed(f"{len(fresh)} new pending confirmations of this session name {variable}")
        return str(fresh[0]["id"])

    async def approve(self, pending_id: str) -> tuple[float, httpx.Response]:
        response = await self.operator.post(
            f"{self.dep.operator_base}/api/confirmations/{pending_id}/approve", json={}, headers=self.operator_headers
        )
        return time.perf_counter(), response

    @staticmethod
    async def next_message(events: AsyncIterator[tuple[str, str]], timeout: float) -> dict[str, Any]:
        if timeout <= 0:
            raise Failed("no outcome within the step timeout")
        event = await asyncio.wait_for(anext(events, None), timeout)
        if event is None:
            raise Failed("the SSE answer ended without the final result")
        return json.loads(event[1])

    @staticmethod
    async def drain(events: AsyncIterator[tuple[str, str]]) -> None:
        async for _ in events:
            pass

    async def once(self) -> Sample:
        assert self.session is not None
        self.serial += 1
        variable = f"Bench_{self.run_tag}_{self.serial}"
        request_id = next(self.session.ids)
        params = {"name": TOOL, "arguments": {**ADD, "name": variable}, "_meta": {"progressToken": f"p{request_id}"}}
        body = json.dumps(ml.jsonrpc_request(request_id, "tools/call", params)).encode()
        approving: asyncio.Task[tuple[float, httpx.Response]] | None = None
        try:
            async with self.mcp.stream(
                "POST", self.session.url, content=body, headers=self.session.headers
            ) as response:
                if response.status_code != 200 or ml.answer_form(response) != "sse":
                    text = (await response.aread()).decode(errors="replace")
                    raise Failed(f"write call: HTTP {response.status_code} {ml.answer_form(response)}: {text[:300]}")
                events = ml.sse_events(response)
                first = await self.next_message(events, STEP_TIMEOUT_S)
                if first.get("method") != "notifications/progress":
                    raise Failed(f"the call answered at once instead of waiting: {str(first)[:300]}")
                pending = await asyncio.wait_for(self.pending_id(variable), STEP_TIMEOUT_S)
                t0 = time.perf_counter()
                approving = asyncio.create_task(self.approve(pending))
                deadline = t0 + STEP_TIMEOUT_S
                while True:
                    if approving.done() and approving.result()[1].status_code != 200:
                        break  # refused: no outcome will come; reported below
                    message = await self.next_message(events, deadline - time.perf_counter())
                    if message.get("id") == request_id and "method" not in message:
                        t1 = time.perf_counter()
                        break
                replied, approved = await asyncio.wait_for(approving, STEP_TIMEOUT_S)
                approving = None
                if approved.status_code == 200:
                    # Read the end of the body so the connection goes back to the pool.
                    await asyncio.wait_for(self.drain(events), STEP_TIMEOUT_S)
            if approved.status_code != 200:
                raise Failed(f"approve: HTTP {approved.status_code} {approved.text[:300]}")
            outcome = tool_outcome(message)
            if outcome.get("state") != "executed":
                raise Failed(f"outcome {outcome.get('state')}: {str(outcome)[:300]}")
            return Sample(True, (t1 - t0) * 1000, (replied - t0) * 1000, (t1 - replied) * 1000)
        except (Failed, httpx.HTTPError, TimeoutError, ValueError, KeyError) as exc:
            return Sample(False, error=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            if approving is not None:
                approving.cancel()
                with contextlib.suppress(BaseException):
                    await approving


# --------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------


@dataclass
class Spread:
    p50: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            return cls()
        ordered = sorted(values)
        return cls(ml.percentile(ordered, 0.50), ml.percentile(ordered, 0.99), ordered[-1])


@dataclass
class ModeFigures:
    mode: str
    n: int = 0
    ok: int = 0
    failed: int = 0
    outcome: Spread = field(default_factory=Spread)
    approve: Spread = field(default_factory=Spread)
    lag: Spread = field(default_factory=Spread)
    server_cpu_ms: float | None = None
    background_pct: float | None = None
    seconds: float | None = None
    errors: list[str] = field(default_factory=list)
    failure: str | None = None
    # Every measured iteration in order (None where it failed), for the JSON output.
    outcome_ms: list[float | None] = field(default_factory=list)
    approve_ms: list[float | None] = field(default_factory=list)


def busy_other_ms(pids: list[int]) -> float:
    """CPU (ms) the machine used outside the servers and this client so far."""
    return ra.machine_busy_ms() - ml.server_cpu_ms(pids) - time.process_time() * 1000


async def measure(mode: str, args: argparse.Namespace) -> ModeFigures:
    figures = ModeFigures(mode)
    try:
        async with deployment(mode) as dep:
            print(
                f"  {mode}: pids {','.join(map(str, dep.pids))}, client on {dep.client_base},"
                f" operator on {dep.operator_base}",
                flush=True,
            )
            bench = Bench(dep)
            try:
                await asyncio.wait_for(bench.open(), STEP_TIMEOUT_S * 2)
                for _ in range(args.warmup):
                    sample = await bench.once()
                    if not sample.ok:
                        figures.errors.append(f"warm-up: {sample.error}")
                cpu_before = ml.server_cpu_ms(dep.pids)
                other_before, wall_before = busy_other_ms(dep.pids), time.monotonic()
                samples: list[Sample] = []
                in_a_row = 0
                for _ in range(args.n):
                    sample = await bench.once()
                    samples.append(sample)
                    in_a_row = 0 if sample.ok else in_a_row + 1
                    if not sample.ok:
                        figures.errors.append(sample.error)
                    if in_a_row >= MAX_FAILURES_IN_A_ROW:
                        figures.failure = f"stopped after {in_a_row} failures in a row"
                        break
                wall = time.monotonic() - wall_before
                figures.seconds = wall
                figures.background_pct = max(busy_other_ms(dep.pids) - other_before, 0.0) * 100 / max(wall * 1000, 1)
                good = [s for s in samples if s.ok]
                figures.n, figures.ok, figures.failed = len(samples), len(good), len(samples) - len(good)
                figures.server_cpu_ms = (ml.server_cpu_ms(dep.pids) - cpu_before) / max(len(samples), 1)
                figures.outcome = Spread.of([s.outcome_ms for s in good if s.outcome_ms is not None])
                figures.approve = Spread.of([s.approve_ms for s in good if s.approve_ms is not None])
                figures.lag = Spread.of([s.lag_ms for s in good if s.lag_ms is not None])
                figures.outcome_ms = [s.outcome_ms for s in samples]
                figures.approve_ms = [s.approve_ms for s in samples]
            finally:
                await bench.close()
                if figures.failed or figures.failure:
                    for log in dep.logs:
                        tail = ra._log_tail(log, 15)
                        if tail:
                            figures.errors.append(f"{log.name}:\n{tail}")
    except (RuntimeError, OSError, subprocess.SubprocessError, httpx.HTTPError, ml.CallError, TimeoutError) as exc:
        figures.failure = f"{type(exc).__name__}: {exc}"[:2000]
    return figures


# --------------------------------------------------------------------------
# Report and CLI
# --------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows: list[ModeFigures]) -> None:
    header = (
        f"{'mode':<7} {'n':>4} {'ok':>4} {'fail':>4} | {'outcome p50':>11} {'p99':>6} {'max':>6} |"
        f" {'approve p50':>11} {'p99':>6} {'max':>6} | {'lag p50':>7} {'p99':>6} | {'srv CPU':>7} {'bg %':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.mode:<7} {r.n:>4} {r.ok:>4} {r.failed:>4} | {_f(r.outcome.p50):>11} {_f(r.outcome.p99):>6}"
            f" {_f(r.outcome.max):>6} | {_f(r.approve.p50):>11} {_f(r.approve.p99):>6} {_f(r.approve.max):>6} |"
            f" {_f(r.lag.p50):>7} {_f(r.lag.p99):>6} | {_f(r.server_cpu_ms):>7} {_f(r.background_pct, 0):>5}"
        )
    print(
        "ms. outcome: approve sent -> final tools/call result read by the client (aim: p99 < 50 ms);"
        " approve: the approve request's round trip (it runs the executor); lag: outcome minus the approve's"
        " answer (negative: the client heard first); srv CPU: server CPU ms per iteration (all server"
        " processes: the write call, its progress events, the pending listing and the approve; it moves with the"
        " VM's speed, which other tenants change from run to run); bg %: CPU of"
        " other processes (PostgreSQL and Redis included) while measuring, % of one core"
    )
    for r in rows:
        if r.failure:
            print(f"  {r.mode}: {r.failure}")
        for error in r.errors[:5]:
            print(f"  {r.mode}: {error}")
        if len(r.errors) > 5:
            print(f"  {r.mode}: ... {len(r.errors) - 5} more")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, help="measured iterations per mode (200; --quick 30)")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured iterations first (10)")
    parser.add_argument("--quick", action="store_true", help="30 iterations per mode")
    parser.add_argument(
        "--modes",
        type=ml.csv_of(MODES),
        help="memory and/or redis (both; redis only when DATABASE_URL and REDIS_URL are set)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    args.n = args.n if args.n is not None else (30 if args.quick else 200)
    if args.n < 1 or args.warmup < 0:
        parser.error("--n must be positive and --warmup not negative")
    wanted = args.modes or set(MODES)
    if "redis" in wanted and not scale_out_configured():
        if args.modes:
            parser.error("the redis mode needs DATABASE_URL (postgres://) and REDIS_URL")
        wanted.discard("redis")
        print("redis mode skipped: set DATABASE_URL (postgres://) and REDIS_URL to run it")
    args.modes = [mode for mode in MODES if mode in wanted]
    if not PROJECT_FILE.is_file():
        parser.error(f"the PLCopen test project {PROJECT_FILE} is missing")
    return args


async def run(args: argparse.Namespace) -> list[ModeFigures]:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)  # stop the servers on SIGTERM too
    rows = []
    for mode in args.modes:
        print(f"== {mode}", flush=True)
        row = await measure(mode, args)
        rows.append(row)
        print(
            f"  {mode}: {row.ok}/{row.n} executed, outcome p50 {_f(row.outcome.p50)} p99 {_f(row.outcome.p99)} ms,"
            f" approve p50 {_f(row.approve.p50)} p99 {_f(row.approve.p99)} ms"
            + (f"; {row.failure}" if row.failure else ""),
            flush=True,
        )
    return rows


def main() -> None:
    args = parse_args()
    ra.print_heading("Confirmation latency", f"--n {args.n} --warmup {args.warmup} modes {','.join(args.modes)}")
    started = time.monotonic()
    rows = asyncio.run(run(args))
    print()
    print(f"== results ({(time.monotonic() - started) / 60:.1f} min, load average at end {ra.load_average()})")
    print_table(rows)
    if args.json:
        payload = {
            "date": datetime.now().astimezone().isoformat(timespec="seconds"),
            "cores": os.cpu_count(),
            "cpu": ra.cpu_model(),
            "options": {"n": args.n, "warmup": args.warmup, "modes": args.modes},
            "modes": [asdict(row) for row in rows],
        }
        args.json.write_text(json.dumps(payload, indent=2))
    if any(row.failed or row.failure for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
