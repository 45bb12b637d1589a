"""Load client for the MCP server benchmark: plain httpx and hand-written JSON-RPC.

It deliberately avoids the ``mcp`` SDK so the client costs the same against
every server it measures (the project's daphne server, ``bench/sdk_server.py``
and ``bench/null_server.py``).  Each simulated client owns one
``httpx.AsyncClient`` (its own connection pool).

Sessions:

* ``streamable_session``: a stateful Streamable HTTP session (``initialize``,
  ``Mcp-Session-Id``, ``notifications/initialized``) whose ``call`` accepts a
  tool result answered either as ``application/json`` or as a
  ``text/event-stream``.
* ``legacy_sse_session``: the legacy HTTP+SSE transport; requests go to the
  endpoint announced on ``GET /sse`` and their answers come back on that stream.

Measurements: ``sequential_latency`` (p50/p99 of back-to-back calls),
``concurrent_throughput`` (calls/s from many clients), ``server_cpu_ms``
(user+system CPU of the server process tree: each process's CPU-time clock, found from /proc) and ``idle_streams``
(server RSS growth per idle SSE stream).  Every loop is bounded in count and
time.

The CLI runs them all and prints a table, for example::

    python bench/mcp_load.py --url http://127.0.0.1:8101/mcp \\
        --sse-url http://127.0.0.1:8101/sse --pid 12345 --n 500 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import json
import math
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urljoin

import httpx

if importlib.util.find_spec("sniffio") is None:
    # httpcore tries `import sniffio` on every request; without the package each
    # failed try walks sys.path (~0.1 ms).  A None entry makes it fail at once.
    sys.modules["sniffio"] = None  # type: ignore[assignment]

DEFAULT_PROTOCOL = "2025-11-25"
TOOL = "server_info"
ACCEPT_BOTH = "application/json, text/event-stream"
HTTP_TIMEOUT = httpx.Timeout(30.0)
# Loading the CA bundle costs ~20 ms per AsyncClient unless the context is shared.
SSL_CONTEXT = httpx.create_ssl_context()
ANSWER_TIMEOUT_S = 30.0
CLIENT_INFO = {"name": "mcp-load", "version": "1.0"}
WARMUP_CALLS = 20
MAX_CALLS_PER_CLIENT = 1_000_000
MAX_ERRORS_PER_CLIENT = 100
OPEN_CONCURRENCY = 50
SETTLE_S = 1.0
WARM_UP_STREAMS = 32  # opened and closed before an idle-stream measurement (idle_streams)
CLK_TCK = os.sysconf("SC_CLK_TCK")

StreamKind = Literal["streamable", "legacy"]
T = TypeVar("T")


class CallError(RuntimeError):
    """A request failed: bad HTTP status, JSON-RPC error, or a tool error result."""


class Session(Protocol):
    """What the measurements need from a session of either transport."""

    async def call(self, name: str, args: Mapping[str, Any] | None = None, sse: bool = False) -> dict[str, Any]: ...

    async def close(self) -> None: ...


SessionFactory = Callable[[], Awaitable[Session]]


def new_client(keep_alive: bool = True) -> httpx.AsyncClient:
    """A fresh AsyncClient (its own connection pool), cheap thanks to a shared TLS context.

    Without ``keep_alive`` every request gets a new connection, so none is
    reused after the server has timed it out.
    """
    limits = httpx.Limits() if keep_alive else httpx.Limits(max_keepalive_connections=0)
    return httpx.AsyncClient(timeout=HTTP_TIMEOUT, verify=SSL_CONTEXT, limits=limits)


def raise_fd_limit(wanted: int) -> None:
    """Raise the soft open-files limit to at least ``wanted`` (capped by the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new_soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))


