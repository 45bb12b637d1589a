"""What HTTPS costs on Forge's TLS listener: new-connection handshakes and keep-alive MCP calls, HTTPS against
plain HTTP on the same server process, measured side by side in one run.

Each key type gets one ``manage.py runmcp --port P --tls-port T`` (plain HTTP and HTTPS in the same process)
on a fresh migrated data dir with MCP switched on and a client token: first the seed's RSA-4096 server
certificate, then, on a second fresh data dir, ECDSA P-256 (``FORGE_TLS_KEY_TYPE=p256``). Never two servers at
once. The client verifies against the certificate the server made (``secrets/tls/server.crt``) and offers
TLS 1.3 only.

* **connections** (every key type): a new TCP connection, the TLS handshake, one ``GET /healthz`` and a close,
  with the stdlib ``ssl`` module. ``plain`` does the same on the HTTP port, so the difference is what TLS adds.
  ``full`` starts each connection without a session; ``resumed`` offers the session ticket of the previous
  connection (a PSK handshake, no certificate signature); the ``reused`` column counts the ones the server
  really resumed. Sequentially (``--conns`` connections after 20 warm-up) it gives p50/p99 of the handshake
  alone (connect to handshake done; TCP connect only for ``plain``) and of the whole connection, and
  connections/s; then ``--conn-clients`` threads connect back to back for ``--conn-seconds``, which gives
  handshakes/s at load. ``bare plain`` and ``bare full`` connect (and shake hands) and close at once, with no
  request: the server CPU of the handshake alone (``bare plain``, the baseline, gives only its server CPU:
  bare TCP connections closed at once outrun the server's accepts and overflow the listen backlog). Server CPU per connection is utime+stime from
  /proc (as in ``mcp_load``); the ratios subtract the plain-HTTP kind to give what TLS adds.
* **calls** (RSA-4096 server): ``tools/call server_info`` answered as JSON over keep-alive Streamable HTTP
  sessions (``mcp_load``'s sessions; one connection per session, its handshake made before the clock starts):
  ``--n`` sequential calls per scheme for p50/p99 (one session each, in alternating blocks of 50), then
  ``--clients`` sessions back to back for calls/s, in eight load phases of ``--seconds`` (plain, HTTPS, HTTPS,
  plain, twice) summed per scheme, so a drift of the VM's speed over the run weighs on both alike.

``bg %`` is the CPU of processes other than the server and this client while a row ran (as in ``run_all``).

    .venv/bin/python bench/tls_bench.py                  # about 2.5 minutes
    .venv/bin/python bench/tls_bench.py --quick          # smoke run, under a minute
    .venv/bin/python bench/tls_bench.py --json /tmp/tls.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import mcp_load as ml
import run_all as ra

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
HOST = ra.HOST
KEY_TYPES = ("rsa4096", "p256")
WARMUP_CONNECTIONS = 20
SOCKET_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 65_536
HEALTHZ = f"GET /healthz HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
# "bare" connections close right after the handshake (no request): the server CPU of a handshake alone.
CONNECTION_KINDS = ("plain", "full", "resumed", "bare plain", "bare full")
SEQ_BLOCK = 50  # sequential calls per block; the schemes alternate block by block
LOAD_ROUNDS = ("http", "https", "https", "http", "http", "https", "https", "http")


# --------------------------------------------------------------------------
# The server: plain HTTP and HTTPS in one runmcp
# --------------------------------------------------------------------------


@dataclass
class Server:
    key_type: str
    pid: int
    port: int
    tls_port: int
    token: str
    cert_path: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def mcp_url(self, scheme: str) -> str:
        port = self.tls_port if scheme == "https" else self.port
        return f"{scheme}://{HOST}:{port}/mcp"


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [ra.PYTHON, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=ra.SETUP_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def prepare(data_dir: Path, key_type: str) -> tuple[dict[str, str], str]:
    """Migrate a fresh data dir, switch MCP on and make a client token; return the server's env and the token."""
    env = ra.server_env(data_dir)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["FORGE_TLS_KEY_TYPE"] = key_type
    for name in ("FORGE_TLS_CERT", "FORGE_TLS_KEY", "FORGE_TLS_PORT", "FORGE_PLAIN_HTTP"):
        env.pop(name, None)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "mcp_switch", "on")
    created = manage(env, "create_token", "--user", "bench", "--create-user", "--label", "tls-bench")
    token = created.strip().splitlines()[-1].strip()
    if not token.startswith("fmcp_"):
        raise RuntimeError(f"create_token printed no token: {created[-300:]!r}")
    return env, token


