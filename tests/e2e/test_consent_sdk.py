"""The consent gates end to end, through the official SDK client against a live server, with operators
deciding from a shell (`manage.py mcp_switch`, `manage.py access_requests`) as a deployment would."""

from __future__ import annotations

import re
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client

from tests.live import LiveServer, scaleout_configured, streamable_client
from tests.projects.conftest import LATIN1, fixture_path

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30
PROJECT_FILE = fixture_path(LATIN1)
SLUG = "consent-tower"


@pytest.fixture(scope="module")
def project(forge_server: LiveServer) -> str:
    forge_server.manage("import_project", str(PROJECT_FILE), "--slug", SLUG)
    return SLUG


async def overview(client: Client, **extra: Any) -> dict[str, Any]:
    result = await client.call_tool("project.overview", {"project": SLUG, **extra})
    return result.structured_content


async def operator(server: LiveServer, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: server.manage(*args))


def request_id(listing: str, session_id: str) -> str:
    return next(line.split()[0] for line in listing.splitlines() if line.endswith(session_id))


async def test_with_mcp_switched_off_a_project_read_is_refused(forge_server, project):
    await operator(forge_server, "mcp_switch", "off")
    try:
        with anyio.fail_after(BOUND):
            async with streamable_client(forge_server, mode="legacy") as client:
                refused = await overview(client)
                tools = [tool.name for tool in (await client.list_tools()).tools]
    finally:
        await operator(forge_server, "mcp_switch", "on")

    assert refused["error"] == "FORGE_ERR_MCP_DISABLED"
    assert tools == ["server_info", "session.status"]


async def test_pending_then_allowed_then_reads_work_then_revoked_then_refused(forge_server, project):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            pending = await overview(client)
            await operator(forge_server, "access_requests", "allow", "--pending", "--as", "live")
            allowed = await overview(client)
            status = (await client.call_tool("session.status", {})).structured_content
            listing = await operator(forge_server, "access_requests", "list")
            await operator(
                forge_server, "access_requests", "revoke", request_id(listing, status["session_id"]), "--as", "live"
            )
            revoked = await overview(client)

    assert pending["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    assert (allowed["project"], allowed["view"]) == (SLUG, "accepted")
    assert {"project": SLUG, "state": "allowed"} in status["access"]
    assert status["context_generation"] == 1
    assert revoked["error"] == "FORGE_ERR_PROJECT_ACCESS_DENIED"


async def test_a_denied_request_is_refused_as_denied(forge_server, project):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            await overview(client)
            await operator(forge_server, "access_requests", "deny", "--pending", "--as", "live")
            denied = await overview(client)

    assert denied["error"] == "FORGE_ERR_PROJECT_ACCESS_DENIED"
    assert "denied" in denied["message"]


async def test_a_grant_ends_with_its_session(forge_server, project):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            await overview(client)
            await operator(forge_server, "access_requests", "allow", "--pending", "--as", "live")
            assert "error" not in await overview(client)
            session_id = (await client.call_tool("session.status", {})).structured_content["session_id"]
        listing = await operator(forge_server, "access_requests", "list")

    line = next(line for line in listing.splitlines() if line.endswith(session_id))
    assert line.split()[1] == "ended"


async def test_a_stateless_handle_presented_by_another_principal_is_unknown(forge_server, project):
    other_token = await anyio.to_thread.run_sync(lambda: forge_server.new_token("consent-other", user="live"))
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="2026-07-28") as client:
            asked = (await client.call_tool("session.request_access", {"project": SLUG})).structured_content
        async with streamable_client(forge_server, mode="2026-07-28", token=other_token) as other:
            stolen = await overview(other, session_handle=asked["session_handle"])

    assert asked["state"] == "pending"
    assert stolen["error"] == "FORGE_ERR_NOT_FOUND"
    assert "handle" in stolen["message"]


async def test_a_principal_without_view_permission_cannot_learn_a_project_name(forge_server, project):
    stranger = await anyio.to_thread.run_sync(lambda: forge_server.new_token("consent-stranger", user="stranger"))
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy", token=stranger) as client:
            listing = (await client.call_tool("project.list", {})).structured_content
            existing = await overview(client)
            missing = (await client.call_tool("project.overview", {"project": "no-such-project"})).structured_content

    assert listing["projects"] == []
    assert existing["error"] == missing["error"] == "FORGE_ERR_NOT_FOUND"
    assert existing["message"].replace(SLUG, "X") == missing["message"].replace("no-such-project", "X")


def list_changed_watcher():
    """An event set when the client is told its tool list changed, and the message handler that sets it."""
    changed = anyio.Event()

    async def on_message(message) -> None:
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            changed.set()

    return changed, on_message


def console_switch(server: LiveServer, action: str) -> None:
    """An operator logs in to the console and switches MCP with the server-state action."""
    with httpx.Client(base_url=server.base, follow_redirects=True) as browser:
        login = browser.get("/console/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        browser.post(
            "/console/login/",
            data={"csrfmiddlewaretoken": token, "username": "live", "password": "live-operator-password-1"},
        )
        page = browser.get("/console/access/serverstate/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        done = browser.post(
            "/console/access/serverstate/",
            data={"csrfmiddlewaretoken": token, "action": action, "_selected_action": ["1"]},
        )
        assert "MCP switched" in done.text, done.text[-2000:]


async def test_an_open_session_stream_is_told_when_mcp_is_switched_off_in_the_console(forge_server, project):
    changed, on_message = list_changed_watcher()
    try:
        with anyio.fail_after(BOUND):
            async with streamable_client(forge_server, mode="legacy", message_handler=on_message) as client:
                await client.call_tool("session.status", {})
                await anyio.to_thread.run_sync(console_switch, forge_server, "switch_off")
                await changed.wait()
                tools = [tool.name for tool in (await client.list_tools()).tools]
    finally:
        await operator(forge_server, "mcp_switch", "on")

    assert tools == ["server_info", "session.status"]


@pytest.mark.scaleout
@pytest.mark.skipif(not scaleout_configured(), reason="another process reaches the server's streams only through Redis")
async def test_an_open_session_stream_is_told_when_another_process_switches_mcp_off(forge_server, project):
    changed, on_message = list_changed_watcher()
    try:
        # The bounds are the server's: the operator's command is another process, started under its own bound
        # (`LiveServer.manage`), which on a loaded machine took most of one bound for both just to start Django.
        async with streamable_client(forge_server, mode="legacy", message_handler=on_message) as client:
            with anyio.fail_after(BOUND):
                await client.call_tool("session.status", {})
            await operator(forge_server, "mcp_switch", "off")
            with anyio.fail_after(BOUND):
                await changed.wait()
    finally:
        await operator(forge_server, "mcp_switch", "on")
