"""Hostile input against a live server, at every revision: hypothesis generates JSON-RPC envelopes (ids of
every JSON type, lone surrogates, NaN, huge integers, nesting, method names, params shapes), raw bodies that
are not JSON, batches around `FORGE_MAX_BATCH`, headers (Content-Type, Accept, Mcp-Session-Id,
MCP-Protocol-Version, Origin, Last-Event-ID, huge values), `_meta` and its `progressToken`, and every
tool's arguments, both shaped by the tool's published `inputSchema` (right and wrong types) and arbitrary.

Every request goes out as raw bytes (`json.dumps(..., ensure_ascii=True)`, so a lone surrogate travels as
its `\\ud800` escape, which is the only way it can be sent) and every answer is held to the same contract:
never 500, never JSON-RPC -32603, a body that is strict JSON (or an event stream of strict JSON) whenever
there is one, an answer wherever a request asked for one, and an end within `ANSWER_BOUND` seconds (else
"silent stream"). On the legacy transport (2024-11-05) answers travel on the session's `/sse` stream: after
each hostile POST a sentinel `ping` must come back on that stream within the same bound, and everything the
stream carried before it is checked.

Meanwhile another client, with its own session, sends `ping` every `PING_EVERY` seconds for the whole
module: every one must be answered within `PING_BOUND` (a bound that says no request stalls the others,
not a benchmark). At the end the server's own log holds no traceback and no "Internal Server Error".

Size: `EXAMPLES` hypothesis examples per strategy and revision (default 8, derandomized so the default
suite is repeatable and stays near a minute on two cores); `FORGE_HOSTILE_EXAMPLES=N` scales it up for a
recorded run, with fresh randomness. The figures (requests per revision, ping p50/p99/max) are printed by
the last test (`pytest -s`).
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
import queue
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.live import LiveServer, manage, prepare, run_server, scratch_database
from tests.mcp_api.helpers import _parse_event as parse_event
from tests.projects.conftest import MAIN, fixture_path

pytestmark = [pytest.mark.live]

EXAMPLES = int(os.environ.get("FORGE_HOSTILE_EXAMPLES", "8"))
TOOL_EXAMPLES = max(1, EXAMPLES // 4)  # each of these calls every tool once
SCALED = "FORGE_HOSTILE_EXAMPLES" in os.environ
ANSWER_BOUND = 10.0  # seconds for any one answer (a stream included) to end
PING_BOUND = 1.0  # seconds within which the concurrent client's every ping is answered
PING_EVERY = 0.2
MAX_BATCH = 8  # FORGE_MAX_BATCH of the server under test: small, so batches around it stay cheap
SLUG = "hostile-line"
LEGACY, STATELESS = "2024-11-05", "2026-07-28"
REVISIONS = (LEGACY, "2025-03-26", "2025-06-18", "2025-11-25", STATELESS)
INTERNAL_ERROR = -32603
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_INFO = "io.modelcontextprotocol/clientInfo"

HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not SCALED,
    database=None,
    # No shrinking: each failure message names the request that broke the contract and what came back,
    # and shrinking against a live server costs minutes.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# --- the server, its clients and the contract every answer is held to ----------------------------------


class Hostile(AssertionError):
    """An answer that breaks the contract; the message names the request and what came back."""


def strict_json(text: str) -> Any:
    """JSON as RFC 8259 has it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event, data) pairs of an event stream's text; comments, ids and events without data are skipped."""
    parsed = (parse_event(block) for block in text.replace("\r\n", "\n").split("\n\n"))
    return [(event.event, event.data) for event in parsed if event is not None and event.data]


def jsonrpc_messages(value: Any) -> list[dict[str, Any]]:
    return [item for item in (value if isinstance(value, list) else [value]) if isinstance(item, dict)]


def check_messages(messages: list[dict[str, Any]], request: str) -> None:
    for message in messages:
        error = message.get("error")
        if isinstance(error, dict) and error.get("code") == INTERNAL_ERROR:
            raise Hostile(f"-32603 for {request}: {message}")