def client_context(cert_path: Path) -> ssl.SSLContext:
    """TLS 1.3 only, verifying the server against the certificate it made (its SAN holds 127.0.0.1)."""
    context = ssl.create_default_context(cafile=str(cert_path))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    return context


async def _wait_healthy(proc: subprocess.Popen[bytes], urls: list[str], verify: Callable[[], Any], log: Path) -> None:
    deadline = time.monotonic() + ra.START_TIMEOUT_S
    pending = list(urls)
    while pending and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{ra._log_tail(log)}")
        verified = verify()
        if verified is not None:
            async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), verify=verified) as client:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(pending[0])).status_code == 200:
                        pending.pop(0)
                        continue
        await asyncio.sleep(0.2)  # polling a process that is starting; there is no event to wait on
    if pending:
        raise RuntimeError(
            f"server did not answer {pending[0]} within {ra.START_TIMEOUT_S:.0f} s:\n{ra._log_tail(log)}"
        )


@contextlib.asynccontextmanager
async def running(key_type: str) -> AsyncIterator[Server]:
    """One runmcp serving plain HTTP and HTTPS on a fresh data dir; always stopped, its dir removed."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-tls-{key_type}-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        data_dir = workdir / "data"
        data_dir.mkdir()
        env, token = await asyncio.to_thread(prepare, data_dir, key_type)
        port, tls_port = ra.free_port(), ra.free_port()
        while tls_port == port:
            tls_port = ra.free_port()
        log = workdir / "server.log"
        command = ["runmcp", "--host", HOST, "--port", str(port), "--tls-port", str(tls_port)]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [ra.PYTHON, str(ROOT / "manage.py"), *command],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=ra._die_with_parent,
            )
        cert_path = data_dir / "secrets" / "tls" / "server.crt"

        def verify() -> ssl.SSLContext | None:
            # The certificate is written before the listener starts; until then there is nothing to trust.
            return client_context(cert_path) if cert_path.exists() else None

        urls = [f"http://{HOST}:{port}/healthz", f"https://{HOST}:{tls_port}/healthz"]
        await _wait_healthy(proc, urls, verify, log)
        yield Server(key_type, proc.pid, port, tls_port, token, cert_path)
    finally:
        if proc is not None:
            await ra._stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------
# Connections: handshake + one GET /healthz + close
# --------------------------------------------------------------------------


@dataclass
class Connection:
    handshake_ms: float
    total_ms: float
    session: ssl.SSLSession | None
    reused: bool


def _read_response(sock: socket.socket) -> None:
    """Read one HTTP/1.1 answer with a Content-Length body (healthz's JSON) and check it is a 200."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk or len(data) > MAX_RESPONSE_BYTES:
            raise ConnectionError(f"connection closed inside the answer's head: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(f"not a 200: {head[:200]!r}")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        None,
    )
    if length is None:
        raise ConnectionError("answer without Content-Length")
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed inside the body")
        body += chunk


def connect_once(
    port: int, context: ssl.SSLContext | None, session: ssl.SSLSession | None = None, request: bool = True
) -> Connection:
    """One new connection: TCP connect, TLS handshake (with ``context``), GET /healthz unless not ``request``,
    close."""
    start = time.perf_counter()
    raw = socket.create_connection((HOST, port), timeout=SOCKET_TIMEOUT_S)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock: socket.socket = raw
    try:
        if context is not None:
            sock = context.wrap_socket(raw, server_hostname=HOST, session=session)
        shaken = time.perf_counter()
        if not request:
            return Connection((shaken - start) * 1000, (shaken - start) * 1000, None, False)
        sock.sendall(HEALTHZ)
        _read_response(sock)  # in TLS 1.3 the session tickets arrive before the answer, so they are read too
        done = time.perf_counter()
        if isinstance(sock, ssl.SSLSocket):
            return Connection((shaken - start) * 1000, (done - start) * 1000, sock.session, bool(sock.session_reused))
        return Connection((shaken - start) * 1000, (done - start) * 1000, None, False)
    finally:
        sock.close()


@dataclass
class ConnectionFigures:
    key_type: str
    kind: str
    protocol: str = "-"
    connections: int = 0
    reused: int = 0
    handshake_p50_ms: float | None = None
    handshake_p99_ms: float | None = None
    total_p50_ms: float | None = None
    total_p99_ms: float | None = None
    seq_per_s: float | None = None
    seq_server_cpu_ms: float | None = None
    load_per_s: float | None = None
    load_total_p50_ms: float | None = None
    load_server_cpu_ms: float | None = None
    load_client_cpu_ms: float | None = None
    load_errors: int = 0
    background_pct: float | None = None
    failure: str | None = None


class Connector:
    """Makes connections of one kind, each resumed one offering the ticket the previous one received."""

    def __init__(self, server: Server, kind: str) -> None:
        self.port = server.port if kind.endswith("plain") else server.tls_port
        self.context = None if kind.endswith("plain") else client_context(server.cert_path)
        self.resume = kind == "resumed"
        self.request = not kind.startswith("bare")
        self.local = threading.local()

    def __call__(self) -> Connection:
        offered = getattr(self.local, "session", None) if self.resume else None
        connection = connect_once(self.port, self.context, offered, self.request)
        if self.resume and connection.session is not None:
            self.local.session = connection.session
        return connection

    def describe(self) -> str:
        if self.context is None:
            return "http/1.1"
        with (
            socket.create_connection((HOST, self.port), timeout=SOCKET_TIMEOUT_S) as raw,
            self.context.wrap_socket(raw, server_hostname=HOST) as sock,
        ):
            cipher = sock.cipher()
            return f"{sock.version()} {cipher[0] if cipher else '?'}"


def measure_connections(server: Server, kind: str, args: argparse.Namespace) -> ConnectionFigures:
    figures = ConnectionFigures(server.key_type, kind)
    connector = Connector(server, kind)
    figures.protocol = connector.describe()
    window = ra.BackgroundWindow(server.pid)
    for _ in range(WARMUP_CONNECTIONS):
        connector()
    cpu = ml.CpuWindow(server.pid)
    started = time.perf_counter()
    made = [connector() for _ in range(args.conns)]
    elapsed = time.perf_counter() - started
    figures.seq_server_cpu_ms, _client = cpu.per_call(len(made))
    figures.connections = len(made)
    figures.reused = sum(c.reused for c in made)
    figures.seq_per_s = len(made) / elapsed
    handshakes = sorted(c.handshake_ms for c in made)
    totals = sorted(c.total_ms for c in made)
    figures.handshake_p50_ms, figures.handshake_p99_ms = ml.percentile(handshakes, 0.5), ml.percentile(handshakes, 0.99)
    figures.total_p50_ms, figures.total_p99_ms = ml.percentile(totals, 0.5), ml.percentile(totals, 0.99)

    if kind == "bare plain":
        # Bare TCP connections closed at once outrun the server's accepts even one at a time: the listen backlog
        # fills and a dropped SYN comes back a second later. So this kind gives only the server CPU baseline.
        figures.seq_per_s = None
        figures.background_pct = window.percent_of_core()
        return figures
    load_totals: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + args.conn_seconds

    def worker() -> None:
        own: list[float] = []
        own_errors: list[str] = []
        while time.monotonic() < deadline and len(own_errors) < ml.MAX_ERRORS_PER_CLIENT:
            try:
                own.append(connector().total_ms)
            except (OSError, ConnectionError) as exc:
                own_errors.append(repr(exc))
        with lock:
            load_totals.extend(own)
            errors.extend(own_errors)

    cpu = ml.CpuWindow(server.pid)
    started = time.perf_counter()
    threads = [threading.Thread(target=worker, name=f"connect-{i}") for i in range(args.conn_clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.conn_seconds + 60)
    elapsed = time.perf_counter() - started
    figures.load_server_cpu_ms, figures.load_client_cpu_ms = cpu.per_call(len(load_totals))
    figures.load_per_s = len(load_totals) / elapsed
    figures.load_errors = len(errors)
    if load_totals:
        figures.load_total_p50_ms = ml.percentile(sorted(load_totals), 0.5)
    if errors:
        figures.failure = errors[0]
    figures.background_pct = window.percent_of_core()
    return figures


# --------------------------------------------------------------------------
# Calls over keep-alive sessions: plain HTTP against HTTPS
# --------------------------------------------------------------------------


@dataclass
class CallFigures:
    scheme: str
    p50_ms: float | None = None
    p99_ms: float | None = None
    seq_server_cpu_ms: float | None = None
    calls: int = 0
    seconds: float = 0.0
    load_server_cpu_ms_total: float = 0.0
    load_client_cpu_ms_total: float = 0.0
    errors: int = 0
    rounds: list[float] = field(default_factory=list)
    background_pct: float | None = None
    first_error: str | None = None

    @property
    def calls_per_s(self) -> float | None:
        return self.calls / self.seconds if self.seconds else None

    @property
    def load_server_cpu_ms(self) -> float | None:
        return self.load_server_cpu_ms_total / self.calls if self.calls else None

    @property
    def load_client_cpu_ms(self) -> float | None:
        return self.load_client_cpu_ms_total / self.calls if self.calls else None


def session_factory(server: Server, scheme: str) -> ml.SessionFactory:
    url = server.mcp_url(scheme)
    if scheme == "http":
        return lambda: ml.streamable_session(url, server.headers)
    context = client_context(server.cert_path)

    async def open_https() -> ml.Session:
        client = httpx.AsyncClient(timeout=ml.HTTP_TIMEOUT, verify=context)
        try:
            session = await ml.streamable_session(url, server.headers, client=client)
        except BaseException:
            await client.aclose()
            raise
        session.owns_client = True  # its own pool, closed with the session as mcp_load's are
        return session

    return open_https


async def measure_calls(server: Server, args: argparse.Namespace) -> dict[str, CallFigures]:
    """Sequential calls on one session per scheme in alternating blocks, then load phases in ABBA rounds: the
    VM's speed drifts with other tenants, and alternating lets the drift weigh on both schemes alike."""
    rows = {scheme: CallFigures(scheme) for scheme in ("http", "https")}
    windows = {scheme: 0.0 for scheme in rows}
    window = ra.BackgroundWindow(server.pid)
    sessions = {scheme: await session_factory(server, scheme)() for scheme in rows}
    timings: dict[str, list[float]] = {scheme: [] for scheme in rows}
    cpu_ms = {scheme: 0.0 for scheme in rows}
    try:
        for session in sessions.values():
            for _ in range(ml.WARMUP_CALLS):
                await session.call(ml.TOOL)
        for block in range(max(args.n // SEQ_BLOCK, 1)):
            for scheme in ("http", "https") if block % 2 == 0 else ("https", "http"):
                before = ml.server_cpu_ms(server.pid)
                for _ in range(SEQ_BLOCK):
                    start = time.perf_counter()
                    await sessions[scheme].call(ml.TOOL)
                    timings[scheme].append((time.perf_counter() - start) * 1000)
                cpu_ms[scheme] += ml.server_cpu_ms(server.pid) - before
    finally:
        for session in sessions.values():
            await session.close()
    sequential_bg = window.percent_of_core()
    for scheme, row in rows.items():
        ordered = sorted(timings[scheme])
        row.p50_ms, row.p99_ms = ml.percentile(ordered, 0.5), ml.percentile(ordered, 0.99)
        row.seq_server_cpu_ms = cpu_ms[scheme] / len(ordered)
    for scheme in LOAD_ROUNDS:
        row = rows[scheme]
        window = ra.BackgroundWindow(server.pid)
        load = await ra.bounded(
            ml.concurrent_throughput(session_factory(server, scheme), args.clients, args.seconds, False, server.pid),
            120 + args.seconds * 3,
        )
        row.calls += load.calls
        row.seconds += load.seconds
        row.load_server_cpu_ms_total += (load.server_cpu_ms_per_call or 0.0) * load.calls
        row.load_client_cpu_ms_total += load.client_cpu_ms_per_call * load.calls
        row.errors += load.errors
        row.rounds.append(load.calls_per_s)
        row.first_error = row.first_error or load.first_error
        windows[scheme] += window.percent_of_core()
    for scheme, row in rows.items():
        row.background_pct = (sequential_bg + windows[scheme]) / (1 + LOAD_ROUNDS.count(scheme))
    return rows


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


@dataclass
class Results:
    connections: list[ConnectionFigures] = field(default_factory=list)
    calls: dict[str, CallFigures] = field(default_factory=dict)

    def connection(self, key_type: str, kind: str) -> ConnectionFigures | None:
        return next((c for c in self.connections if c.key_type == key_type and c.kind == kind), None)


_f = ra._f


def _ratio(ours: float | None, reference: float | None) -> str:
    return "-" if ours is None or not reference else f"{ours / reference:.2f}x"


def print_connections(results: Results) -> None:
    header = (
        f"{'cert':<8} {'kind':<10} {'protocol':<32} {'reused':>9} {'hs p50':>7} {'hs p99':>7} {'conn p50':>8}"
        f" {'conn p99':>8} {'seq/s':>6} {'seq srv':>8} {'load/s':>7} {'load p50':>8} {'load srv':>8}"
        f" {'client':>7} {'err':>4} {'bg %':>5}"
    )
    print(header)
    print("-" * len(header))
    for c in results.connections:
        reused = f"{c.reused}/{c.connections}" if c.kind in ("full", "resumed") else "-"
        print(
            f"{c.key_type:<8} {c.kind:<10} {c.protocol[:32]:<32} {reused:>9} {_f(c.handshake_p50_ms):>7}"
            f" {_f(c.handshake_p99_ms):>7} {_f(c.total_p50_ms):>8} {_f(c.total_p99_ms):>8} {_f(c.seq_per_s, 0):>6}"
            f" {_f(c.seq_server_cpu_ms, 3):>8} {_f(c.load_per_s, 0):>7} {_f(c.load_total_p50_ms):>8}"
            f" {_f(c.load_server_cpu_ms, 3):>8} {_f(c.load_client_cpu_ms):>7} {c.load_errors:>4}"
            f" {_f(c.background_pct, 0):>5}"
        )
        if c.failure:
            print(f"  {c.key_type} {c.kind}: {c.failure}")
    print(
        "hs: connect to handshake done (TCP connect only for plain), ms; conn: the whole connection with its"
        " GET /healthz, ms; seq/s, seq srv: sequential connections/s and server CPU ms per connection; load/s,"
        " load p50, load srv, client: the same from the --conn-clients threads (client: this client's CPU ms"
        " per connection)"
    )


def print_calls(results: Results) -> None:
    header = (
        f"{'scheme':<7} {'p50 ms':>7} {'p99 ms':>7} {'seq srv':>8} {'calls/s':>8} {'rounds':>16}"
        f" {'load srv':>8} {'client':>7} {'err':>4} {'bg %':>5}"
    )
    print(header)
    print("-" * len(header))
    for row in results.calls.values():
        rounds = "/".join(f"{r:.0f}" for r in row.rounds)
        print(
            f"{row.scheme:<7} {_f(row.p50_ms):>7} {_f(row.p99_ms):>7} {_f(row.seq_server_cpu_ms, 3):>8}"
            f" {_f(row.calls_per_s, 0):>8} {rounds:>16} {_f(row.load_server_cpu_ms, 3):>8}"
            f" {_f(row.load_client_cpu_ms):>7} {row.errors:>4} {_f(row.background_pct, 0):>5}"
        )
        if row.first_error:
            print(f"  {row.scheme}: {row.first_error}")
    print("rounds: calls/s of each load phase (run plain, HTTPS, HTTPS, plain, twice); srv, client: CPU ms per call")


def print_ratios(results: Results) -> None:
    print(f"{'figure':<52} {'value':>14}")
    print("-" * 67)
    plain, tls = results.calls.get("http"), results.calls.get("https")
    if plain and tls:
        for label, attr in (
            ("calls/s at load, HTTPS / plain", "calls_per_s"),
            ("server CPU ms/call at load, HTTPS / plain", "load_server_cpu_ms"),
            ("server CPU ms/call sequential, HTTPS / plain", "seq_server_cpu_ms"),
            ("p50 ms sequential, HTTPS / plain", "p50_ms"),
        ):
            print(f"{label:<52} {_ratio(getattr(tls, attr), getattr(plain, attr)):>14}")
    for key_type in KEY_TYPES:
        row = {kind: results.connection(key_type, kind) for kind in CONNECTION_KINDS}
        full, resumed, bare = row["full"], row["resumed"], row["bare full"]
        lines = [
            ("full handshake p50 / p99 ms", full and f"{_f(full.handshake_p50_ms)} / {_f(full.handshake_p99_ms)}"),
            (
                "resumed handshake p50 / p99 ms",
                resumed and f"{_f(resumed.handshake_p50_ms)} / {_f(resumed.handshake_p99_ms)}",
            ),
            ("full handshakes/s at load (bare)", bare and _f(bare.load_per_s, 0)),
            ("server CPU ms per full handshake (bare - bare plain)", _f(_minus(bare, row["bare plain"]), 3)),
            ("server CPU ms added per connection, full", _f(_minus(full, row["plain"]), 3)),
            ("server CPU ms added per connection, resumed", _f(_minus(resumed, row["plain"]), 3)),
            (
                "new connections/s at load, full / plain",
                full and row["plain"] and _ratio(full.load_per_s, row["plain"].load_per_s),
            ),
        ]
        for label, value in lines:
            print(f"{f'{key_type} {label}':<52} {value or '-':>14}")
    rsa, p256 = results.connection("rsa4096", "bare full"), results.connection("p256", "bare full")
    if rsa and p256:
        print(f"{'bare full handshakes/s, RSA-4096 / P-256':<52} {_ratio(rsa.load_per_s, p256.load_per_s):>14}")
    print(
        "server CPU ms per ... handshake: server CPU per connection at load minus that of plain HTTP's on the same"
        " server (bare: connect and close only; added per connection: both with their GET /healthz)"
    )


def _minus(row: ConnectionFigures | None, base: ConnectionFigures | None) -> float | None:
    """Server CPU per connection of ``row`` at load minus that of ``base`` (sequential when it has no load)."""
    if row is None or base is None or row.load_server_cpu_ms is None:
        return None
    baseline = base.load_server_cpu_ms if base.load_server_cpu_ms is not None else base.seq_server_cpu_ms
    return None if baseline is None else row.load_server_cpu_ms - baseline


def print_header(args: argparse.Namespace) -> None:
    print(f"TLS benchmark, {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(
        f"machine: {os.cpu_count()} cores ({ra.cpu_model()}), Linux {platform.release()}, Python"
        f" {platform.python_version()}, {ssl.OPENSSL_VERSION}"
    )
    print(
        f"options: --conns {args.conns} --conn-clients {args.conn_clients} --conn-seconds {args.conn_seconds:g}"
        f" --n {args.n} --clients {args.clients} --seconds {args.seconds:g}; load average at start"
        f" {ra.load_average()}"
    )
    print()


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conns", type=int, help="sequential new connections per kind (300; --quick 50)")
    parser.add_argument("--conn-clients", type=int, default=8, help="threads making connections at load (8)")
    parser.add_argument("--conn-seconds", type=float, help="duration of each connection load phase (5; --quick 1)")
    parser.add_argument("--n", type=int, help="sequential calls per scheme for p50/p99 (500; --quick 100)")
    parser.add_argument("--clients", type=int, default=20, help="concurrent sessions for calls/s (20)")
    parser.add_argument("--seconds", type=float, help="duration of each of the 8 call load phases (3; --quick 0.5)")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    args = parser.parse_args(argv)
    defaults = (50, 1.0, 100, 0.5) if args.quick else (300, 5.0, 500, 3.0)
    args.conns = args.conns if args.conns is not None else defaults[0]
    args.conn_seconds = args.conn_seconds if args.conn_seconds is not None else defaults[1]
    args.n = args.n if args.n is not None else defaults[2]
    args.seconds = args.seconds if args.seconds is not None else defaults[3]
    if min(args.conns, args.conn_clients, args.n, args.clients) < 1 or min(args.conn_seconds, args.seconds) <= 0:
        parser.error("counts and durations must be positive")
    return args


async def run(args: argparse.Namespace) -> Results:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)  # stop the server on SIGTERM too
    ml.raise_fd_limit(ra.FD_LIMIT)
    results = Results()
    for key_type in KEY_TYPES:
        print(f"== {key_type}: runmcp with plain HTTP and HTTPS, fresh data dir", flush=True)
        async with running(key_type) as server:
            print(f"  pid {server.pid}, http :{server.port}, https :{server.tls_port}", flush=True)
            for kind in CONNECTION_KINDS:
                figures = await asyncio.to_thread(measure_connections, server, kind, args)
                results.connections.append(figures)
                print(
                    f"  connections {kind}: {figures.protocol}, handshake p50 {_f(figures.handshake_p50_ms)} ms,"
                    f" {_f(figures.load_per_s, 0)}/s at load, server {_f(figures.load_server_cpu_ms, 3)} ms each",
                    flush=True,
                )
            if key_type == "rsa4096":
                results.calls = await measure_calls(server, args)
                for row in results.calls.values():
                    print(
                        f"  calls {row.scheme}: p50 {_f(row.p50_ms)} ms, {_f(row.calls_per_s, 0)} calls/s,"
                        f" server {_f(row.load_server_cpu_ms, 3)} ms/call",
                        flush=True,
                    )
    return results


def main() -> None:
    args = parse_args()
    print_header(args)
    started = time.monotonic()
    results = asyncio.run(run(args))
    figures = {
        "openssl": ssl.OPENSSL_VERSION,
        "connections": [asdict(c) for c in results.connections],
        "calls": {
            scheme: {
                **asdict(row),
                "calls_per_s": row.calls_per_s,
                "load_server_cpu_ms": row.load_server_cpu_ms,
                "load_client_cpu_ms": row.load_client_cpu_ms,
            }
            for scheme, row in results.calls.items()
        },
    }
    parts = [lambda: print_connections(results), lambda: print_calls(results), lambda: print_ratios(results)]
    ra.report(args, started, parts, figures)


if __name__ == "__main__":
    main()
