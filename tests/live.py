"""Running the real server for end-to-end tests: `manage.py runmcp` in a subprocess on loopback.

Each live server gets its own `FORGE_DATA_DIR`, so it shares nothing with the test process or another
live server, unless the scale-out variables (`DATABASE_URL`, `REDIS_URL`) are set, in which case
every server started here uses them: that is how two processes share sessions and streams.

The official `mcp` SDK client connects to a live server through `streamable_client` and `sse_client`.
"""

from __future__ import annotations

import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import httpx2
from mcp.client import Client
from mcp.client.sse import sse_client as sdk_sse_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update({"FORGE_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", **extra})
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


@dataclass
class LiveServer:
    process: subprocess.Popen
    base: str
    token: str
    env: dict[str, str]
    data_dir: Path
    tls_port: int | None = None

    @property
    def tls_base(self) -> str:
        assert self.tls_port is not None, "started without tls=True"
        return f"https://127.0.0.1:{self.tls_port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def sse_url(self) -> str:
        return f"{self.base}/sse"

    @property
    def pid(self) -> int:
        return self.process.pid

    def new_token(self, label: str, user: str = "live") -> str:
        return (
            manage(self.env, "create_token", "--user", user, "--create-user", "--label", label).strip().splitlines()[-1]
        )

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)


def scaleout_configured() -> bool:
    """Whether this run has the shared database and channel layer that several processes need."""
    return bool(os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


SDK_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults (create_mcp_http_client)

ACCEPT_BOTH = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def open_raw_session(http: httpx.AsyncClient, token: str) -> dict[str, str]:
    """Initialize a 2025-11-25 session over raw HTTP; returns the headers every later request of it carries."""
    headers = {**bearer(token), "Accept": ACCEPT_BOTH}
    initialized = await http.post("/mcp", headers=headers, json=INITIALIZE)
    assert initialized.status_code == 200
    session = {**headers, "Mcp-Session-Id": initialized.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    assert (await http.post("/mcp", headers=session, json=INITIALIZED)).status_code == 202
    return session


@asynccontextmanager
async def streamable_client(
    server: LiveServer,
    *,
    mode: str,
    token: str | None = None,
    responses: list[httpx2.Response] | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
    tls: ssl.SSLContext | None = None,
    **client_options: Any,
) -> AsyncIterator[Client]:
    """The SDK client over Streamable HTTP; every HTTP response it gets is appended to `responses`;
    `client_options` go to `mcp.client.Client` (e.g. message_handler). With `tls` (a client context, holding the
    member's certificate for mTLS) it speaks HTTPS to the server's TLS port, and sends a token only if given one."""

    async def note(response: httpx2.Response) -> None:
        if responses is not None:
            responses.append(response)

    credential = bearer(token) if token else {} if tls is not None else bearer(server.token)
    http = httpx2.AsyncClient(
        headers=credential,
        timeout=SDK_TIMEOUT,
        event_hooks={"response": [note]},
        transport=transport,
        verify=tls if tls is not None else True,
    )
    url = f"{server.tls_base}/mcp" if tls is not None else server.mcp_url
    async with (
        http,
        Client(streamable_http_client(url, http_client=http), mode=mode, **client_options) as client,
    ):
        yield client


@asynccontextmanager
async def sse_client(
    server: LiveServer,
    *,
    mode: str = "legacy",
    token: str | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> AsyncIterator[Client]:
    """The SDK client over the legacy HTTP+SSE transport (mode="legacy", unless a test means otherwise)."""

    def http_client(headers=None, timeout=None, auth=None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(headers=headers, timeout=timeout or SDK_TIMEOUT, auth=auth, transport=transport)

    connect = sdk_sse_client(server.sse_url, headers=bearer(token or server.token), httpx_client_factory=http_client)
    async with Client(connect, mode=mode) as client:
        yield client


def prepare(data_dir: Path, **extra_env: str) -> tuple[dict[str, str], str]:
    """Migrate a data dir, switch MCP on (as an operator would) and make a client token; returns the
    environment and the raw token."""
    env = server_env(data_dir, **extra_env)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "mcp_switch", "on")
    # The live client's owner is an operator: it may view every project and decide its own requests.
    password = data_dir / "live-operator-password"
    password.write_text("live-operator-password-1")
    manage(env, "create_operator", "live", "--password-file", str(password))
    token = manage(env, "create_token", "--user", "live", "--label", "live-e2e").strip().splitlines()[-1]
    return env, token


@contextmanager
def run_server(
    env: dict[str, str],
    token: str,
    data_dir: Path,
    *,
    port: int | None = None,
    tls: bool = False,
    server: str = "daphne",
) -> Iterator[LiveServer]:
    """`runmcp --server <server>` on loopback (and, with `tls`, HTTPS on a second port), until the block ends."""
    port = port or free_port()
    tls_port = free_port() if tls else None
    log = open(data_dir / f"server-{port}.log", "w")  # noqa: SIM115 - closed below, after the process
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runmcp", "--server", server, "--host", "127.0.0.1", "--port", str(port)]
        + (["--tls-port", str(tls_port)] if tls_port else []),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(process, base, data_dir / f"server-{port}.log")
        yield LiveServer(process=process, base=base, token=token, env=env, data_dir=data_dir, tls_port=tls_port)
    finally:
        stop_process(process)
        log.close()


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not gone within ten seconds."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _wait_until_up(process: subprocess.Popen, base: str, log_path: Path, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)  # polling a process that is starting; there is no event to wait on
    raise RuntimeError(f"server did not answer /healthz within {limit}s:\n{log_path.read_text()}")


def wait_for_port(port: int, process: subprocess.Popen, limit: float = 20.0) -> None:
    """Wait until something accepts connections on a loopback port, or the process dies."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)  # polling a process that is starting; there is no event to wait on
    raise RuntimeError(f"nothing listens on port {port} after {limit}s")


@contextmanager
def scratch_database() -> Iterator[dict[str, str]]:
    """On the scale-out path, a fresh PostgreSQL database for this run's server processes, dropped after.

    The servers must not migrate the shared database named in DATABASE_URL: runs on one machine would
    share (and fight over) its schema. Yields the environment overrides for the servers (none for SQLite).
    """
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield {}
        return
    import psycopg

    name = f"forge_live_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"DATABASE_URL": urlunsplit(urlsplit(url)._replace(path=f"/{name}"))}
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
