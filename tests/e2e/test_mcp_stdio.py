"""`manage.py mcp_stdio`: the official SDK client over stdio, through the bridge, to a live server."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.live import ROOT

pytestmark = [pytest.mark.live, pytest.mark.anyio]


async def test_an_sdk_stdio_client_lists_and_calls_tools_through_the_bridge(forge_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(forge_server.token)
    token_file.chmod(0o600)
    bridge = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_stdio", "--url", forge_server.mcp_url, "--token-file", str(token_file)],
        env=forge_server.env,
        cwd=str(ROOT),
    )
    with anyio.fail_after(30):
        async with Client(stdio_client(bridge), mode="legacy") as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            status = (await client.call_tool("session.status", {})).structured_content

    assert "server_info" in tools
    assert status["transport"] == "streamable-http"
    assert status["session_id"]


def test_the_bridge_refuses_to_start_without_a_token(forge_server):
    env = {key: value for key, value in forge_server.env.items() if key != "FORGE_MCP_TOKEN"}
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio", "--url", forge_server.mcp_url],
        cwd=ROOT,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert "--token-file" in done.stderr


def test_the_bridge_relays_unreadable_lines_and_relays_the_servers_refusals(forge_server):
    lines = [
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", '
        b'"capabilities": {}, "clientInfo": {"name": "\xed\xa0\x80", "version": "1"}}}',
        b'{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": NaN}}',
        b"\xff\xfe not UTF-8",
    ]
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio", "--url", forge_server.mcp_url],
        cwd=ROOT,
        env={**forge_server.env, "FORGE_MCP_TOKEN": forge_server.token},
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(answer["id"], answer["error"]["code"]) for answer in answers] == [
        (1, -32602),
        (None, -32700),
        (None, -32700),
    ]
