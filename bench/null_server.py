"""Do-nothing MCP look-alike: a raw ASGI app on uvicorn, with no framework and no SDK.

It answers just enough of the MCP wire protocol for ``bench/mcp_load.py`` to
run every measurement against it, doing as little work as possible, so its
figures show the ceiling of the load client (and of uvicorn) on this machine:

* ``POST /mcp``: a notification (no ``"id"`` in the body) gets ``202``; a
  request gets a fixed JSON-RPC result echoing the request's id, found with a
  regular expression instead of a JSON parse.  ``initialize`` also gets an
  ``Mcp-Session-Id`` header.  The answer is ``application/json``, or a
  one-message ``text/event-stream`` when the request carries a progress token
  or the server runs with ``--sse-response``.
* ``GET /mcp``: an idle ``text/event-stream`` held open until the client leaves.
* ``DELETE /mcp``: ``200``.
* ``GET /sse``: the legacy transport's stream; it sends the ``endpoint`` event,
  then relays the answers to the POSTs made to ``/messages/?session_id=...``,
  which themselves get ``202``.

Run it as ``python bench/null_server.py --port 8102 [--sse-response]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

HOST = "127.0.0.1"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ID_RE = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')
INIT_RESULT = (
    b'{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":false}},'
    b'"serverInfo":{"name":"null-server","version":"0"}}'
)
TOOL_RESULT = (
    b'{"content":[{"type":"text","text":"{\\"name\\": \\"null-server\\", \\"version\\": \\"0\\"}"}],"isError":false}'
)
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one, for thousands of idle streams."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def sse_event(event: str, data: bytes) -> bytes:
    """Frame one server-sent event."""
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class NullMcpApp:
    """The ASGI application; ``sse_answers`` forces streamed answers on /mcp."""

    def __init__(self, sse_answers: bool) -> None:
        self.sse_answers = sse_answers
        # Legacy SSE sessions: session id -> queue of frames for its open GET /sse.
        self.legacy_queues: dict[str, asyncio.Queue[bytes | None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/mcp" and method == "POST":
            await self.post_mcp(await read_body(receive), send)
        elif path == "/mcp" and method == "GET":
            await hold_stream(receive, send)
        elif path == "/mcp" and method == "DELETE":
            await respond(send, 200, [], b"")
        elif path == "/sse" and method == "GET":
            await self.legacy_stream(receive, send)
        elif path.rstrip("/") == "/messages" and method == "POST":
            await self.legacy_post(scope, await read_body(receive), send)
        else:
            await respond(send, 404, [], b"")

    @staticmethod
    async def lifespan(receive: Receive, send: Send) -> None:
        """Acknowledge uvicorn's startup and shutdown events."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def post_mcp(self, body: bytes, send: Send) -> None:
        """Answer one Streamable HTTP POST."""
        answer = answer_for(body)
        if answer is None:
            await respond(send, 202, [], b"")
            return
        headers: list[tuple[bytes, bytes]] = []
        if b'"initialize"' in body:
            headers.append((b"mcp-session-id", uuid.uuid4().hex.encode()))
        if self.sse_answers or b'"progressToken"' in body:
            await respond(send, 200, SSE_HEADERS + headers, sse_event("message", answer))
        else:
            await respond(send, 200, JSON_HEADERS + headers, answer)

    async def legacy_stream(self, receive: Receive, send: Send) -> None:
        """Hold a legacy GET /sse stream, relaying the answers queued by legacy_post."""
        session_id = uuid.uuid4().hex
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.legacy_queues[session_id] = queue
        endpoint = sse_event("endpoint", b"/messages/?session_id=" + session_id.encode())
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await send({"type": "http.response.body", "body": endpoint, "more_body": True})

        async def wait_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            queue.put_nowait(None)

        watcher = asyncio.create_task(wait_disconnect())
        try:
            while (frame := await queue.get()) is not None:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        finally:
            watcher.cancel()
            del self.legacy_queues[session_id]

    async def legacy_post(self, scope: Scope, body: bytes, send: Send) -> None:
        """Take a POST for a legacy session: 202 here, the answer (if any) on its stream."""
        session_id = scope["query_string"].partition(b"session_id=")[2].decode()
        queue = self.legacy_queues.get(session_id)
        if queue is None:
            await respond(send, 404, [], b"")
            return
        answer = answer_for(body)
        if answer is not None:
            queue.put_nowait(sse_event("message", answer))
        await respond(send, 202, [], b"")


def answer_for(body: bytes) -> bytes | None:
    """Return the fixed JSON-RPC answer to a request body, or None for a notification."""
    match = ID_RE.search(body)
    if match is None:
        return None
    result = INIT_RESULT if b'"initialize"' in body else TOOL_RESULT
    return b'{"jsonrpc":"2.0","id":' + match.group(1) + b',"result":' + result + b"}"


async def read_body(receive: Receive) -> bytes:
    """Read a whole request body."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a complete response."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def hold_stream(receive: Receive, send: Send) -> None:
    """Open an idle SSE response and keep it open until the client disconnects."""
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    # An empty chunk makes uvicorn flush the status line and headers now.
    await send({"type": "http.response.body", "body": b"", "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8102)
    answer_form = parser.add_mutually_exclusive_group()
    answer_form.add_argument(
        "--json-response",
        dest="json_response",
        action="store_true",
        default=True,
        help="answer /mcp POSTs as application/json unless they carry a progress token (default)",
    )
    answer_form.add_argument(
        "--sse-response",
        dest="json_response",
        action="store_false",
        help="answer every /mcp POST as a text/event-stream",
    )
    args = parser.parse_args()

    raise_fd_limit()
    config = uvicorn.Config(
        NullMcpApp(sse_answers=not args.json_response),
        host=HOST,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
