"""Baseline MCP server built only with the official ``mcp`` Python SDK.

The benchmark compares the project's Django/Channels/daphne MCP server with
this reference: the SDK's own ``MCPServer`` with a single ``server_info`` tool,
served by uvicorn on loopback.  It exposes both transports the load client
(``bench/mcp_load.py``) knows:

* Streamable HTTP at ``/mcp`` with stateful sessions (``Mcp-Session-Id``).
  The SDK picks the answer form with one switch: ``--json-response`` (the
  default) answers every POST with ``application/json``; ``--sse-response``
  answers every POST with a one-message ``text/event-stream``.
* The legacy HTTP+SSE transport: ``GET /sse`` opens the stream and announces
  the ``/messages/?session_id=...`` endpoint that takes the client's POSTs.

Run it as ``python bench/sdk_server.py --port 8101 [--sse-response]``.
"""

from __future__ import annotations

import argparse
import json
import resource
from importlib.metadata import version

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
    args = parser.parse_args()

    raise_fd_limit()
    config = uvicorn.Config(
        build_app(args.json_response),
        host=HOST,
        port=args.port,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
