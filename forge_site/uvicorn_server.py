"""`runmcp --server uvicorn`: the same ASGI application on uvicorn, with uvloop's event loop and httptools'
HTTP parser (the `uvicorn` extra), instead of daphne on Twisted.

What daphne gives `runmcp` and uvicorn does not by itself, done here:

- a limit on the request head. httptools keeps whatever head a client sends (a 50 MB header was read and
  served), so `HeadLimitedHttpToolsProtocol` answers a head over `request_head`'s limits with the same 431
  and JSON body as daphne (it counts the head's bytes as they arrive, so its CRLFs count too: a few hundred
  bytes stricter than Twisted at most);
- an end for open event streams when the server stops: uvicorn waits for every response to finish, and a
  stream finishes only when its client goes. On shutdown an open stream is told its client has gone
  (`http.disconnect`, so the consumer's own clean-up runs) and its connection closed; a request still
  being worked on has `GRACE_SECONDS` to be answered;
- SIGTERM and SIGINT end `runmcp` normally, after its own clean-up (uvicorn raises the signal again once
  it has stopped, so the process would end killed by it);
- the start-up work (`ready`) on the server's own loop once it listens, as daphne's `ready_callable`.

No lifespan (Channels' router has none), no access log (Django's logging covers us), no proxy headers (the
client address is the socket's, as on daphne: the login throttle counts by it), and no WebSocket (Forge
has none). HTTPS stays daphne's (forge_site/tls_server.py): mTLS needs the client certificate in the ASGI
scope, which only that listener puts there.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from forge_site.request_head import MAX_HEAD_BYTES, MAX_HEADERS, RESPONSE

GRACE_SECONDS = 5
"""On shutdown, how long requests still being worked on (not streams) have to be answered."""
KEEP_ALIVE_SECONDS = 75
"""How long an idle connection between two requests stays open. Longer than clients keep theirs (httpx: 5 s),
so a client never sends on a connection the server is closing. It never applies to a response in progress,
so an idle event stream stays open as long as its client wants."""


class WritesOfATurn:
    """The transport as a response sees it: what the response writes within one turn of the event loop goes out
    in one write at the end of the turn. uvicorn writes a response's head as soon as it is sent and its body
    apart, so a JSON answer cost two system calls, and two trips through the kernel's TCP stack, where one does
    (docs/PERFORMANCE.md). A stream's later events each go in the turn they are sent; nothing waits longer."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport, self.loop = transport, loop
        self.pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append(data)

    def flush(self) -> None:
        """Write what is pending now (before anything else is written to the connection, or it is closed)."""
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class HeadLimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools connection, answering a request head over its limits with 431 and a JSON body, and
    writing each response's bytes of one loop turn at once (`WritesOfATurn`).

    The parser calls these methods several times a request (`on_header` once a header line): they call uvicorn's
    own by name rather than through `super()`, which builds an object on every call, and `on_url` and `on_header`
    do uvicorn's few lines themselves; 21 K fewer instructions a request of ten headers (docs/PERFORMANCE.md)."""

    head_refused = False
    reading_head = False
    read_in_head = 0
    url_bytes = 0
    header_count = 0
    header_bytes = 0  # the header lines' ("name: value"), counted as they are parsed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.responses = WritesOfATurn(transport, self.loop)

    def data_received(self, data: bytes) -> None:
        if self.head_refused:
            return  # the refusal is sent: whatever else the client sends is not read
        HttpToolsProtocol.data_received(self, data)
        if self.reading_head:
            # A head still unfinished after this read (one that never ends included): all of the read counts as
            # head, even the end of the request before it when a client pipelines (sends before its answer).
            self.read_in_head += len(data)
            if self.read_in_head > MAX_HEAD_BYTES:
                self.head_refused = True
        if self.head_refused and not self.transport.is_closing():
            self.responses.flush()  # an answer to a request before this one goes first
            self.transport.write(RESPONSE)
            self.transport.close()

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        self.reading_head = True
        self.read_in_head = self.url_bytes = self.header_count = self.header_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.url_bytes += len(url)
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's `on_header`, done here: a call of it for each line cost more than what it does with the line.
        self.header_count += 1
        self.header_bytes += len(name) + len(value) + 2
        if self.header_count > MAX_HEADERS:
            self.head_refused = True
        if not self.head_refused:
            name = name.lower()
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.reading_head = False
        # A head that came whole within one read: its request target and header lines ("name: value").
        if self.url_bytes + self.header_bytes > MAX_HEAD_BYTES:
            self.head_refused = True
        if not self.head_refused:
            HttpToolsProtocol.on_headers_complete(self)
            if self.cycle is not None:
                self.cycle.transport = self.responses  # type: ignore[assignment]  # the part of it a cycle uses

    def on_body(self, body: bytes) -> None:
        if not self.head_refused:
            HttpToolsProtocol.on_body(self, body)

    def on_message_complete(self) -> None:
        if not self.head_refused:
            HttpToolsProtocol.on_message_complete(self)

    def send_400_response(self, msg: str) -> None:
        self.responses.flush()
        super().send_400_response(msg)

    def shutdown(self) -> None:
        self.responses.flush()
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            # An open event stream: tell the application its client has gone, so the stream ends through its
            # own clean-up, instead of keeping the server waiting for a client that stays.
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.close()
            return
        super().shutdown()


class ForgeUvicorn(uvicorn.Server):
    """uvicorn's server, calling `ready` on its loop once it listens, and ending normally on a signal."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], None]) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.ready()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's own handler also notes the signal, to raise it again once it has stopped.
        if self.should_exit:
            self.force_exit = True  # a second signal: stop waiting for requests to finish
        self.should_exit = True


def serve(application: Any, host: str, port: int, ready: Callable[[], None]) -> None:
    """Serve `application` over plain HTTP on host:port until SIGTERM or SIGINT."""
    config = uvicorn.Config(
        application,
        host=host.strip("[]"),
        port=port,
        loop="uvloop",
        http=HeadLimitedHttpToolsProtocol,
        ws="none",
        lifespan="off",
        interface="asgi3",
        log_config=None,  # Django's LOGGING, set up already, takes uvicorn's records too
        access_log=False,
        proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=GRACE_SECONDS,
    )
    ForgeUvicorn(config, ready).run()