def jsonrpc_request(request_id: int, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC 2.0 request object."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def initialize_params(protocol: str) -> dict[str, Any]:
    """Params of an ``initialize`` request from a client with no capabilities."""
    return {"protocolVersion": protocol, "capabilities": {}, "clientInfo": CLIENT_INFO}


def tool_call_params(name: str, args: Mapping[str, Any] | None, progress_token: int | None) -> dict[str, Any]:
    """Params of a ``tools/call`` request, with ``_meta.progressToken`` when one is given."""
    params: dict[str, Any] = {"name": name, "arguments": dict(args or {})}
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return params


def checked(message: dict[str, Any]) -> dict[str, Any]:
    """Return a JSON-RPC response, raising CallError on an error or a tool error."""
    if "error" in message:
        raise CallError(f"JSON-RPC error: {message['error']}")
    if message.get("result", {}).get("isError"):
        raise CallError(f"tool error: {message['result']}")
    return message


def parse_sse(text: str) -> list[tuple[str, str]]:
    """Split a complete SSE body into (event, data) pairs; events without data are dropped."""
    events: list[tuple[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            events.append((event, "\n".join(data)))
    return events


def response_message(response: httpx.Response, request_id: int) -> dict[str, Any]:
    """Extract the JSON-RPC response for ``request_id`` from a JSON or SSE HTTP answer."""
    if response.status_code != 200:
        raise CallError(f"HTTP {response.status_code}: {response.text[:200]}")
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for event, data in parse_sse(response.text):
            if event != "message":
                continue
            message = json.loads(data)
            if message.get("id") == request_id and "method" not in message:
                return message
        raise CallError(f"no response for id {request_id} in SSE answer")
    return json.loads(response.content)


def answer_form(response: httpx.Response) -> str:
    """``"sse"`` or ``"json"``: how the server framed an answer."""
    content_type = response.headers.get("content-type", "")
    return "sse" if content_type.startswith("text/event-stream") else "json"


@dataclass
class StreamableSession:
    """A stateful Streamable HTTP session (one AsyncClient, i.e. one connection pool)."""

    client: httpx.AsyncClient
    url: str
    headers: dict[str, str]
    session_id: str | None
    owns_client: bool = True
    answer_forms: Counter[str] = field(default_factory=Counter, init=False)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1), init=False)

    async def post(self, body: dict[str, Any]) -> httpx.Response:
        """POST one JSON-RPC message with the session's headers."""
        return await self.client.post(self.url, content=json.dumps(body).encode(), headers=self.headers)

    async def call(self, name: str, args: Mapping[str, Any] | None = None, sse: bool = False) -> dict[str, Any]:
        """Call a tool; with ``sse`` a progress token asks the server to stream the answer."""
        request_id = next(self.ids)
        params = tool_call_params(name, args, request_id if sse else None)
        response = await self.post(jsonrpc_request(request_id, "tools/call", params))
        self.answer_forms[answer_form(response)] += 1
        return checked(response_message(response, request_id))

    async def close(self) -> None:
        """End the session on the server (DELETE), then drop the connection pool."""
        try:
            if self.session_id is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await self.client.delete(self.url, headers=self.headers)
        finally:
            if self.owns_client:
                await self.client.aclose()


async def streamable_session(
    url: str,
    headers: Mapping[str, str] | None = None,
    protocol: str = DEFAULT_PROTOCOL,
    client: httpx.AsyncClient | None = None,
) -> StreamableSession:
    """Open a Streamable HTTP session: initialize, then notifications/initialized.

    A new client is made unless ``client`` is given (and then left open on close).
    """
    owns_client = client is None
    http = client or new_client()
    base = {
        **(headers or {}),
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
    }
    try:
        init = jsonrpc_request(0, "initialize", initialize_params(protocol))
        response = await http.post(url, content=json.dumps(init).encode(), headers=base)
        checked(response_message(response, 0))
        session_headers = {**base, "MCP-Protocol-Version": protocol}
        session_id = response.headers.get("mcp-session-id")
        if session_id is not None:
            session_headers["Mcp-Session-Id"] = session_id
        session = StreamableSession(http, url, session_headers, session_id, owns_client)
        notified = await session.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if notified.status_code != 202:
            raise CallError(f"notifications/initialized: HTTP {notified.status_code}")
    except BaseException:
        if owns_client:
            await http.aclose()
        raise
    return session


class LegacySseSession:
    """A legacy HTTP+SSE session: POSTs to the announced endpoint, answers on the stream."""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, str]) -> None:
        self.client = client
        self.headers = headers
        self.endpoint = ""
        self._stack = contextlib.AsyncExitStack()
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None

    async def open(self, sse_url: str) -> None:
        """GET the stream and wait (bounded) for its ``endpoint`` event."""
        await self._stack.enter_async_context(self.client)
        stream_headers = {**self.headers, "Accept": "text/event-stream"}
        response = await self._stack.enter_async_context(self.client.stream("GET", sse_url, headers=stream_headers))
        if response.status_code != 200:
            raise CallError(f"GET {sse_url}: HTTP {response.status_code}")
        events = sse_events(response)
        event, data = await asyncio.wait_for(anext(events), ANSWER_TIMEOUT_S)
        if event != "endpoint":
            raise CallError(f"expected an endpoint event, got {event!r}")
        self.endpoint = urljoin(sse_url, data)
        self._reader = asyncio.create_task(self._read(events))

    async def _read(self, events: AsyncGenerator[tuple[str, str]]) -> None:
        """Resolve pending calls from the stream's ``message`` events."""
        try:
            async with contextlib.aclosing(events):
                async for event, data in events:
                    if event != "message":
                        continue
                    message = json.loads(data)
                    if "method" in message:
                        continue
                    future = self._pending.pop(message.get("id"), None)
                    if future is not None and not future.done():
                        future.set_result(message)
        except (httpx.HTTPError, ValueError) as exc:
            self._fail(CallError(f"SSE stream broke: {exc!r}"))
        else:
            self._fail(CallError("SSE stream ended"))

    def _fail(self, error: Exception) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

    async def request(self, request_id: int, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Send a request and wait (bounded) for its answer on the stream."""
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.post(jsonrpc_request(request_id, method, params))
            return checked(await asyncio.wait_for(future, ANSWER_TIMEOUT_S))
        finally:
            self._pending.pop(request_id, None)

    async def post(self, body: dict[str, Any]) -> None:
        """POST one JSON-RPC message to the session's endpoint, expecting 202."""
        response = await self.client.post(
            self.endpoint,
            content=json.dumps(body).encode(),
            headers={**self.headers, "Content-Type": "application/json"},
        )
        if response.status_code != 202:
            raise CallError(f"POST {self.endpoint}: HTTP {response.status_code}")

    async def call(self, name: str, args: Mapping[str, Any] | None = None, sse: bool = False) -> dict[str, Any]:
        """Call a tool; answers always come on the stream, ``sse`` adds a progress token."""
        request_id = next(self.ids)
        params = tool_call_params(name, args, request_id if sse else None)
        return await self.request(request_id, "tools/call", params)

    async def close(self) -> None:
        """Stop reading, close the stream and drop the connection pool."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self._stack.aclose()


async def sse_events(response: httpx.Response) -> AsyncGenerator[tuple[str, str]]:
    """Yield (event, data) pairs from a streamed SSE response as they arrive."""
    event, data = "message", []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


async def legacy_sse_session(
    sse_url: str,
    headers: Mapping[str, str] | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> LegacySseSession:
    """Open a legacy SSE session on ``sse_url`` (the server's GET /sse) and initialize it."""
    session = LegacySseSession(new_client(), dict(headers or {}))
    try:
        await session.open(sse_url)
        await session.request(0, "initialize", initialize_params(protocol))
        await session.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    except BaseException:
        await session.close()
        raise
    return session


# --------------------------------------------------------------------------
# Server-side figures from /proc
# --------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name, so index 0 is the state."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def process_tree(pid: int) -> list[int]:
    """The pid and all its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parent = int(_stat_fields(int(entry.name))[1])
                children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


Pids = int | Sequence[int]
"""One server's pid, or the pids of a deployment's server processes (their CPU is summed)."""


def process_cpu_ms(pid: int) -> float:
    """CPU time (ms) used so far by all the threads of process ``pid``, live and ended, to the nanosecond.

    /proc's utime and stime count in clock ticks (10 ms), too coarse for a block of a few dozen calls, so this
    reads the process's CPU-time clock (Linux's ``clock_getcpuclockid``: ``CPUCLOCK_SCHED`` of the pid),
    falling back to /proc's ticks where the clock cannot be read."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e6
    except OSError:
        fields = _stat_fields(pid)
        return (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK  # utime, stime


def server_cpu_ms(pids: Pids) -> float:
    """User+system CPU time (ms) used so far by the process tree rooted at ``pids`` (each of them, if several)."""
    used = 0.0
    for root in [pids] if isinstance(pids, int) else pids:
        for member in process_tree(root):
            with contextlib.suppress(OSError):
                used += process_cpu_ms(member)
    return used


def server_rss_kb(pid: int) -> int:
    """Resident memory (VmRSS, KB) of the process tree rooted at ``pid``."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------


class CpuWindow:
    """Server CPU (when a pid is known) and this client's CPU over a span of calls."""

    def __init__(self, pid: Pids | None) -> None:
        self.pid = pid
        self.server_start = server_cpu_ms(pid) if pid is not None else 0.0
        self.client_start = time.process_time()

    def per_call(self, calls: int) -> tuple[float | None, float]:
        """Return (server, client) CPU ms per call since the window opened."""
        client = (time.process_time() - self.client_start) * 1000 / max(calls, 1)
        if self.pid is None:
            return None, client
        return (server_cpu_ms(self.pid) - self.server_start) / max(calls, 1), client


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(math.ceil(fraction * len(sorted_values)), 1)
    return sorted_values[rank - 1]


@dataclass
class LatencyResult:
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    server_cpu_ms_per_call: float | None
    client_cpu_ms_per_call: float
    timings_ms: list[float] = field(default_factory=list, repr=False)  # sorted


async def sequential_latency(
    session: Session, n: int, sse: bool = False, pid: Pids | None = None, warmup: int = WARMUP_CALLS
) -> LatencyResult:
    """Time ``n`` back-to-back ``server_info`` calls after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        await session.call(TOOL, sse=sse)
    window = CpuWindow(pid)
    timings: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        await session.call(TOOL, sse=sse)
        timings.append((time.perf_counter() - start) * 1000)
    server_cpu, client_cpu = window.per_call(n)
    timings.sort()
    return LatencyResult(
        calls=n,
        p50_ms=percentile(timings, 0.50),
        p99_ms=percentile(timings, 0.99),
        mean_ms=sum(timings) / n,
        server_cpu_ms_per_call=server_cpu,
        client_cpu_ms_per_call=client_cpu,
        timings_ms=timings,
    )


@dataclass
class ThroughputResult:
    clients: int
    calls: int
    errors: int
    seconds: float
    calls_per_s: float
    server_cpu_ms_per_call: float | None
    client_cpu_ms_per_call: float
    first_error: str | None


async def open_all(factory: SessionFactory, count: int) -> list[Session]:
    """Open ``count`` sessions concurrently; if any fails, close the rest and raise."""
    opened = await asyncio.gather(*(factory() for _ in range(count)), return_exceptions=True)
    sessions = [s for s in opened if not isinstance(s, BaseException)]
    failures = [s for s in opened if isinstance(s, BaseException)]
    if failures:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        raise failures[0]
    return sessions


async def concurrent_throughput(
    factory: SessionFactory,
    clients: int = 20,
    duration_s: float = 10.0,
    sse: bool = False,
    pid: Pids | None = None,
) -> ThroughputResult:
    """Run ``clients`` sessions calling ``server_info`` back to back for ``duration_s``.

    Sessions are opened before the clock starts; calls still in flight at the
    deadline are awaited and counted.
    """
    sessions = await open_all(factory, clients)
    try:
        return await throughput(sessions, duration_s, sse, pid)
    finally:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


async def throughput(
    sessions: Sequence[Session], duration_s: float, sse: bool = False, pid: Pids | None = None
) -> ThroughputResult:
    """Each of the already open ``sessions`` calls ``server_info`` back to back for ``duration_s``, one client
    each; calls still in flight at the deadline are awaited and counted. The sessions stay open."""
    calls = errors = 0
    first_error: str | None = None

    async def worker(session: Session, deadline: float) -> None:
        nonlocal calls, errors, first_error
        own_calls = own_errors = 0
        while time.monotonic() < deadline and own_calls < MAX_CALLS_PER_CLIENT and own_errors < MAX_ERRORS_PER_CLIENT:
            try:
                await session.call(TOOL, sse=sse)
            except (CallError, httpx.HTTPError, TimeoutError) as exc:
                own_errors += 1
                first_error = first_error or repr(exc)
            else:
                own_calls += 1
        calls += own_calls
        errors += own_errors

    window = CpuWindow(pid)
    start = time.monotonic()
    deadline = start + duration_s
    await asyncio.gather(*(worker(s, deadline) for s in sessions))
    seconds = time.monotonic() - start
    server_cpu, client_cpu = window.per_call(calls)
    return ThroughputResult(
        clients=len(sessions),
        calls=calls,
        errors=errors,
        seconds=seconds,
        calls_per_s=calls / seconds,
        server_cpu_ms_per_call=server_cpu,
        client_cpu_ms_per_call=client_cpu,
        first_error=first_error,
    )


@dataclass
class IdleResult:
    kind: StreamKind
    requested: int
    opened: int
    open_seconds: float
    rss_before_kb: int
    rss_sessions_kb: int | None
    rss_after_kb: int
    first_error: str | None

    @property
    def kb_per_stream(self) -> float:
        """Server RSS growth per idle stream, its session included."""
        return (self.rss_after_kb - self.rss_before_kb) / max(self.opened, 1)

    @property
    def kb_per_stream_only(self) -> float | None:
        """Streamable HTTP only: growth per GET stream on top of its existing session."""
        if self.rss_sessions_kb is None:
            return None
        return (self.rss_after_kb - self.rss_sessions_kb) / max(self.opened, 1)


async def _bounded(coroutines: list[Awaitable[Any]], budget_s: float) -> tuple[list[Any], str | None]:
    """Run coroutines OPEN_CONCURRENCY at a time within ``budget_s``.

    Returns the successful results and the first error (or timeout) seen.
    """
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)

    async def gated(coroutine: Awaitable[T]) -> T:
        async with gate:
            return await coroutine

    tasks = [asyncio.ensure_future(gated(c)) for c in coroutines]
    done, pending = await asyncio.wait(tasks, timeout=budget_s) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    results, first_error = [], None
    for task in tasks:
        if task in done and task.exception() is None:
            results.append(task.result())
        elif first_error is None:
            first_error = repr(task.exception()) if task in done else "timed out"
    return results, first_error


async def idle_streams(
    url: str,
    headers: Mapping[str, str] | None,
    n: int = 2000,
    kind: StreamKind = "streamable",
    pid: int | None = None,
    protocol: str = DEFAULT_PROTOCOL,
    budget_s: float = 120.0,
    warm_up: int = WARM_UP_STREAMS,
) -> IdleResult:
    """Hold ``n`` idle SSE streams open at once and measure the server's RSS growth.

    ``kind="streamable"``: ``url`` is the MCP endpoint; ``n`` sessions are
    initialized, then each opens its GET stream.  ``kind="legacy"``: ``url`` is
    the GET /sse endpoint; each stream is held once its ``endpoint`` event has
    arrived.  Opening each phase is bounded by ``budget_s``.

    First ``warm_up`` streams are opened at once and closed, unmeasured: what a
    server sets up once, when it first serves several clients together (a pool
    of worker threads, each with its database connection), is not a cost per
    stream.
    """
    raise_fd_limit(n + 512)
    if warm_up:
        await idle_streams(url, headers, min(n, warm_up), kind, None, protocol, budget_s, warm_up=0)

    def rss() -> int:
        return server_rss_kb(pid) if pid is not None else 0

    async def open_stream(client: httpx.AsyncClient, stream_headers: dict[str, str]) -> None:
        request = client.build_request("GET", url, headers=stream_headers)
        response = await client.send(request, stream=True)
        streams.append(response)
        if response.status_code != 200:
            raise CallError(f"GET {url}: HTTP {response.status_code}")
        if kind == "legacy":
            # Kept (not closed) until clean-up: closing it would end the stream.
            events = sse_events(response)
            readers.append(events)
            event, _data = await asyncio.wait_for(anext(events), ANSWER_TIMEOUT_S)
            if event != "endpoint":
                raise CallError(f"expected an endpoint event, got {event!r}")

    # One client (connection pool) per stream: a single shared pool handles
    # thousands of connections in quadratic time.  Streams may open long after
    # their session's initialize, so no connection is kept alive in between.
    clients = [new_client(keep_alive=False) for _ in range(n)]
    streams: list[httpx.Response] = []
    readers: list[AsyncGenerator[tuple[str, str]]] = []
    sessions: list[StreamableSession] = []
    rss_sessions: int | None = None
    first_error: str | None = None
    rss_before = rss()
    start = time.monotonic()
    try:
        stream_headers = {**(headers or {}), "Accept": "text/event-stream"}
        if kind == "streamable":
            sessions, first_error = await _bounded(
                [streamable_session(url, headers, protocol, c) for c in clients], budget_s
            )
            await asyncio.sleep(SETTLE_S)
            rss_sessions = rss()
            openers = [open_stream(s.client, {**s.headers, **stream_headers}) for s in sessions]
        else:
            openers = [open_stream(c, stream_headers) for c in clients]
        opened, stream_error = await _bounded(openers, budget_s)
        open_seconds = time.monotonic() - start
        await asyncio.sleep(SETTLE_S)
        rss_after = rss()
    finally:
        await asyncio.gather(*(r.aclose() for r in readers), return_exceptions=True)
        await asyncio.gather(*(r.aclose() for r in streams), return_exceptions=True)
        await _bounded([s.close() for s in sessions], budget_s)
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
    return IdleResult(
        kind=kind,
        requested=n,
        opened=len(opened),
        open_seconds=open_seconds,
        rss_before_kb=rss_before,
        rss_sessions_kb=rss_sessions,
        rss_after_kb=rss_after,
        first_error=first_error or stream_error,
    )


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

MODES = ("json", "sse", "legacy", "idle")
IDLE_KINDS = ("streamable", "legacy")


def csv_of(choices: tuple[str, ...]) -> Callable[[str], set[str]]:
    """An argparse type: a comma-separated subset of ``choices``."""

    def parse(text: str) -> set[str]:
        values = set(text.split(","))
        if not values <= set(choices):
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}")
        return values

    return parse


def _fmt(value: float | None, digits: int = 2) -> str:
    """A table cell: the number, or ``-`` when it was not measured."""
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass
class CallRow:
    """One table line for a call mode."""

    mode: str
    answers: str
    latency: LatencyResult
    load: ThroughputResult


async def measure_calls(mode: str, factory: SessionFactory, sse: bool, args: argparse.Namespace) -> CallRow:
    """Sequential latency on one session, then throughput from ``args.clients``."""
    session = await factory()
    try:
        latency = await sequential_latency(session, args.n, sse=sse, pid=args.pid)
    finally:
        await session.close()
    streamable = isinstance(session, StreamableSession)
    answers = "+".join(sorted(session.answer_forms)) if streamable else "on GET /sse"
    load = await concurrent_throughput(factory, args.clients, args.seconds, sse, args.pid)
    return CallRow(mode, answers, latency, load)


def print_call_table(rows: list[CallRow]) -> None:
    header = (
        f"{'mode':<10} {'answers':<12} {'p50 ms':>8} {'p99 ms':>8} {'seq srv':>8}"
        f" {'calls/s':>9} {'load srv':>9} {'client':>8} {'errors':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        lat, load = row.latency, row.load
        print(
            f"{row.mode:<10} {row.answers:<12} {lat.p50_ms:>8.2f} {lat.p99_ms:>8.2f}"
            f" {_fmt(lat.server_cpu_ms_per_call):>8} {load.calls_per_s:>9.1f}"
            f" {_fmt(load.server_cpu_ms_per_call):>9}"
            f" {load.client_cpu_ms_per_call:>8.2f} {load.errors:>7}"
        )
        if load.first_error:
            print(f"  first error: {load.first_error}")
    print(
        "seq srv / load srv: server CPU ms per call, sequential / under load;"
        " client: this client's CPU ms per call under load"
    )


def print_idle_table(results: list[IdleResult]) -> None:
    header = (
        f"{'idle kind':<11} {'opened':>11} {'open s':>7} {'RSS before':>11}"
        f" {'RSS after':>10} {'KB/stream':>10} {'KB/GET only':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.kind:<11} {f'{r.opened}/{r.requested}':>11} {r.open_seconds:>7.1f}"
            f" {r.rss_before_kb / 1024:>8.1f} MB {r.rss_after_kb / 1024:>7.1f} MB"
            f" {r.kb_per_stream:>10.1f} {_fmt(r.kb_per_stream_only, 1):>12}"
        )
        if r.first_error:
            print(f"  first error: {r.first_error}")
    print(
        "KB/stream: server RSS growth per idle stream, its session included;"
        " KB/GET only: growth from the GET streams on top of existing sessions"
    )
    if len(results) > 1:
        print("note: later rows may reuse memory freed by earlier ones; see --idle-kinds")


async def run(args: argparse.Namespace) -> None:
    """Run the selected measurements and print their tables."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    only: set[str] = args.only
    raise_fd_limit(args.clients * 4 + 256)

    async def streamable() -> Session:
        return await streamable_session(args.url, headers, args.protocol)

    async def legacy() -> Session:
        return await legacy_sse_session(args.sse_url, headers, args.protocol)

    plans: list[tuple[str, SessionFactory, bool]] = [
        ("json", streamable, False),
        ("sse", streamable, True),
    ]
    if args.sse_url:
        plans.append(("legacy", legacy, False))
    rows: list[CallRow] = []
    for mode, factory, sse in plans:
        if mode in only:
            try:
                rows.append(await measure_calls(mode, factory, sse, args))
            except (CallError, httpx.HTTPError, OSError, TimeoutError) as exc:
                print(f"{mode}: failed: {exc!r}")
    if rows:
        print_call_table(rows)

    if "idle" in only:
        targets: list[tuple[StreamKind, str]] = []
        if "streamable" in args.idle_kinds:
            targets.append(("streamable", args.url))
        if "legacy" in args.idle_kinds and args.sse_url:
            targets.append(("legacy", args.sse_url))
        idle: list[IdleResult] = []
        for kind, target in targets:
            try:
                idle.append(await idle_streams(target, headers, args.streams, kind, args.pid, args.protocol))
            except (CallError, httpx.HTTPError, OSError, TimeoutError) as exc:
                print(f"idle {kind}: failed: {exc!r}")
        if idle:
            print()
            print_idle_table(idle)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Measure an MCP server's latency, throughput, CPU and idle-stream memory."
    )
    parser.add_argument("--url", required=True, help="Streamable HTTP endpoint, e.g. .../mcp")
    parser.add_argument("--sse-url", help="legacy SSE endpoint, e.g. .../sse (omit to skip)")
    parser.add_argument("--pid", type=int, help="server pid, for CPU and RSS (omit to skip)")
    parser.add_argument("--token", help="bearer token sent as Authorization header")
    parser.add_argument("--protocol", default=DEFAULT_PROTOCOL, help="MCP protocol version")
    parser.add_argument("--n", type=int, default=500, help="sequential calls for p50/p99")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput duration")
    parser.add_argument("--streams", type=int, default=2000, help="idle streams to hold")
    parser.add_argument("--only", type=csv_of(MODES), default=",".join(MODES), help="subset of json,sse,legacy,idle")
    parser.add_argument(
        "--idle-kinds",
        type=csv_of(IDLE_KINDS),
        default=",".join(IDLE_KINDS),
        help="idle streams to measure: streamable, legacy or both (for exact figures measure "
        "one kind per freshly started server: memory freed by one is reused by the next)",
    )
    args = parser.parse_args()
    if args.pid is None:
        print("note: no --pid, so no server CPU or RSS figures")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
