"""Per-token caps on the wire: an initialize past FORGE_MAX_SESSIONS_PER_TOKEN, or a stream past FORGE_MAX_STREAMS_PER_TOKEN, is answered 429 with a JSON-RPC
error naming the cap (not an internal error), and a direct write past FORGE_MAX_PENDING_PER_TOKEN is an isError
tool result; neither creates anything, and both are audited."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from channels.db import database_sync_to_async

from access.models import McpSession, OpenStream
from audit.models import AuditEvent, EventKind
from confirmations.models import PendingConfirmation
from mcp_api.jsonrpc import REFUSED
from mcp_api.tools.writes import register_write_tools, unregister_write_tools
from projects.models import Project
from projects.services import do_import_project
from tests.mcp_api.helpers import (
    allow_project,
    initialize_message,
    mcp_headers,
    open_session,
    open_stream,
    post,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

ADD = {"scope": "pou/LineMain", "section": "localVars", "type": "INT"}


@pytest.fixture
def override(settings, root: Path) -> Iterator[None]:
    settings.FORGE_OVERRIDE_SECURITIES = True
    register_write_tools()
    yield
    unregister_write_tools()


@pytest.fixture
def steps(transactional_db, root: Path) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug="steps", acting_user="tests")


async def test_an_initialize_past_the_session_cap_is_429_naming_the_cap(cast, settings):
    settings.FORGE_MAX_SESSIONS_PER_TOKEN = 1
    await open_session(cast.caretaker.raw_token)

    response = await post(cast.caretaker.raw_token, initialize_message())

    assert response.status == 429
    error = response.json()["error"]
    assert error["code"] == REFUSED
    assert error["data"]["error"] == "FORGE_ERR_LIMIT_REACHED"
    assert error["data"]["setting"] == "FORGE_MAX_SESSIONS_PER_TOKEN" and error["data"]["limit"] == 1
    assert "FORGE_MAX_SESSIONS_PER_TOKEN" in error["message"] and "mcp-session-id" not in response.headers
    assert await database_sync_to_async(McpSession.objects.count)() == 1
    refused = await database_sync_to_async(list)(AuditEvent.objects.filter(kind=EventKind.REQUEST_REFUSED))
    assert [row.outcome for row in refused] == ["limit_reached"]


@pytest.mark.usefixtures("override")
async def test_a_write_past_the_pending_confirmation_cap_is_refused_naming_the_cap(cast, settings, steps):
    settings.FORGE_MAX_PENDING_PER_TOKEN = 1
    token = cast.operator.raw_token
    handle = await database_sync_to_async(allow_project)(token, "steps")

    async def write(name: str) -> dict:
        tool = "project.write.add_variable"
        arguments = {"project": "steps", "session_handle": handle, "name": name, **ADD}
        body = stateless_rpc("tools/call", {"name": tool, "arguments": arguments})
        response = await send("POST", "/mcp", headers=stateless_headers(token, "tools/call", name=tool), body=body)
        assert response.status == 200, response.body
        return response.json()["result"]

    assert (await write("First"))["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    second = await write("Second")

    assert second["isError"] is True
    assert second["structuredContent"]["error"] == "FORGE_ERR_LIMIT_REACHED"
    assert second["structuredContent"]["setting"] == "FORGE_MAX_PENDING_PER_TOKEN"
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 1
    rows = await database_sync_to_async(list)(AuditEvent.objects.filter(tool="project.write.add_variable"))
    assert rows[-1].outcome == "FORGE_ERR_LIMIT_REACHED"


async def test_a_stream_past_the_stream_cap_is_429_naming_the_cap_and_a_closed_one_makes_room(cast, settings):
    settings.FORGE_MAX_STREAMS_PER_TOKEN = 1
    token = cast.caretaker.raw_token
    headers = mcp_headers(token, session_id=await open_session(token))

    async with open_stream("GET", "/mcp", headers=headers) as first:
        assert first.status == 200
        refused = await send("GET", "/mcp", headers=headers)

        assert refused.status == 429
        error = refused.json()["error"]
        assert (error["code"], error["data"]["error"]) == (REFUSED, "FORGE_ERR_LIMIT_REACHED")
        assert "1 open streams (FORGE_MAX_STREAMS_PER_TOKEN is 1)" in error["message"]
        assert await database_sync_to_async(OpenStream.objects.count)() == 1

    assert await database_sync_to_async(OpenStream.objects.count)() == 0
    async with open_stream("GET", "/mcp", headers=headers) as again:
        assert again.status == 200
