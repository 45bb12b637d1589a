"""Shell actions reach open streams on the embedded default (no REDIS_URL): `manage.py mcp_switch off` run in
another process tells an open stream its tool list changed, `manage.py revoke_token` closes the revoked
token's open stream, each within a few seconds, and `manage.py access_requests revoke` answers the write call
waiting on the grant's pending confirmation with its cancellation, all through the outbox the server follows.
The server keeps the default re-check of five minutes and the default wait of a write call, so only the
outbox can explain a stream hearing of it in time.

A server of its own (its own data folder, an override deployment): switching MCP off must not disturb the
other live tests.
"""

from __future__ import annotations

import json
import uuid

import anyio
import httpx
import pytest

from tests.e2e.test_confirmations_sdk import ADD, PROJECT_FILE, SLUG, granted, structured
from tests.live import TOOLS_LIST, manage, open_raw_session, prepare, run_server, scaleout_configured, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 5  # seconds from the shell command's end to what the stream shows


@pytest.fixture(scope="module")
def shell_server(tmp_path_factory):
    if scaleout_configured():
        pytest.skip("with REDIS_URL the shell's channel-layer send reaches the stream directly (test_scaleout)")
    data_dir = tmp_path_factory.mktemp("shell")
    env, token = prepare(data_dir, FORGE_OVERRIDE_SECURITIES="1", FORGE_CONFIRM_PROGRESS_SECONDS="0.2")
    manage(env, "import_project", str(PROJECT_FILE), "--slug", SLUG)
    with run_server(env, token, data_dir) as server:
        yield server


async def shell(server, *args: str) -> str:
    return await anyio.to_thread.run_sync(server.manage, *args)


async def test_mcp_switched_off_from_a_shell_tells_an_open_stream_its_tools_changed(shell_server):
    async with httpx.AsyncClient(base_url=shell_server.base, timeout=30.0) as http:
        session = await open_raw_session(http, shell_server.token)
        try:
            async with http.stream("GET", "/mcp", headers={**session, "Accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                lines = stream.aiter_lines()
                assert (await anext(lines)).startswith(": open")
                assert "MCP is off." in await shell(shell_server, "mcp_switch", "off")
                with anyio.fail_after(BOUND):
                    async for line in lines:
                        if line.startswith("data: "):
                            break
                assert json.loads(line.removeprefix("data: ")) == {
                    "jsonrpc": "2.0",
                    "method": "notifications/tools/list_changed",
                }
        finally:
            await shell(shell_server, "mcp_switch", "on")


async def test_a_token_revoked_from_a_shell_has_its_open_stream_closed(shell_server):
    label = f"revoked-{uuid.uuid4().hex[:12]}"
    token = await anyio.to_thread.run_sync(shell_server.new_token, label)
    async with httpx.AsyncClient(base_url=shell_server.base, timeout=30.0) as http:
        session = await open_raw_session(http, token)
        async with http.stream("GET", "/mcp", headers={**session, "Accept": "text/event-stream"}) as stream:
            assert stream.status_code == 200
            chunks = stream.aiter_bytes()
            assert (await anext(chunks)).startswith(b": open")
            assert "Revoked token" in await shell(shell_server, "revoke_token", "--label", label)
            with anyio.fail_after(BOUND):
                rest = b"".join([chunk async for chunk in chunks])
        assert b"data:" not in rest  # closed without a word: the token is no longer good for anything
        assert (await http.post("/mcp", headers=session, json=TOOLS_LIST)).status_code == 401


async def test_a_grant_revoked_from_a_shell_answers_the_write_call_waiting_on_it(shell_server):
    revoked = anyio.Event()

    async def revoke_on_first_progress(value: float, total: float | None, message: str | None) -> None:
        if revoked.is_set():
            return
        revoked.set()
        listing = await shell(shell_server, "access_requests", "list")
        allowed = [line.split()[0] for line in listing.splitlines() if line.split()[1:3] == ["allowed", SLUG]]
        await shell(shell_server, "access_requests", "revoke", *allowed, "--as", "live")

    with anyio.fail_after(60):
        async with streamable_client(shell_server, mode="legacy") as client:
            await granted(client, shell_server)
            answer = await structured(
                client,
                "project.write.add_variable",
                {**ADD, "name": "Cancelled"},
                progress_callback=revoke_on_first_progress,
            )

    assert revoked.is_set()
    assert (answer["error"], answer["cause"]) == ("FORGE_ERR_CONFIRMATION_CANCELLED", "grant_revoked"), answer
