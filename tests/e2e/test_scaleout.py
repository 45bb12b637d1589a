"""Two server processes sharing PostgreSQL (sessions) and Redis (streams): the scale-out path.

The shared `forge_server` is the first process; `second_server` is another `runmcp` on its own data
dir with the same DATABASE_URL and REDIS_URL. A request may land on either, whichever holds the
session's stream: answers and session ends travel between them through the channel layer.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator

import anyio
import httpx
import httpx2
import pytest

from tests.live import bearer, run_server, scaleout_configured, sse_client, streamable_client

pytestmark = [
    pytest.mark.live,
    pytest.mark.scaleout,
    pytest.mark.anyio,
    pytest.mark.skipif(
        not scaleout_configured(),
        reason="scale-out needs a shared PostgreSQL and Redis: set DATABASE_URL and REDIS_URL",
    ),
]

BOTH = "application/json, text/event-stream"
BOUND = 15  # seconds for one cross-process conversation on loopback


def initialize(revision: str, request_id: int = 1) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}},
    }


def call(name: str, request_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": {}}}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture(scope="module")
def second_server(forge_server, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("live-second")
    # The same DATABASE_URL and REDIS_URL, and the same secrets (the audit keys sign one shared chain);
    # its own data dir, so its own audit mirror.
    env = {
        **forge_server.env,
        "FORGE_DATA_DIR": str(data_dir),
        "FORGE_SECRETS_DIR": str(forge_server.data_dir / "secrets"),
    }
    with run_server(env, forge_server.token, data_dir) as server:
        yield server


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """The (event, data) pairs of an SSE response; comments (keep-alives) are skipped."""
    event, data = "message", []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))


async def next_message(events: AsyncIterator[tuple[str, str]]) -> dict:
    event, data = await anext(events)
    assert event == "message"
    return json.loads(data)


async def test_legacy_sse_answers_reach_the_stream_held_by_the_other_process(forge_server, second_server):
    auth = bearer(forge_server.token)
    async with httpx.AsyncClient(timeout=10.0) as http:
        with anyio.fail_after(BOUND):
            sse = http.stream("GET", forge_server.sse_url, headers={**auth, "Accept": "text/event-stream"})
            async with sse as stream:
                assert stream.status_code == 200
                events = sse_events(stream)
                event, endpoint = await anext(events)
                assert event == "endpoint"
                messages = f"{second_server.base}{endpoint}"

                assert (await http.post(messages, headers=auth, json=initialize("2024-11-05"))).status_code == 202
                answer = await next_message(events)
                assert answer["id"] == 1
                assert answer["result"]["protocolVersion"] == "2024-11-05"
                assert answer["result"]["serverInfo"]["name"] == "forge-mcp"

                assert (await http.post(messages, headers=auth, json=INITIALIZED)).status_code == 202
                assert (await http.post(messages, headers=auth, json=call("session.status", 2))).status_code == 202
                answer = await next_message(events)
                assert answer["id"] == 2
                status = answer["result"]["structuredContent"]
                assert status["session_id"] == endpoint.split("session_id=", 1)[1]
                assert status["revision"] == "2024-11-05"
                assert status["transport"] == "sse"


async def test_streamable_http_session_opened_on_one_process_answers_on_the_other(forge_server, second_server):
    headers = {**bearer(forge_server.token), "Accept": BOTH}
    async with httpx.AsyncClient(timeout=10.0) as http:
        opened = await http.post(forge_server.mcp_url, headers=headers, json=initialize("2025-11-25"))
        assert opened.status_code == 200
        session_id = opened.headers["mcp-session-id"]
        session = {**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        assert (await http.post(second_server.mcp_url, headers=session, json=INITIALIZED)).status_code == 202
        answer = await http.post(second_server.mcp_url, headers=session, json=call("session.status", 2))
    assert answer.status_code == 200
    body = answer.json()
    assert body["id"] == 2
    assert body["result"]["isError"] is False
    assert body["result"]["structuredContent"]["session_id"] == session_id
    assert body["result"]["structuredContent"]["revision"] == "2025-11-25"


async def test_delete_on_one_process_ends_the_session_stream_held_by_the_other(forge_server, second_server):
    headers = {**bearer(forge_server.token), "Accept": BOTH}
    async with httpx.AsyncClient(timeout=10.0) as http:
        opened = await http.post(forge_server.mcp_url, headers=headers, json=initialize("2025-11-25"))
        session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        assert (await http.post(forge_server.mcp_url, headers=session, json=INITIALIZED)).status_code == 202
        get = http.stream("GET", forge_server.mcp_url, headers={**session, "Accept": "text/event-stream"})
        async with get as stream:
            assert stream.status_code == 200
            chunks = stream.aiter_bytes()
            assert (await anext(chunks)).startswith(b": open")
            assert (await http.delete(second_server.mcp_url, headers=session)).status_code == 204
            with anyio.fail_after(BOUND):
                async for _ in chunks:
                    pass
        after = await http.post(forge_server.mcp_url, headers=session, json=call("server_info", 3))
    assert after.status_code == 404


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer inside the client: each request goes to the next server in turn."""

    def __init__(self, *servers) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.ports = itertools.cycle([httpx2.URL(server.base).port for server in servers])
        self.sent: list[tuple[str, int]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        request.url = request.url.copy_with(port=port)
        self.sent.append((request.method, port))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def assert_spread_over(balancer: RoundRobin, *servers) -> None:
    ports = {httpx2.URL(server.base).port for server in servers}
    assert {port for method, port in balancer.sent if method == "POST"} == ports


async def test_sdk_client_over_legacy_sse_behind_a_round_robin_balancer(forge_server, second_server):
    balancer = RoundRobin(forge_server, second_server)
    with anyio.fail_after(BOUND):
        async with sse_client(forge_server, transport=balancer) as client:
            assert client.protocol_version == "2025-11-25"
            assert "session.status" in {tool.name for tool in (await client.list_tools()).tools}
            first = (await client.call_tool("session.status", {})).structured_content
            second = (await client.call_tool("session.status", {})).structured_content
    assert first["session_id"] == second["session_id"]
    assert first["transport"] == "sse"
    assert_spread_over(balancer, forge_server, second_server)


async def test_sdk_client_over_streamable_http_behind_a_round_robin_balancer(forge_server, second_server):
    balancer = RoundRobin(forge_server, second_server)
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy", transport=balancer) as client:
            assert client.protocol_version == "2025-11-25"
            assert "session.status" in {tool.name for tool in (await client.list_tools()).tools}
            first = (await client.call_tool("session.status", {})).structured_content
            second = (await client.call_tool("session.status", {})).structured_content
    assert first["session_id"] == second["session_id"]
    assert first["stateless"] is False
    assert_spread_over(balancer, forge_server, second_server)


MIRRORED_UP_TO = """
import json
from audit.services import committed_lines
lines = open({path!r}).read().splitlines()
own = [json.loads(line)["seq"] for line in lines if json.loads(line).get("session") == {session!r}]
print(len(lines), own[-1] if own else 0, lines == committed_lines(1, len(lines)))
"""


def test_each_process_mirrors_the_whole_shared_audit_chain_up_to_its_last_append(forge_server, second_server):
    """Both processes append to one chain; right after its own append, each one's mirror holds all of it
    (the other process's events included) up to that append, line for line what the database's rows give, and the
    chain verifies. (Up to its own append: a session of an earlier test whose stream the other process sees close
    late may be ended, and recorded, there at any moment.)"""
    headers = {"Authorization": f"Bearer {forge_server.token}", "Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    for server in (forge_server, second_server, forge_server):
        answered = httpx.post(server.mcp_url, json=initialize, headers=headers)
        assert answered.status_code == 200
        path, session = str(server.data_dir / "audit" / "audit.jsonl"), answered.headers["mcp-session-id"]
        mirrored, own, same = server.manage(
            "shell", "--no-imports", "-c", MIRRORED_UP_TO.format(path=path, session=session)
        ).split()
        assert same == "True"
        assert 0 < int(own) <= int(mirrored), "the mirror lacks the process's own append"
        assert server.manage("audit_verify", "--no-mirror").strip().splitlines()[-1].startswith("ok ")
