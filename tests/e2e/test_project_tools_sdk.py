"""The project read tools end to end: the main fixture project registered with `manage.py import_project`
in the live server's environment, read through the official `mcp` SDK client over Streamable HTTP (a
handshake session, mode="legacy") and at the stateless revision 2026-07-28, following every cursor and
offset."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from mcp_api.jsonrpc import INVALID_PARAMS
from tests.live import LiveServer, streamable_client
from tests.projects.conftest import MAIN, fixture_path

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 20  # seconds for one whole client conversation on loopback
PROJECT_FILE = fixture_path(MAIN)  # 44,053 characters: two export chunks
SLUG = "sdk-dosing-line"
EXPORT_CHUNK = 32_000


@pytest.fixture(scope="module")
def steps(forge_server: LiveServer) -> str:
    """The main fixture project, registered once for this module on the session's live server."""
    forge_server.manage("import_project", str(PROJECT_FILE), "--slug", SLUG)
    return SLUG


_handles: dict[str, str] = {}


async def granted(client: Client, forge_server: LiveServer, project: str) -> dict[str, Any]:
    """Ask for access as a client does, and allow it as an operator does (from a shell, by command)."""
    asked = await client.call_tool("session.request_access", {"project": project, **_handle(client, project)})
    state = asked.structured_content
    if state["state"] == "pending":
        await anyio.to_thread.run_sync(forge_server.manage, "access_requests", "allow", "--pending", "--as", "live")
    if "session_handle" in state:
        _handles[project] = state["session_handle"]
    return _handle(client, project)


def _handle(client: Client, project: str) -> dict[str, Any]:
    stateless = client.protocol_version == "2026-07-28"
    return {"session_handle": _handles[project]} if stateless and project in _handles else {}


async def answer(
    client: Client, tool: str, arguments: dict[str, Any], server: LiveServer | None = None
) -> dict[str, Any]:
    """A call that must succeed; the first project call of a session is granted first."""
    if "project" in arguments and tool != "project.list":
        arguments = {**arguments, **await granted(client, server or _server, arguments["project"])}
    result = await client.call_tool(tool, arguments)
    assert result.is_error is False, result.structured_content
    return result.structured_content


_server: LiveServer


@pytest.fixture(autouse=True)
def _remember_server(forge_server: LiveServer) -> None:
    global _server
    _server = forge_server


