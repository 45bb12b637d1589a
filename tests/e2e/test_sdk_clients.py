"""The official MCP SDK client (mcp 2.3) against the live server: every revision, both transports.

Handshake revisions are forced by patching the SDK's `LATEST_HANDSHAKE_VERSION`, the version its
`initialize` offers. The stateless revision 2026-07-28 is reached through `server/discover`
(mode="auto") or directly (mode="2026-07-28").
"""

from __future__ import annotations

import os

import anyio
import httpx2
import pytest
from mcp.shared.subscriptions import ToolsListChanged

from tests.live import sse_client, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

ALL_REVISIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
BOUND = 20  # seconds for one whole client conversation on loopback


def assert_server_info_result(result) -> None:
    assert result.is_error is False
    assert result.structured_content["name"] == "forge-mcp"
    assert result.structured_content["revisions"] == ALL_REVISIONS


def tool_names(listing) -> set[str]:
    return {tool.name for tool in listing.tools}


@pytest.mark.parametrize("revision", ["2025-11-25", "2025-06-18", "2025-03-26"])
async def test_sdk_client_over_streamable_http_initializes_lists_and_calls_server_info(
    forge_server, monkeypatch, revision
):
    monkeypatch.setattr("mcp.client.session.LATEST_HANDSHAKE_VERSION", revision)
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            assert client.protocol_version == revision
            assert client.server_info.name == "forge-mcp"
            assert {"server_info", "session.status"} <= tool_names(await client.list_tools())
            assert_server_info_result(await client.call_tool("server_info", {}))


async def test_sdk_client_over_legacy_sse_initializes_lists_and_calls_server_info_at_2024_11_05(
    forge_server, monkeypatch
):
    monkeypatch.setattr("mcp.client.session.LATEST_HANDSHAKE_VERSION", "2024-11-05")
    with anyio.fail_after(BOUND):
        async with sse_client(forge_server) as client:
            assert client.protocol_version == "2024-11-05"
            assert client.server_info.name == "forge-mcp"
            assert {"server_info", "session.status"} <= tool_names(await client.list_tools())
            assert_server_info_result(await client.call_tool("server_info", {}))


async def test_sdk_client_in_auto_mode_over_legacy_sse_falls_back_to_the_handshake(forge_server):
    # The SDK waits 10 s for a discover answer before it falls back; within 5 s means the server answered
    # the discover POST on the stream (an error for a session without initialize), as a legacy server must.
    with anyio.fail_after(5):
        async with sse_client(forge_server, mode="auto") as client:
            assert client.protocol_version == "2025-11-25"
            assert_server_info_result(await client.call_tool("server_info", {}))


async def test_sdk_client_in_auto_mode_discovers_and_speaks_the_stateless_revision(forge_server):
    responses: list[httpx2.Response] = []
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="auto", responses=responses) as client:
            assert client.protocol_version == "2026-07-28"
            assert client.server_info.name == "forge-mcp"
            assert "2026-07-28" in client.session.discover_result.supported_versions
            assert client.server_capabilities.tools.list_changed is True
            assert {"server_info", "session.status"} <= tool_names(await client.list_tools(cache_mode="bypass"))
            assert_server_info_result(await client.call_tool("server_info", {}))
    assert responses, "the client made no HTTP request"
    assert all(response.headers.get("mcp-session-id") is None for response in responses)
    assert {response.request.headers["mcp-method"] for response in responses} == {
        "server/discover",
        "tools/list",
        "tools/call",
    }


async def test_sdk_client_pinned_to_2026_07_28_lists_and_calls_without_discover(forge_server):
    responses: list[httpx2.Response] = []
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="2026-07-28", responses=responses) as client:
            assert client.protocol_version == "2026-07-28"
            assert {"server_info", "session.status"} <= tool_names(await client.list_tools(cache_mode="bypass"))
            assert_server_info_result(await client.call_tool("server_info", {}))
    assert [response.request.headers["mcp-method"] for response in responses] == ["tools/list", "tools/call"]
    assert all(response.status_code == 200 for response in responses)


async def test_session_status_over_streamable_http_reports_the_session_the_client_holds(forge_server):
    responses: list[httpx2.Response] = []
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy", responses=responses) as client:
            status = (await client.call_tool("session.status", {})).structured_content
    handed_out = {response.headers["mcp-session-id"] for response in responses if "mcp-session-id" in response.headers}
    assert len(handed_out) == 1
    assert status["session_id"] == handed_out.pop()
    assert status["stateless"] is False
    assert status["revision"] == "2025-11-25"
    assert status["transport"] == "streamable-http"
    assert status["client_label"] == "live-e2e"


async def test_closing_the_sdk_client_ends_its_streamable_http_session(forge_server):
    responses: list[httpx2.Response] = []
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy", responses=responses) as client:
            session_id = (await client.call_tool("session.status", {})).structured_content["session_id"]
        assert [r.status_code for r in responses if r.request.method == "DELETE"] == [204]
        async with httpx2.AsyncClient() as http:
            after = await http.post(
                forge_server.mcp_url,
                headers={
                    "Authorization": f"Bearer {forge_server.token}",
                    "Accept": "application/json, text/event-stream",
                    "Mcp-Session-Id": session_id,
                    "MCP-Protocol-Version": "2025-11-25",
                },
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            )
    assert after.status_code == 404


async def test_session_status_at_2026_07_28_reports_stateless_with_no_session(forge_server):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="auto") as client:
            status = (await client.call_tool("session.status", {})).structured_content
    assert status["stateless"] is True
    assert status["session_id"] is None
    assert status["revision"] == "2026-07-28"
    assert status["context_generation"] == 0
    assert status["client_info"] == {"name": "mcp", "version": "0.1.0"}


async def test_listen_is_acknowledged_with_tools_list_changed_honored(forge_server):
    with anyio.fail_after(BOUND):
        async with (
            streamable_client(forge_server, mode="2026-07-28") as client,
            client.listen(tools_list_changed=True, prompts_list_changed=True) as subscription,
        ):
            assert subscription.honored.tools_list_changed is True
            assert not subscription.honored.prompts_list_changed
            # The connection stays usable beside the open stream.
            assert_server_info_result(await client.call_tool("server_info", {}))


@pytest.mark.scaleout
@pytest.mark.skipif(
    not os.environ.get("REDIS_URL"),
    reason="a broadcast from another process reaches the server's streams only through Redis: set REDIS_URL "
    "(the embedded in-memory channel layer lives inside the server process)",
)
async def test_listen_receives_tools_list_changed_broadcast_from_another_process(forge_server):
    broadcast = (
        "from forge_core.live import notify_streams; from access.models import BROADCAST_GROUP; "
        "notify_streams(BROADCAST_GROUP, 'mcp.tools_changed')"
    )
    with anyio.fail_after(BOUND):
        async with (
            streamable_client(forge_server, mode="2026-07-28") as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            await anyio.to_thread.run_sync(forge_server.manage, "shell", "-c", broadcast)
            event = await subscription.__anext__()
    assert isinstance(event, ToolsListChanged)