def brief(value: Any, limit: int = 300) -> str:
    """A failure message's view of a request: long strings shown by their length, the whole cut short."""
    if isinstance(value, list | tuple):
        shown = [brief(item, 80) for item in value]
        text = f"[{', '.join(shown)}]"
    elif isinstance(value, str | bytes) and len(value) > limit:
        text = f"<{len(value)} {'chars' if isinstance(value, str) else 'bytes'} {value[:20]!r}...>"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_request(value: Any) -> bool:
    """Whether a message asks for an answer: an object with a method and an id."""
    return isinstance(value, dict) and "method" in value and "id" in value


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode("ascii")


@dataclass
class Figures:
    requests: dict[str, int] = field(default_factory=dict)
    examples: dict[str, int] = field(default_factory=dict)
    pings: list[float] = field(default_factory=list)
    ping_failures: list[str] = field(default_factory=list)

    def count(self, revision: str) -> None:
        self.requests[revision] = self.requests.get(revision, 0) + 1


FIGURES = Figures()


class Wire:
    """One client of one revision: its session (or stateless envelope) and the raw requests it sends."""

    def __init__(self, server: LiveServer, revision: str) -> None:
        self.server = server
        self.revision = revision
        self.http = httpx.Client(
            timeout=httpx.Timeout(ANSWER_BOUND), headers={"Authorization": f"Bearer {server.token}"}
        )
        self.session_id: str | None = None
        self.session_handle: str | None = None
        self.stream: LegacyStream | None = None
        self.sentinels = itertools.count()

    # headers and envelope ----------------------------------------------------------------------------

    def headers(self, message: Any = None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.revision == STATELESS:
            headers["MCP-Protocol-Version"] = STATELESS
            method = message.get("method") if isinstance(message, dict) else None
            if isinstance(method, str) and method.isascii() and method.isprintable():
                headers["Mcp-Method"] = method
            params = message.get("params") if isinstance(message, dict) else None
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str):
                headers["Mcp-Name"] = header_value(name)
        elif self.revision != LEGACY:
            headers["MCP-Protocol-Version"] = self.revision
            if self.session_id is not None:
                headers["Mcp-Session-Id"] = self.session_id
        return headers

    def envelope(self, message: Any) -> Any:
        """A stateless request carries the protocol version and capabilities in its `_meta`; others go as
        they are."""
        if self.revision != STATELESS or not isinstance(message, dict):
            return message
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return message
        meta = params.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta.setdefault(META_VERSION, STATELESS)
        meta.setdefault(META_CAPABILITIES, {})
        meta.setdefault(META_INFO, {"name": "hostile", "version": "1"})
        return {**message, "params": {**params, "_meta": meta}}

    def tool_arguments(self, arguments: Any) -> Any:
        if self.revision == STATELESS and isinstance(arguments, dict) and self.session_handle:
            return {"session_handle": self.session_handle, **arguments}
        return arguments

    # sending -----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.revision == LEGACY:
            assert self.stream is not None
            return f"{self.server.base}/messages/?session_id={self.stream.session_id}"
        return self.server.mcp_url

    def post(
        self, body: bytes, headers: dict[str, str] | list[tuple[str, str]], *, asks: bool, what: str
    ) -> list[dict[str, Any]]:
        """POST raw bytes, hold the answer to the contract, and return the JSON-RPC messages it carried
        (on the legacy transport: those its stream carried up to the sentinel)."""
        FIGURES.count(self.revision)
        messages = self._exchange("POST", self.url, body, headers, asks=asks and self.revision != LEGACY, what=what)
        if self.revision == LEGACY:
            messages = self._legacy_answers(what)
        check_messages(messages, what)
        return messages

    def get(self, headers: dict[str, str] | list[tuple[str, str]], *, what: str) -> None:
        """GET /mcp (a session's stream): its status and, when it is not a stream, its body."""
        FIGURES.count(self.revision)
        try:
            with self.http.stream("GET", self.server.mcp_url, headers=headers) as response:
                if response.status_code >= 500:
                    raise Hostile(f"{response.status_code} for {what}")
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    self._check_body(response, response.read(), asks=False, what=what)
        except httpx.TransportError as exc:
            raise Hostile(f"no answer to {what}: {exc!r}") from None

    def _exchange(
        self, verb: str, url: str, body: bytes, headers: Any, *, asks: bool, what: str
    ) -> list[dict[str, Any]]:
        try:
            with self.http.stream(verb, url, content=body, headers=headers) as response:
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    return self._read_stream(response, what)
                return self._check_body(response, response.read(), asks=asks, what=what)
        except httpx.ReadTimeout:
            raise Hostile(f"silent stream: nothing for {ANSWER_BOUND}s after {what}") from None
        except httpx.TransportError as exc:
            raise Hostile(f"no answer to {what}: {exc!r}") from None

    def _check_body(self, response: httpx.Response, raw: bytes, *, asks: bool, what: str) -> list[dict[str, Any]]:
        status = response.status_code
        if status >= 500:
            raise Hostile(f"{status} for {what}: {raw[:300]!r}")
        if not raw:
            if asks and status == 200:
                raise Hostile(f"empty 200 for a request that asks for an answer: {what}")
            if status >= 400 and status not in (404, 405):
                raise Hostile(f"{status} with an empty body for {what}")
            return []
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("text/plain") and status == 202 and self.revision == LEGACY:
            return []
        try:
            return jsonrpc_messages(strict_json(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            raise Hostile(f"{status} {content_type} that is not JSON for {what}: {raw[:300]!r}") from None

    def _read_stream(self, response: httpx.Response, what: str) -> list[dict[str, Any]]:
        if response.status_code >= 500:
            raise Hostile(f"{response.status_code} stream for {what}")
        deadline = time.monotonic() + ANSWER_BOUND
        text = ""
        for chunk in response.iter_text():
            text += chunk
            events = sse_events(text)
            if events and events[0][1].find("notifications/subscriptions/acknowledged") >= 0:
                break  # a listen stream: open for as long as the client listens
            if time.monotonic() > deadline:
                raise Hostile(f"silent stream: still open after {ANSWER_BOUND}s for {what}")
        messages = []
        for _, data in sse_events(text):
            try:
                messages.extend(jsonrpc_messages(strict_json(data)))
            except ValueError:
                raise Hostile(f"an event that is not JSON for {what}: {data[:300]!r}") from None
        if not messages:
            raise Hostile(f"a stream without a JSON-RPC message for {what}: {text[:300]!r}")
        return messages

    def _legacy_answers(self, what: str) -> list[dict[str, Any]]:
        """Everything the stream carried up to a sentinel ping's answer, which must come within the bound."""
        assert self.stream is not None
        sentinel = f"sentinel-{next(self.sentinels)}"
        FIGURES.count(self.revision)
        ping = encode({"jsonrpc": "2.0", "id": sentinel, "method": "ping"})
        response = self.http.post(self.url, content=ping, headers=self.headers())
        if response.status_code != 202:
            raise Hostile(f"the sentinel ping after {what} was answered {response.status_code}: {response.text[:300]}")
        return self.stream.until(sentinel, what)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A well-formed request whose answer the test needs (setup), checked like any other."""
        message = self.envelope({"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params or {}})
        answered = self.post(encode(message), self.headers(message), asks=True, what=f"setup {method}")
        mine = [m for m in answered if m.get("id") == message["id"]]
        assert mine and "result" in mine[0], answered
        return mine[0]["result"]

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.http.close()


def header_value(text: str) -> str:
    """A header value as a 2026-07-28 client sends it: plain when printable ASCII, else `=?base64?...?=`."""
    if text.isascii() and text.isprintable():
        return text
    return "=?base64?" + base64.b64encode(text.encode("utf-8", "surrogatepass")).decode() + "?="


class LegacyStream:
    """The `/sse` stream of a 2024-11-05 session, read on a thread into a queue of JSON-RPC messages."""

    def __init__(self, server: LiveServer) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.opened: queue.Queue[str] = queue.Queue()
        self.http = httpx.Client(timeout=httpx.Timeout(ANSWER_BOUND, read=None))
        self.thread = threading.Thread(target=self._read, args=(server,), daemon=True)
        self.thread.start()
        self.session_id = self.opened.get(timeout=ANSWER_BOUND)

    def _read(self, server: LiveServer) -> None:
        headers = {"Authorization": f"Bearer {server.token}", "Accept": "text/event-stream"}
        try:
            with self.http.stream("GET", server.sse_url, headers=headers) as response:
                buffer = ""
                for chunk in response.iter_text():
                    buffer += chunk.replace("\r\n", "\n")
                    *complete, buffer = buffer.split("\n\n")
                    for event, data in sse_events("\n\n".join(complete)):
                        if event == "endpoint":
                            self.opened.put(data.split("session_id=")[1])
                        else:
                            self.messages.put(data)
        except httpx.TransportError as exc:
            self.messages.put(exc)
        self.messages.put(EOFError("the /sse stream ended"))

    def until(self, sentinel: str, what: str) -> list[dict[str, Any]]:
        carried: list[dict[str, Any]] = []
        deadline = time.monotonic() + ANSWER_BOUND
        while True:
            try:
                data = self.messages.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Hostile(f"silent stream: no answer to the sentinel within {ANSWER_BOUND}s after {what}") from None
            if isinstance(data, Exception):
                raise Hostile(f"the /sse stream broke after {what}: {data!r}")
            try:
                messages = jsonrpc_messages(strict_json(data))
            except ValueError:
                raise Hostile(f"an event that is not JSON after {what}: {data[:300]!r}") from None
            carried.extend(messages)
            if any(m.get("id") == sentinel for m in messages):
                return carried

    def close(self) -> None:
        self.http.close()


class Pinger:
    """Another client with its own 2025-11-25 session, pinging every PING_EVERY seconds."""

    def __init__(self, server: LiveServer) -> None:
        self.wire = Wire(server, "2025-11-25")
        self.stop = threading.Event()
        self.answered = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        open_session(self.wire)
        self.thread.start()

    def _run(self) -> None:
        for n in itertools.count():
            if self.stop.wait(PING_EVERY):
                return
            message = {"jsonrpc": "2.0", "id": f"ping-{n}", "method": "ping"}
            started = time.perf_counter()
            try:
                response = self.wire.http.post(self.wire.url, content=encode(message), headers=self.wire.headers())
                elapsed = time.perf_counter() - started
                if response.status_code != 200 or response.json().get("result") != {}:
                    FIGURES.ping_failures.append(f"ping-{n}: {response.status_code} {response.text[:200]}")
            except httpx.TransportError as exc:
                elapsed = time.perf_counter() - started
                FIGURES.ping_failures.append(f"ping-{n}: {exc!r}")
            FIGURES.pings.append(elapsed)
            self.answered.set()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=ANSWER_BOUND * 2)
        self.wire.close()


def open_session(wire: Wire) -> None:
    """Initialize a handshake session (on 2024-11-05 over its /sse stream); nothing for the stateless one."""
    if wire.revision == STATELESS:
        return
    if wire.revision == LEGACY:
        wire.stream = LegacyStream(wire.server)
    init = {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {
            "protocolVersion": wire.revision,
            "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "1"},
        },
    }
    FIGURES.count(wire.revision)
    response = wire.http.post(wire.url, content=encode(init), headers=wire.headers())
    if wire.revision == LEGACY:
        assert response.status_code == 202, response.text
        wire.stream.until("init", "initialize")  # type: ignore[union-attr]
    else:
        assert response.status_code == 200, response.text
        wire.session_id = response.headers["mcp-session-id"]
    FIGURES.count(wire.revision)
    initialized = encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert wire.http.post(wire.url, content=initialized, headers=wire.headers()).status_code == 202


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory) -> Iterator[LiveServer]:
    """An override deployment (so the write tools exist) whose writes wait half a second for an operator,
    with the main fixture project registered and a small batch cap."""
    data_dir = tmp_path_factory.mktemp("hostile")
    options = {
        "FORGE_OVERRIDE_SECURITIES": "1",
        "FORGE_CONFIRM_WAIT_S": "0.5",
        "FORGE_CONFIRM_PROGRESS_SECONDS": "0.2",
        "FORGE_MAX_BATCH": str(MAX_BATCH),
    }
    with scratch_database() as database:
        env, token = prepare(data_dir, **database, **options)
        manage(env, "import_project", str(fixture_path(MAIN)), "--slug", SLUG)
        with run_server(env, token, data_dir) as server:
            yield server


@pytest.fixture(scope="module")
def pinger(hostile_server: LiveServer) -> Iterator[Pinger]:
    pinger = Pinger(hostile_server)
    pinger.start()
    yield pinger
    pinger.finish()


@pytest.fixture(scope="module")
def wires(hostile_server: LiveServer, pinger: Pinger) -> Iterator[dict[str, Wire]]:
    """One client per revision, each with the project granted (the stateless one through its handle)."""
    wires = {revision: Wire(hostile_server, revision) for revision in REVISIONS}
    for wire in wires.values():
        open_session(wire)
        asked = wire.call("tools/call", {"name": "session.request_access", "arguments": {"project": SLUG}})
        wire.session_handle = asked["structuredContent"].get("session_handle")
    hostile_server.manage("access_requests", "allow", "--pending", "--as", "live")
    yield wires
    for wire in wires.values():
        wire.close()


@pytest.fixture(scope="module")
def tools(wires: dict[str, Wire]) -> list[dict[str, Any]]:
    listed = wires["2025-11-25"].call("tools/list")["tools"]
    assert len(listed) > 20, [tool["name"] for tool in listed]
    return listed


# --- strategies -------------------------------------------------------------------------------------

SURROGATES = ["\ud800", "\udfff", "a\udc00b", "\ud83d", "\ud800\ud800"]
STRANGE_TEXT = ["", "\x00", "\u2028", "\ufeff", "🦀" * 3, "x" * 4096, "../../etc/passwd", "<xml/>", "%00", "' OR 1=1"]
texts = st.one_of(st.text(max_size=20), st.sampled_from(SURROGATES + STRANGE_TEXT))
numbers = st.one_of(
    st.integers(min_value=-(2**31), max_value=2**31),
    st.integers(min_value=2**63 - 1, max_value=2**4000),
    st.integers(max_value=-(2**63), min_value=-(2**4000)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e308, 5e-324, math.nan, math.inf, -math.inf, 1.5]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=10
)
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "resources/list",
    "resources/read",
    "prompts/get",
    "logging/setLevel",
    "completion/complete",
    "rpc.discover",
    "",
]
methods = st.one_of(st.sampled_from(METHODS), texts, json_values)
ids = st.one_of(
    st.integers(),
    texts,
    numbers,
    st.sampled_from([None, True, [], {}, [1, [2, [3]]], {"a": {"b": None}}, "x" * 201, 2**64, -(2**64), 1e400]),
    json_values,
)


@st.composite
def messages(draw: st.DrawFn, method: st.SearchStrategy[Any] = methods) -> dict[str, Any]:
    """One JSON-RPC object: each member present or not, and right or hostile when present."""
    message: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        message["jsonrpc"] = "2.0"
    elif draw(st.booleans()):
        message["jsonrpc"] = draw(json_values)
    if draw(st.integers(0, 3)):
        message["id"] = draw(ids)
    if draw(st.integers(0, 5)):
        message["method"] = draw(method)
    params = draw(st.integers(0, 3))
    if params == 1:
        message["params"] = draw(json_values)
    elif params >= 2:
        message["params"] = draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "name",
                        "arguments",
                        "cursor",
                        "uri",
                        "_meta",
                        "protocolVersion",
                        "capabilities",
                        "notifications",
                        "level",
                        "requestId",
                    ]
                )
                | texts,
                json_values,
                max_size=4,
            )
        )
    if draw(st.integers(0, 9)) == 0:
        message[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return message


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"{",
            b"null",
            b"[]",
            b"{}",
            b'"\\ud800"',
            b'{"jsonrpc":"2.0","id":1,"method":"ping"',
            b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"progressToken":Infinity}}}',
            b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
            b"\xff\xfe{}",
            b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping"}',
            nested(100),
            nested(1_000),
            nested(100_000),
            b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
            b"1" * 5_000,
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"' + b"A" * 60_000 + b'"}}',
        ]
    ),
)

HUGE = ["x" * 8_000, "y" * 65_000]
ascii_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
header_values = {
    "Content-Type": ["application/json", "text/plain", "application/json; charset=latin-1", "multipart/form-data", ""],
    "Accept": [
        "application/json",
        "text/event-stream",
        "*/*",
        "text/html",
        "",
        "application/json;q=0, text/event-stream;q=0",
    ],
    "Mcp-Session-Id": ["", "0" * 64, "not-a-session", "../../", "\x7f"],
    "MCP-Protocol-Version": [*REVISIONS, "2099-01-01", "", "2025-11-25, 2025-06-18"],
    "Origin": ["http://evil.example", "null", "http://127.0.0.1", "http://localhost:1", "file://", ""],
    "Last-Event-ID": ["0", "-1", "999999999999999999999", "abc", ""],
    "Mcp-Method": ["ping", "tools/call", "", "x"],
    "Mcp-Name": ["=?base64?AAA?=", "=?base64?7aCA?=", "=?base64??=", "server_info"],
    "Authorization": ["Bearer ", "Bearer fmcp_nope", "Basic Zm9vOmJhcg==", ""],
    "Content-Length": ["0", "-1", "99999999999"],
}


header_changes = st.lists(
    st.tuples(
        st.sampled_from(sorted(header_values)),
        st.one_of(
            st.sampled_from([v for values in header_values.values() for v in values]), ascii_text, st.sampled_from(HUGE)
        ),
        st.sampled_from(["replace", "repeat", "drop"]),
    ),
    max_size=3,
)


def changed_headers(wire: Wire, message: Any, changes: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """The wire's usual headers with some replaced, repeated or dropped (values made huge among them)."""
    headers = [(name, value) for name, value in wire.headers(message).items()]
    headers.append(("Authorization", f"Bearer {wire.server.token}"))
    for name, value, mode in changes:
        if name == "Content-Length":
            continue  # httpx sets it from the body; a lie about it is a different conversation
        if mode != "repeat":
            headers = [(n, v) for n, v in headers if n.lower() != name.lower()]
        if mode != "drop":
            headers.append((name, value.strip()))  # h11 refuses to send surrounding whitespace
    return headers


def schema_values(schema: Any, defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for a JSON Schema as pydantic publishes it: mostly of the right shape and type, now and then
    of a wrong one (any JSON) at any depth."""
    right = _shaped(schema, defs, depth)
    return st.one_of(right, right, right, json_values)


def _shaped(schema: Any, defs: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    if not isinstance(schema, dict) or depth > 4:
        return json_values
    if "$ref" in schema:
        return _shaped(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth + 1)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return st.one_of([_shaped(option, defs, depth + 1) for option in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_shaped({**schema, "type": one}, defs, depth) for one in kind])
    if kind == "string":
        low, high = schema.get("minLength", 0), min(schema.get("maxLength", 40), 40)
        made = st.text(min_size=min(low, high), max_size=high)
        return st.one_of(
            made, st.sampled_from([SLUG, "pou/LineMain", "LineMain", "INT", "BOOL", *SURROGATES, "x" * 5000])
        )
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        return st.one_of(st.integers(low, high), st.sampled_from([0, -1, 2**63, 10**30]))
    if kind == "number":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers())
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(schema_values(schema.get("items", {}), defs, depth + 1), max_size=4)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = [name for name in schema.get("required", []) if name in properties]
        optional = [name for name in properties if name not in required]
        return st.fixed_dictionaries(
            {name: _project_aware(name, properties[name], defs, depth) for name in required},
            optional={name: _project_aware(name, properties[name], defs, depth) for name in optional},
        )
    return json_values


def _project_aware(name: str, schema: Any, defs: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    """A `project` argument names the registered project most of the time, so calls reach the handlers."""
    values = schema_values(schema, defs, depth + 1)
    return st.one_of(st.just(SLUG), st.just(SLUG), values) if name == "project" else values


def tool_arguments(tool: dict[str, Any]) -> st.SearchStrategy[Any]:
    schema = tool.get("inputSchema", {})
    shaped = _shaped(schema, schema.get("$defs", {}), 0)
    return st.one_of(shaped, shaped, shaped, st.dictionaries(texts, json_values, max_size=4), json_values)


ODD_ARGUMENTS: list[Any] = [
    {"project": "\ud800", "\udfff": math.nan},
    {"project": SLUG, "group_id": "\ud800", "id": "", "limit": 2**4000, "cursor": "\udfff"},
    [math.inf],
]


# --- the tests ----------------------------------------------------------------------------------------


def send(wire: Wire, message: Any, headers: Any = None, *, what: str) -> list[dict[str, Any]]:
    body = encode(message)
    return wire.post(
        body, headers or wire.headers(message), asks=is_request(message), what=f"{what} {brief(body, 400)}"
    )


def note_example(revision: str) -> None:
    FIGURES.examples[revision] = FIGURES.examples.get(revision, 0) + 1


@pytest.mark.parametrize("revision", REVISIONS)
def test_hostile_envelopes_and_raw_bodies_are_answered_without_an_internal_error(wires, revision):
    wire = wires[revision]

    @HYPOTHESIS
    @given(message=messages(), raw=raw_bodies, wrap=st.booleans())
    @example(message={**PING, "id": "\ud800"}, raw=nested(100_000), wrap=True)
    @example(message={**PING, "id": math.nan}, raw=b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', wrap=True)
    @example(message={**PING, "id": 2**4000}, raw=b'{"a":' * 5_000 + b"1" + b"}" * 5_000, wrap=True)
    @example(message={**PING, "id": [1, {"a": [None]}]}, raw=b"\xff\xfe{}", wrap=False)
    @example(message={**PING, "method": "\udfff"}, raw=b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', wrap=True)
    def attempt(message: dict[str, Any], raw: bytes, wrap: bool) -> None:
        note_example(revision)
        send(wire, wire.envelope(message) if wrap else message, what="envelope")
        wire.post(raw, wire.headers(), asks=False, what=f"raw body {brief(raw)}")

    attempt()


@pytest.mark.parametrize("revision", REVISIONS)
def test_batches_around_the_cap_are_answered_or_refused_whole(wires, revision):
    wire = wires[revision]
    entries = st.one_of(st.builds(lambda n: {**PING, "id": n}, st.integers(0, 10**6)), messages(), json_values)

    @HYPOTHESIS
    @given(
        batch=st.one_of(
            st.lists(entries, max_size=MAX_BATCH + 2),
            st.lists(st.just(PING), min_size=10 * MAX_BATCH, max_size=10 * MAX_BATCH),
        )
    )
    @example(batch=[PING] * MAX_BATCH)
    @example(batch=[PING] * (MAX_BATCH + 1))
    @example(
        batch=[
            {**PING, "id": "\ud800"},
            {**PING, "id": math.nan},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
    )
    def attempt(batch: list[Any]) -> None:
        note_example(revision)
        send(wire, [wire.envelope(entry) for entry in batch], what="batch")

    attempt()


@pytest.mark.parametrize("revision", REVISIONS)
def test_hostile_headers_are_answered_without_an_internal_error(wires, revision):
    wire = wires[revision]
    bodies = st.sampled_from(
        [
            PING,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
    )

    @HYPOTHESIS
    @given(message=bodies, changes=header_changes, get=st.integers(0, 4))
    @example(message=PING, changes=[("Accept", HUGE[1], "replace")], get=1)
    @example(message=PING, changes=[("Mcp-Session-Id", HUGE[1], "replace")], get=0)
    @example(message=PING, changes=[("Last-Event-ID", HUGE[0], "replace")], get=0)
    @example(message=PING, changes=[("Origin", "http://evil.example", "replace")], get=1)
    @example(message=PING, changes=[("MCP-Protocol-Version", "2025-06-18", "repeat")], get=1)
    def attempt(message: dict[str, Any], changes: list[tuple[str, str, str]], get: int) -> None:
        note_example(revision)
        message = wire.envelope(message)
        headers = changed_headers(wire, message, changes)
        if get == 0 and revision != LEGACY:
            wire.get(headers, what=f"GET with headers {brief(headers, 600)}")
        else:
            what = f"headers {brief(headers, 600)} body {brief(encode(message))}"
            wire.post(encode(message), headers, asks=False, what=what)

    attempt()


@pytest.mark.parametrize("revision", REVISIONS)
def test_hostile_meta_and_progress_tokens_are_answered_without_an_internal_error(wires, tools, revision):
    wire = wires[revision]
    names = [tool["name"] for tool in tools]

    @HYPOTHESIS
    @given(
        method=st.sampled_from(["ping", "tools/list", "tools/call", "server/discover"]),
        name=st.sampled_from(names),
        token=json_values,
        extra=st.dictionaries(texts, json_values, max_size=3),
        replace=st.booleans(),
    )
    @example(method="tools/call", name="server_info", token="\ud800", extra={}, replace=False)
    @example(method="ping", name="server_info", token=math.nan, extra={"\ud800": math.inf}, replace=False)
    @example(method="tools/list", name="server_info", token=2**4000, extra={}, replace=False)
    @example(method="tools/call", name="project.overview", token=[{"a": None}], extra={}, replace=True)
    def attempt(method: str, name: str, token: Any, extra: dict[str, Any], replace: bool) -> None:
        note_example(revision)
        meta = {**extra, "progressToken": token}
        params: dict[str, Any] = {"_meta": meta}
        if method == "tools/call":
            params.update(name=name, arguments=wire.tool_arguments({"project": SLUG}))
        message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        send(wire, message if replace else wire.envelope(message), what="_meta")

    attempt()


@pytest.mark.parametrize("revision", REVISIONS)
def test_every_tool_answers_hostile_arguments_without_an_internal_error(wires, tools, revision):
    wire = wires[revision]

    for odd in ODD_ARGUMENTS:  # the same few hostile shapes for every tool, then the generated ones
        for tool in tools:
            params = {"name": tool["name"], "arguments": wire.tool_arguments(odd) if isinstance(odd, dict) else odd}
            message = wire.envelope({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": params})
            send(wire, message, what=f"tool {tool['name']}")

    @settings(HYPOTHESIS, max_examples=TOOL_EXAMPLES)
    @given(data=st.data(), streaming=st.integers(0, 3))
    def attempt(data: st.DataObject, streaming: int) -> None:
        note_example(revision)
        for tool in tools:
            arguments = wire.tool_arguments(data.draw(tool_arguments(tool), label=tool["name"]))
            params: dict[str, Any] = {"name": tool["name"], "arguments": arguments}
            if streaming == 0:
                params["_meta"] = {"progressToken": f"p-{tool['name']}"}
            message = wire.envelope({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": params})
            send(wire, message, what=f"tool {tool['name']}")

    attempt()


def test_no_ping_waited_the_server_logged_no_traceback_and_nothing_hostile_was_stored(hostile_server, pinger, wires):
    assert pinger.answered.wait(ANSWER_BOUND), "the concurrent client's first ping was not answered"
    pinger.finish()
    pings = sorted(FIGURES.pings)
    p50 = statistics.median(pings)
    p99 = pings[min(len(pings) - 1, math.ceil(0.99 * len(pings)) - 1)]
    print(
        f"\nhostile input: examples per revision {FIGURES.examples}; requests per revision {FIGURES.requests} "
        f"(total {sum(FIGURES.requests.values())}); pings {len(pings)}: p50 {p50 * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {pings[-1] * 1000:.1f} ms"
    )
    log = (hostile_server.data_dir / f"server-{hostile_server.base.rsplit(':', 1)[1]}.log").read_text()
    assert "Traceback" not in log, log[-4000:]
    assert "Internal Server Error" not in log, log[-4000:]
    assert FIGURES.ping_failures == []
    assert pings[-1] < PING_BOUND, f"slowest ping {pings[-1]:.3f}s"
    # What is stored: the audit chain and its mirror verify, and no write reached the project file (every
    # write waits for an operator, and none decided).
    hostile_server.manage("audit_verify")
    project_file = hostile_server.data_dir / "projects" / f"{SLUG}.xml"
    assert project_file.read_bytes() == fixture_path(MAIN).read_bytes()