async def test_project_list_over_streamable_http_names_the_imported_project(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            listing = await answer(client, "project.list", {})

    assert {"project": steps, "name": "Dosing Line"} in listing["projects"]


async def test_overview_over_streamable_http_frames_the_accepted_revision(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            overview = await answer(client, "project.overview", {"project": steps})

    assert (overview["view"], overview["project"], overview["accepted_revision"]) == ("accepted", steps, 1)
    assert overview["counts"]["pous"] == 7


async def test_overview_at_2026_07_28_frames_the_accepted_revision(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            overview = await answer(client, "project.overview", {"project": steps})

    assert (overview["view"], overview["project"], overview["accepted_revision"]) == ("accepted", steps, 1)
    assert overview["name"] == "Dosing Line"


async def test_find_at_2026_07_28_follows_next_cursor_to_every_element_once(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="2026-07-28") as client:
            whole = await answer(client, "project.find", {"project": steps, "limit": 200})
            pages = [await answer(client, "project.find", {"project": steps, "limit": 20})]
            while pages[-1]["next_cursor"] is not None:
                pages.append(
                    await answer(
                        client, "project.find", {"project": steps, "limit": 20, "cursor": pages[-1]["next_cursor"]}
                    )
                )

    visited = [item["id"] for page in pages for item in page["items"]]
    assert [len(page["items"]) for page in pages] == [20, 20, 13]
    assert visited == [item["id"] for item in whole["items"]]
    assert len(set(visited)) == 53


async def test_find_over_streamable_http_follows_next_cursor_to_every_element_once(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            pages = [await answer(client, "project.find", {"project": steps, "text": "clear", "limit": 3})]
            while pages[-1]["next_cursor"] is not None:
                arguments = {"project": steps, "text": "clear", "limit": 3, "cursor": pages[-1]["next_cursor"]}
                pages.append(await answer(client, "project.find", arguments))
            whole = await answer(client, "project.find", {"project": steps, "text": "clear", "limit": 200})

    visited = [item["id"] for page in pages for item in page["items"]]
    assert len(pages) > 2
    assert visited == [item["id"] for item in whole["items"]]
    assert len(visited) == len(set(visited))


async def test_get_element_over_streamable_http_continues_the_body_with_next_cursor(forge_server, steps):
    arguments = {"project": steps, "element_id": "pou/FlowTotal", "body_limit": 30}
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            bodies = [(await answer(client, "project.get_element", arguments))["body"]]
            while bodies[-1]["next_cursor"] is not None:
                reply = await answer(client, "project.get_element", {**arguments, "cursor": bodies[-1]["next_cursor"]})
                bodies.append(reply["body"])

    text = "".join(body["text"] for body in bodies)
    assert [body["offset"] for body in bodies] == list(range(0, 230, 30))
    assert len(text) == bodies[0]["total_chars"] == 230
    assert text.startswith("(* The flow meter gives") and text.endswith("Litres := Pulses / PulsesPerLitre;")


async def test_list_variables_over_streamable_http_pages_a_scope_with_next_cursor(forge_server, steps):
    arguments = {"project": steps, "scope": "pou/LineMain", "limit": 5}
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            pages = [await answer(client, "project.list_variables", arguments)]
            while pages[-1]["next_cursor"] is not None:
                pages.append(
                    await answer(client, "project.list_variables", {**arguments, "cursor": pages[-1]["next_cursor"]})
                )

    visited = [item["id"] for page in pages for item in page["items"]]
    assert [len(page["items"]) for page in pages] == [5, 5, 3]
    assert len(set(visited)) == 13
    assert all(item_id.startswith("pou/LineMain/var/") for item_id in visited)


async def test_check_over_streamable_http_reports_a_clean_fixture(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            check = await answer(client, "project.check", {"project": steps, "limit": 200})

    assert (check["view"], check["project"]) == ("accepted", steps)
    assert check["counts"] == {"problem": 0, "advisory": 0}
    assert "next_offset" not in check


async def test_export_over_streamable_http_follows_next_offset_to_the_exact_file(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            chunks = [await answer(client, "project.export", {"project": steps})]
            while "next_offset" in chunks[-1]:
                chunks.append(
                    await answer(client, "project.export", {"project": steps, "offset": chunks[-1]["next_offset"]})
                )

    assert [chunk["offset"] for chunk in chunks] == [0, EXPORT_CHUNK]
    assert "".join(chunk["xml"] for chunk in chunks).encode("utf-8") == PROJECT_FILE.read_bytes()


async def test_suggest_placement_over_streamable_http_ranks_the_matching_pou_first(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            placement = await answer(
                client, "project.suggest_placement", {"project": steps, "topic": "dosed volume in percent"}
            )

    assert placement["suggestions"][0]["id"] == "pou/FillPercent"


async def test_a_limit_over_200_over_streamable_http_is_invalid_params(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("project.find", {"project": steps, "limit": 201})

    assert raised.value.code == INVALID_PARAMS


async def test_a_bad_cursor_at_2026_07_28_is_invalid_params(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="2026-07-28") as client:
            handle = await granted(client, forge_server, steps)
            with pytest.raises(MCPError) as raised:
                await client.call_tool("project.find", {"project": steps, "cursor": "!!bad", **handle})

    assert raised.value.code == INVALID_PARAMS
    assert "cursor" in raised.value.message


async def test_an_unknown_project_over_streamable_http_is_a_not_found_tool_error(forge_server, steps):
    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy") as client:
            result = await client.call_tool("project.overview", {"project": "sdk-nowhere"})

    assert result.is_error is True
    assert result.structured_content["error"] == "FORGE_ERR_NOT_FOUND"
