"""Driving the MCP transports in-process: requests, headers, SSE streams and the stored state behind them.

Every request goes through `forge_site.asgi.application`, the same router daphne serves, by way of
Channels' communicators. Plain exchanges use `HttpCommunicator`; streams use `ApplicationCommunicator`
directly so each `http.response.body` chunk can be read as it arrives, always with a bounded wait.
ORM reads and writes from async tests go through `database_sync_to_async`, as the consumers' own do.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, channel_layers
from channels.testing import ApplicationCommunicator, HttpCommunicator

from access.models import McpSession
from audit.models import AuditEvent
from forge_site.asgi import application
from mcp_api.registry import REGISTRY, Tool, register
from mcp_api.revisions import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LATEST_HANDSHAKE,
    PROTOCOL_VERSION_META_KEY,
)

TIMEOUT = 5.0
"""The bound on every wait for the application: generous for a slow machine, short for a hang."""

ACCEPT_BOTH = "application/json, text/event-stream"
STATELESS = "2026-07-28"
HOST = "127.0.0.1:8000"
CLIENT_INFO = {"name": "forge-tests", "version": "1.0"}

# --- building requests ---------------------------------------------------------------------------


def mcp_headers(
    token: str | None = None,
    *,
    session_id: str | None = None,
    protocol_version: str | None = None,
    accept: str | None = ACCEPT_BOTH,
    host: str | None = HOST,
    origin: str | None = None,
    extra: dict[str, str] | None = None,
) -> list[tuple[bytes, bytes]]:
    """The headers of one MCP request; pass None to leave a header out."""
    values = {
        "host": host,
        "accept": accept,
        "content-type": "application/json",
        "authorization": f"Bearer {token}" if token is not None else None,
        "mcp-session-id": session_id,
        "mcp-protocol-version": protocol_version,
        "origin": origin,
        **(extra or {}),
    }
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in values.items() if value is not None]


def stateless_headers(
    token: str | None,
    method: str,
    *,
    name: str | None = None,
    protocol_version: str = STATELESS,
    extra: dict[str, str] | None = None,
) -> list[tuple[bytes, bytes]]:
    """Headers of a 2026-07-28 request: the routing headers mirror the body's method (and name)."""
    routing = {"mcp-method": method, **({"mcp-name": name} if name is not None else {}), **(extra or {})}
    return mcp_headers(token, protocol_version=protocol_version, extra=routing)


