"""Revoking a client token: its next request is refused and its open streams end.

The revocation runs in another process (`manage.py shell`), as an operator's would. With the embedded
in-memory channel layer that process cannot reach the server's streams itself; a `manage.py` command
goes through the outbox the server follows (tests/e2e/test_shell_actions.py), but these tests take that
path away, so that a stream can learn of it only from its periodic re-check of the token, the backstop:
`rechecking_server` re-checks every half second. With REDIS_URL set, the revocation's channel-layer event
reaches the stream directly.
"""

from __future__ import annotations

import uuid

import anyio
import httpx
import pytest

from tests.live import ACCEPT_BOTH, INITIALIZE, TOOLS_LIST, bearer, open_raw_session, run_server, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

STREAM_END_BOUND = 10  # seconds from the revocation to the end of the stream


@pytest.fixture(scope="module")
def rechecking_server(forge_server):
    """A second server on the shared server's data, whose streams re-check their token every 0.5 s."""
    env = {**forge_server.env, "FORGE_STREAM_RECHECK_SECONDS": "0.5", "FORGE_SSE_KEEPALIVE_SECONDS": "0.25"}
    with run_server(env, forge_server.token, forge_server.data_dir) as server:
        yield server


def fresh_token(server) -> tuple[str, str]:
    label = f"revoked-{uuid.uuid4().hex[:12]}"
    return label, server.new_token(label)


async def revoke(server, label: str) -> None:
    code = (
        "from forge_core.live import mark_outside_server; mark_outside_server(False); "  # no outbox: re-check only
        "from access.models import ClientToken; from access.services import do_revoke_token; "
        f"do_revoke_token(ClientToken.objects.get(label={label!r}), acting_user='test')"
    )
    await anyio.to_thread.run_sync(server.manage, "shell", "-c", code)


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert response.json()["error"]["code"] == -32600


async def test_revoked_token_is_refused_on_its_next_request(forge_server):
    label, token = await anyio.to_thread.run_sync(fresh_token, forge_server)
    async with httpx.AsyncClient(base_url=forge_server.base, timeout=10.0) as http:
        session = await open_raw_session(http, token)
        assert (await http.post("/mcp", headers=session, json=TOOLS_LIST)).status_code == 200
        await revoke(forge_server, label)
        assert_unauthorized(await http.post("/mcp", headers=session, json=TOOLS_LIST))
        assert_unauthorized(await http.post("/mcp", headers={**bearer(token), "Accept": ACCEPT_BOTH}, json=INITIALIZE))


async def test_open_streamable_http_stream_of_a_revoked_token_ends(forge_server, rechecking_server):
    label, token = await anyio.to_thread.run_sync(fresh_token, forge_server)
    async with httpx.AsyncClient(base_url=rechecking_server.base, timeout=10.0) as http:
        session = await open_raw_session(http, token)
        async with http.stream("GET", "/mcp", headers={**session, "Accept": "text/event-stream"}) as stream:
            assert stream.status_code == 200
            chunks = stream.aiter_bytes()
            assert (await anext(chunks)).startswith(b": open")
            await revoke(forge_server, label)
            with anyio.fail_after(STREAM_END_BOUND):
                async for _ in chunks:
                    pass
        assert_unauthorized(await http.post("/mcp", headers=session, json=TOOLS_LIST))


async def test_open_legacy_sse_stream_of_a_revoked_token_ends(forge_server, rechecking_server):
    label, token = await anyio.to_thread.run_sync(fresh_token, forge_server)
    async with httpx.AsyncClient(base_url=rechecking_server.base, timeout=10.0) as http:
        headers = {**bearer(token), "Accept": "text/event-stream"}
        async with http.stream("GET", "/sse", headers=headers) as stream:
            assert stream.status_code == 200
            chunks = stream.aiter_bytes()
            first = await anext(chunks)
            assert first.startswith(b"event: endpoint")
            endpoint = first.decode().split("data: ", 1)[1].strip()
            await revoke(forge_server, label)
            with anyio.fail_after(STREAM_END_BOUND):
                async for _ in chunks:
                    pass
        assert_unauthorized(await http.post(endpoint, headers=bearer(token), json=INITIALIZE))


async def test_listen_stream_of_a_revoked_token_closes_gracefully(forge_server, rechecking_server):
    label, token = await anyio.to_thread.run_sync(fresh_token, forge_server)
    async with (
        streamable_client(rechecking_server, mode="2026-07-28", token=token) as client,
        client.listen(tools_list_changed=True) as subscription,
    ):
        await revoke(forge_server, label)
        with anyio.fail_after(STREAM_END_BOUND):
            events = [event async for event in subscription]  # ends without SubscriptionLost
    assert events == []
