"""Baseline MCP server built only with the official ``mcp`` Python SDK.

The benchmark compares the project's Django/Channels/daphne MCP server with
this reference: the SDK's own ``MCPServer`` with a single ``server_info`` tool,
served on loopback by uvicorn (h11 on asyncio, the default) or, with
``--server daphne``, by daphne (the server Forge runs by default).  It exposes
both transports the load client (``bench/mcp_load.py``) knows:

* Streamable HTTP at ``/mcp`` with stateful sessions (``Mcp-Session-Id``).
  The SDK picks the answer form with one switch: ``--json-response`` (the
  default) answers every POST with ``application/json``; ``--sse-response``
  answers every POST with a one-message ``text/event-stream``.
* The legacy HTTP+SSE transport: ``GET /sse`` opens the stream and announces
  the ``/messages/?session_id=...`` endpoint that takes the client's POSTs.

daphne speaks no ASGI lifespan, and the SDK's Streamable HTTP session manager runs
inside the app's lifespan, so on daphne ``LifespanFirst`` runs the lifespan once on
daphne's loop and holds requests until it has started.

Run it as ``python bench/sdk_server.py --port 8101 [--sse-response] [--server daphne]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
from importlib.metadata import version
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

HOST = "127.0.0.1"
SERVER_NAME = "sdk-baseline"
SDK_VERSION = version("mcp")


def raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one, for thousands of idle streams."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def build_app(json_response: bool) -> Starlette:
    """Build one Starlette app serving Streamable HTTP at /mcp and legacy SSE at /sse."""
    server = MCPServer(SERVER_NAME, version=SDK_VERSION, log_level="WARNING")

    @server.tool(structured_output=False)
    def server_info() -> str:
        """Return the server's name and SDK version as a small JSON text."""
        return json.dumps({"name": SERVER_NAME, "version": SDK_VERSION})

    # The Streamable HTTP app owns the lifespan that runs the session manager;
    # the legacy SSE app has none, so its routes can simply be added to it.
    app = server.streamable_http_app(json_response=json_response, host=HOST)
    app.router.routes.extend(server.sse_app(host=HOST).routes)
    return app


class LifespanFirst:
    """An ASGI app whose lifespan is run here (for a server without lifespan support), once, before any
    request reaches it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.started: asyncio.Event | None = None
        self.lifespan: asyncio.Task | None = None

    def start(self) -> None:
        """Start the lifespan on the running server's loop (daphne's ``ready_callable``)."""
        self.started = asyncio.Event()
        self.lifespan = asyncio.get_event_loop().create_task(self.run_lifespan())

    async def run_lifespan(self) -> None:
        assert self.started is not None
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        messages.put_nowait({"type": "lifespan.startup"})

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.failed":
                raise RuntimeError(f"the app's lifespan failed to start: {message.get('message')}")
            if message["type"] == "lifespan.startup.complete":
                self.started.set()

        # Never sent lifespan.shutdown: the lifespan lasts as long as the process.
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        await self.app(scope, messages.get, send)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert self.started is not None, "start() runs once the server listens"
        await self.started.wait()
        await self.app(scope, receive, send)


def serve_with_uvicorn(app: Starlette, port: int) -> None:
    # asyncio and h11 named, not uvicorn's "auto": the dev extra installs uvloop and httptools (for runmcp
    # --server uvicorn), which "auto" would pick, moving this reference away from its earlier figures.
    config = uvicorn.Config(
        app, host=HOST, port=port, loop="asyncio", http="h11", log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()


def serve_with_daphne(app: Starlette, port: int) -> None:
    """daphne as ``runmcp`` runs it: no access log, quiet, no response timeout (idle streams stay open)."""
    from daphne.server import Server  # installs Twisted's asyncio reactor

    wrapped = LifespanFirst(app)
    Server(
        application=wrapped,
        endpoints=[f"tcp:port={port}:interface={HOST}"],
        signal_handlers=True,
        action_logger=None,
        http_timeout=None,
        verbosity=0,
        ready_callable=wrapped.start,
    ).run()
    # The SDK runs a sync tool in an AnyIO worker thread, which ends only with the loop's root task; under
    # daphne's reactor that never ends, so after SIGTERM Python would wait for the worker threads forever.
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8101)
    answer_form = parser.add_mutually_exclusive_group()
    answer_form.add_argument(
        "--json-response",
        dest="json_response",
        action="store_true",
        default=True,
        help="answer Streamable HTTP POSTs as application/json (default)",
    )
    answer_form.add_argument(
        "--sse-response",
        dest="json_response",
        action="store_false",
        help="answer Streamable HTTP POSTs as a text/event-stream",
    )
    parser.add_argument(
        "--server",
        choices=("uvicorn", "daphne"),
        default="uvicorn",
        help="the ASGI server: uvicorn (h11, asyncio; default) or daphne (Twisted, as Forge's runmcp runs it)",
    )
    args = parser.parse_args()

    raise_fd_limit()
    serve = serve_with_daphne if args.server == "daphne" else serve_with_uvicorn
    serve(build_app(args.json_response), args.port)


if __name__ == "__main__":
    main()
