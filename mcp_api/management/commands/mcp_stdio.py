"""`python manage.py mcp_stdio --url URL`: an MCP stdio server that relays to a running Forge server.

Clients that only start local (stdio) servers, such as Claude Desktop, run this command. It reads
newline-delimited JSON-RPC messages on stdin and posts each to the server's Streamable HTTP endpoint
with the client token, writes every answer (JSON or SSE) to stdout as one line, keeps the session id
the server gave, relays the session's GET stream (server notifications) to stdout, and ends the session
when stdin closes. The running server stays the single writer and does all checks; this bridge holds
no state but the session id. The token comes from `--token-file` or FORGE_MCP_TOKEN, never the command
line (other users can read a process's arguments).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import IO, Any

import httpx
from django.core.management.base import BaseCommand, CommandError

ACCEPT = "application/json, text/event-stream"


class Bridge:
    def __init__(self, url: str, token: str, out: IO[str]) -> None:
        self.url = url
        self.http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30.0, read=None))
        self.out = out
        self.lock = threading.Lock()
        self.session_id: str | None = None
        self.revision: str | None = None

    def emit(self, message: Any) -> None:
        with self.lock:
            self.out.write(json.dumps(message, separators=(",", ":")) + "\n")
            self.out.flush()

    def headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.revision:
            headers["MCP-Protocol-Version"] = self.revision
        return headers

    def relay(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.emit(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32700, "message": "Parse error: one JSON-RPC message per line."},
                }
            )
            return
        with self.http.stream("POST", self.url, content=line, headers=self.headers()) as response:
            if isinstance(message, dict) and message.get("method") == "initialize" and response.status_code == 200:
                self.session_id = response.headers.get("mcp-session-id")
            self.forward(response)
        if isinstance(message, dict) and message.get("method") == "notifications/initialized" and self.session_id:
            threading.Thread(target=self.listen, name="mcp-stdio-stream", daemon=True).start()

    def forward(self, response: httpx.Response) -> None:
        kind = response.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):
            for message in sse_messages(response.iter_lines()):
                self.note(message)
                self.emit(message)
        elif response.status_code != 202:
            body = response.read()
            if body:
                try:
                    message = json.loads(body)
                except ValueError:
                    message = {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32603,
                            "message": f"The server answered HTTP {response.status_code} without JSON.",
                        },
                    }
                self.note(message)
                self.emit(message)

    def note(self, message: Any) -> None:
        if (
            isinstance(message, dict)
            and isinstance(message.get("result"), dict)
            and "protocolVersion" in message["result"]
        ):
            self.revision = message["result"]["protocolVersion"]

    def listen(self) -> None:
        """Relay the session's GET stream (server notifications) until it or the bridge ends."""
        try:
            headers = {**self.headers(), "Accept": "text/event-stream"}
            with self.http.stream("GET", self.url, headers=headers) as response:
                if response.status_code == 200:
                    for message in sse_messages(response.iter_lines()):
                        self.emit(message)
        except httpx.HTTPError:
            pass  # the stream ended (session deleted, server gone): requests still work without it

    def close(self) -> None:
        if self.session_id:
            with contextlib.suppress(httpx.HTTPError):  # the bridge ends either way
                self.http.delete(self.url, headers=self.headers())
        self.http.close()


def sse_messages(lines) -> Any:
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                message = _json_or_none("\n".join(data))
                if message is not None:
                    yield message
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class Command(BaseCommand):
    help = "Serve MCP over stdio by relaying to a running Forge server's Streamable HTTP endpoint."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/mcp", help="the server's /mcp URL")
        parser.add_argument("--token-file", type=Path, default=None, help="a file holding the client token")

    def handle(self, *args, url: str, token_file: Path | None, **options) -> None:
        token = os.environ.get("FORGE_MCP_TOKEN", "")
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as exc:
                raise CommandError(f"cannot read {token_file}: {exc.strerror}") from None
        if not token:
            raise CommandError("Give the client token with --token-file F or the FORGE_MCP_TOKEN variable.")
        bridge = Bridge(url, token, sys.stdout)
        try:
            # Lines are relayed as the bytes they are: the server screens them (a line that is not UTF-8, or
            # carries a lone surrogate, is its refusal to give, not a crash of this bridge).
            for line in sys.stdin.buffer:
                if line.strip():
                    try:
                        bridge.relay(line.strip())
                    except httpx.HTTPError as exc:
                        bridge.emit(
                            {
                                "jsonrpc": "2.0",
                                "id": None,
                                "error": {
                                    "code": -32603,
                                    "message": f"The Forge server at {url} cannot be reached ({type(exc).__name__}); is it running?",
                                },
                            }
                        )
        finally:
            bridge.close()