def rpc(method: str, params: dict[str, Any] | None = None, *, id: int | str = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize_message(protocol_version: str = LATEST_HANDSHAKE, *, id: int = 0) -> dict[str, Any]:
    return rpc(
        "initialize",
        {"protocolVersion": protocol_version, "capabilities": {}, "clientInfo": CLIENT_INFO},
        id=id,
    )


def envelope(protocol_version: str = STATELESS, **overrides: Any) -> dict[str, Any]:
    """The `_meta` a 2026-07-28 request carries; a key given as None is left out."""
    meta = {
        PROTOCOL_VERSION_META_KEY: protocol_version,
        CLIENT_CAPABILITIES_META_KEY: {},
        CLIENT_INFO_META_KEY: CLIENT_INFO,
        **overrides,
    }
    return {key: value for key, value in meta.items() if value is not None}


def stateless_rpc(
    method: str, params: dict[str, Any] | None = None, *, id: int | str = 1, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    return rpc(method, {**(params or {}), "_meta": envelope() if meta is None else meta}, id=id)


# --- plain exchanges -----------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_code(self) -> int | None:
        body = self.json()
        return body["error"]["code"] if isinstance(body, dict) and "error" in body else None


async def send(
    method: str,
    path: str,
    *,
    headers: list[tuple[bytes, bytes]],
    body: bytes | dict | list = b"",
    extensions: dict[str, Any] | None = None,
) -> Response:
    """One HTTP exchange with the application, read to the end of its body; `extensions` is the scope's, as a
    server sets it (the TLS listener's `tls` entry)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    communicator = HttpCommunicator(application, method, path, body=raw, headers=headers)
    if extensions is not None:
        # The application has not run yet: it reads this scope (the same dict) when the loop first gets to it.
        communicator.scope["extensions"] = extensions
    response = await communicator.get_response(timeout=TIMEOUT)
    await communicator.wait(TIMEOUT)
    return Response(
        status=response["status"],
        headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response["headers"]},
        body=response["body"],
    )


async def post(
    token: str | None,
    message: Any,
    *,
    session_id: str | None = None,
    extensions: dict[str, Any] | None = None,
    **header_options: Any,
) -> Response:
    return await send(
        "POST",
        "/mcp",
        headers=mcp_headers(token, session_id=session_id, **header_options),
        body=message,
        extensions=extensions,
    )


async def open_session(token: str, protocol_version: str = LATEST_HANDSHAKE) -> str:
    """Initialize a Streamable HTTP session (initialize + notifications/initialized); returns its id."""
    response = await post(token, initialize_message(protocol_version))
    assert response.status == 200, response.body
    session_id = response.headers["mcp-session-id"]
    initialized = await post(token, notification("notifications/initialized"), session_id=session_id)
    assert initialized.status == 202, initialized.body
    return session_id


# --- streams -------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class EventStream:
    """A long-lived response read chunk by chunk; every read waits at most `TIMEOUT` seconds."""

    communicator: ApplicationCommunicator
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    raw: str = ""
    ended: bool = False
    _buffer: str = ""

    async def _read_chunk(self) -> str:
        message = await self.communicator.receive_output(TIMEOUT)
        assert message["type"] == "http.response.body", message
        chunk = message.get("body", b"").decode()
        self.raw += chunk
        self._buffer += chunk
        if not message.get("more_body", False):
            self.ended = True
        return chunk

    async def first_chunk(self) -> str:
        return await self._read_chunk()

    async def next_event(self) -> SseEvent:
        """The next event on the stream, skipping comments (keep-alives and the opening comment)."""
        while True:
            while "\n\n" in self._buffer:
                block, self._buffer = self._buffer.split("\n\n", 1)
                event = _parse_event(block)
                if event is not None:
                    return event
            assert not self.ended, f"the stream ended before the next event; it carried {self.raw!r}"
            await self._read_chunk()

    async def until_closed(self) -> list[SseEvent]:
        """Read until the server ends the stream (more_body false), let the application finish, and
        return the events not read yet."""
        while not self.ended:
            await self._read_chunk()
        await self.communicator.wait(TIMEOUT)
        blocks, self._buffer = self._buffer.split("\n\n"), ""
        return [event for event in map(_parse_event, blocks) if event is not None]

    async def disconnect(self) -> None:
        """Go away as a client does, and wait for the application to finish its cleanup."""
        await self.communicator.send_input({"type": "http.disconnect"})
        await self.communicator.wait(TIMEOUT)


def _parse_event(block: str) -> SseEvent | None:
    fields: dict[str, list[str]] = {}
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
    if not fields:
        return None
    return SseEvent(
        event=fields.get("event", ["message"])[0],
        data="\n".join(fields.get("data", [])),
        id=fields["id"][0] if "id" in fields else None,
    )


@asynccontextmanager
async def open_stream(
    method: str, path: str, *, headers: list[tuple[bytes, bytes]], body: bytes | dict | list = b""
) -> AsyncIterator[EventStream]:
    """Start a request whose answer is a stream; afterwards, disconnect if the server has not ended it."""
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    communicator = ApplicationCommunicator(application, scope)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    await communicator.send_input({"type": "http.request", "body": raw, "more_body": False})
    start = await communicator.receive_output(TIMEOUT)
    assert start["type"] == "http.response.start", start
    stream = EventStream(
        communicator,
        status=start["status"],
        headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in start["headers"]},
    )
    try:
        yield stream
    finally:
        if not communicator.future.done():
            # A test that failed mid-stream must not leave the consumer running into the next test.
            if stream.ended:
                await communicator.wait(TIMEOUT)
            else:
                await stream.disconnect()


class RememberingLayer(InMemoryChannelLayer):
    """The in-memory channel layer, telling the test each time a channel joins (or rejoins) a group."""

    def __init__(self) -> None:
        super().__init__(capacity=1000)
        self.joins: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def group_add(self, group: str, channel: str) -> None:
        await super().group_add(group, channel)
        self.joins.put_nowait((group, channel))

    def forget(self, group: str) -> None:
        """Drop the group's members, as channels-redis does once a membership is older than its group_expiry."""
        self.groups.pop(group, None)

    async def next_join(self, group: str) -> str:
        """The channel that joins `group` next (waiting at most `TIMEOUT`)."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                joined, channel = await self.joins.get()
                if joined == group:
                    return channel


def install_remembering_layer() -> RememberingLayer:
    """Make a `RememberingLayer` the application's channel layer for this test (the autouse fixture
    `fresh_channel_layer` takes it out again)."""
    layer = RememberingLayer()
    channel_layers.backends["default"] = layer
    return layer


# --- stored state --------------------------------------------------------------------------------


@database_sync_to_async
def audit_events(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind))


@database_sync_to_async
def mcp_sessions() -> list[McpSession]:
    return list(McpSession.objects.all())


@database_sync_to_async
def mcp_session(session_id: str) -> McpSession:
    return McpSession.objects.get(pk=session_id)


# --- the registry --------------------------------------------------------------------------------


@contextmanager
def registered(tool: Tool) -> Iterator[Tool]:
    """Register a tool for the length of a test, then take it out of the registry again."""
    register(tool)
    try:
        yield tool
    finally:
        REGISTRY.pop(tool.name, None)


# --- consent ------------------------------------------------------------------------------------------


def allow_project(raw_token: str, slug: str) -> str:
    """An operator-allowed grant for this token on a project, through a stateless session handle (minted
    once per token); returns the handle. A project that does not exist gets no grant."""
    from access.grants import do_decide_access, raise_request
    from access.models import AccessState, ClientToken, Transport
    from access.services import mint_handle, token_digest
    from projects.models import Project

    token = ClientToken.objects.select_related("owner").get(digest=token_digest(raw_token))
    handle = McpSession.objects.filter(token=token, transport=Transport.HANDLE, ended_at__isnull=True).first()
    handle = handle or mint_handle(token, STATELESS, CLIENT_INFO)
    project = Project.objects.filter(slug=slug).first()
    if project is not None:
        request = raise_request(token, handle, project)
        if request.state == AccessState.PENDING:
            do_decide_access(request.pk, allow=True, user=token.owner)
    return handle.id
