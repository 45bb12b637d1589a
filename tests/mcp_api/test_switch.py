"""Gate 1, the master switch: off on a fresh install; while off only server_info and session.status
answer, and every other call is refused with FORGE_ERR_MCP_DISABLED; flipping it tells open streams."""

from __future__ import annotations

import io

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from access.hotpath import mcp_enabled
from access.services import do_switch_mcp
from audit.models import AuditEvent, EventKind
from tests.mcp_api.helpers import initialize_message, mcp_headers, open_session, open_stream, post, rpc

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def structured(response) -> dict:
    return response.json()["result"]["structuredContent"]


async def switch(enabled: bool) -> None:
    await database_sync_to_async(do_switch_mcp)(enabled, acting_user="olivia")


async def test_a_fresh_install_has_mcp_switched_off(cast):
    assert await database_sync_to_async(mcp_enabled)() is False


async def test_while_off_tools_list_offers_only_server_info_and_session_status(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("tools/list"), session_id=session_id)

    assert [tool["name"] for tool in response.json()["result"]["tools"]] == ["server_info", "session.status"]


async def test_while_off_a_project_tool_is_refused_with_mcp_disabled_and_audited(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("tools/call", {"name": "project.list"}), session_id=session_id)

    result = response.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "FORGE_ERR_MCP_DISABLED"
    assert "console" in result["structuredContent"]["message"]
    refused = await database_sync_to_async(lambda: list(AuditEvent.objects.filter(tool="project.list")))()
    assert [event.outcome for event in refused] == ["mcp_disabled"]


async def test_while_off_server_info_and_session_status_say_so_and_what_to_do(cast):
    session_id = await open_session(cast.operator.raw_token)

    info = await post(cast.operator.raw_token, rpc("tools/call", {"name": "server_info"}), session_id=session_id)
    status = await post(cast.operator.raw_token, rpc("tools/call", {"name": "session.status"}), session_id=session_id)

    assert structured(info)["mcp_enabled"] is False
    assert structured(status)["mcp_enabled"] is False
    assert "switch it on" in structured(status)["what_to_do"]


async def test_while_off_initialize_still_works_and_its_instructions_say_mcp_is_off(cast):
    response = await post(cast.operator.raw_token, initialize_message())

    assert response.status == 200
    assert "SWITCHED OFF" in response.json()["result"]["instructions"]


async def test_switched_on_project_tools_answer(cast):
    await switch(True)
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("tools/call", {"name": "project.list"}), session_id=session_id)

    assert response.json()["result"]["isError"] is False
    assert (
        len((await post(cast.operator.raw_token, rpc("tools/list"), session_id=session_id)).json()["result"]["tools"])
        > 2
    )


async def test_switching_is_audited_with_the_deciding_user_and_a_repeat_records_nothing(cast):
    await switch(True)
    await switch(True)
    await switch(False)

    events = await database_sync_to_async(lambda: list(AuditEvent.objects.filter(kind=EventKind.MCP_SWITCHED)))()
    assert [(event.outcome, event.called_by) for event in events] == [("on", "olivia"), ("off", "olivia")]


async def test_switching_tells_an_open_stream_its_tool_list_changed(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)
    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()

        await switch(True)

        event = await stream.next_event()
    assert event.json()["method"] == "notifications/tools/list_changed"


@pytest.mark.django_db
def test_mcp_switch_command_turns_it_on_and_off_and_reports(cast):
    out = io.StringIO()

    call_command("mcp_switch", "on", stdout=out)
    call_command("mcp_switch", "on", stdout=out)
    call_command("mcp_switch", "off", stdout=out)

    assert out.getvalue().splitlines() == ["MCP is on.", "MCP was already on.", "MCP is on.", "MCP is off."]


@pytest.mark.django_db
def test_an_operator_switches_mcp_on_from_the_console(cast, client):
    client.force_login(cast.operator.user)

    response = client.post(
        "/console/access/serverstate/",
        {"action": "switch_on", "_selected_action": ["1"]},
        follow=True,
    )

    assert mcp_enabled() is True
    assert "MCP switched on." in response.content.decode()
    assert AuditEvent.objects.filter(kind=EventKind.MCP_SWITCHED, called_by="olivia").count() == 1
