"""MCP logging in-process: the capability where the revision has it, `logging/setLevel` stored on the session
(audited, an invalid level refused with the valid ones), and `notifications/message` for the session's own
calls at or above its level: before the answer on the call's own event stream, or on the session's stream
for a client that takes JSON only, or on the legacy /sse stream; none before a level is set, none at
2026-07-28."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async

from access.models import McpSession
from audit.models import AuditEvent, EventKind
from confirmations.models import PendingConfirmation
from confirmations.services import do_deny_confirmation
from forge_core.errors import Refusal
from mcp_api import logging as client_logging
from mcp_api.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_api.protocol import CallContext
from mcp_api.registry import Arguments, Tool
from mcp_api.tools.writes import register_write_tools, unregister_write_tools
from projects.services import do_import_project
from tests.mcp_api.helpers import (
    initialize_message,
    mcp_headers,
    mcp_session,
    notification,
    open_session,
    open_stream,
    post,
    registered,
    rpc,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.mcp_api.test_resources import _allow
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]


class Greeting(Arguments):
    name: str
    secret_word: str = ""


def _refusing(ctx: Any, args: Greeting) -> dict[str, Any]:
    raise Refusal("FORGE_ERR_TEST_REFUSED", "Refused for the test: ask again with another name.")


def _logging_fixture(ctx: Any, args: Greeting) -> dict[str, Any]:
    for level in client_logging.LEVELS:
        client_logging.emit(ctx, level, "fixture", {"said": level})
    return {"greeting": f"hello {args.name}"}


REFUSING = Tool(name="test.refusing", title="Refusing", description="Refuses.", arguments=Greeting, handler=_refusing)
EVERY_LEVEL = Tool(
    name="test.every_level",
    title="Logs",
    description="Logs at each level.",
    arguments=Greeting,
    handler=_logging_fixture,
)


async def set_level(token: str, session_id: str, level: Any) -> dict[str, Any]:
    response = await post(token, rpc("logging/setLevel", {"level": level}, id=5), session_id=session_id)
    assert response.status == 200, response.body
    return response.json()


def sse_messages(body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE answer, in order."""
    return [json.loads(line.removeprefix("data: ")) for line in body.decode().split("\n") if line.startswith("data: ")]


def log_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/message"]


async def session_at(token: str, level: str) -> str:
    """A new session of the token that asked for `level`."""
    session_id = await open_session(token)
    await set_level(token, session_id, level)
    return session_id


async def call(token: str, session_id: str, name: str, arguments: dict[str, Any], **options: Any):
    return await post(
        token, rpc("tools/call", {"name": name, "arguments": arguments}, id=9), session_id=session_id, **options
    )


@database_sync_to_async
def set_level_rows() -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool="logging/setLevel")
    return [(row.outcome, row.arguments["level"]) for row in rows]


# --- the capability and the method ---------------------------------------------------------------------


@pytest.mark.parametrize("revision", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
async def test_initialize_declares_logging_at_every_handshake_revision(cast, revision):
    response = await post(cast.operator.raw_token, initialize_message(revision))

    assert response.json()["result"]["capabilities"]["logging"] == {}


async def test_2026_07_28_neither_declares_logging_nor_offers_set_level(cast):
    token = cast.operator.raw_token
    discovered = await send(
        "POST", "/mcp", headers=stateless_headers(token, "server/discover"), body=stateless_rpc("server/discover")
    )
    set_level = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "logging/setLevel"),
        body=stateless_rpc("logging/setLevel", {"level": "debug"}),
    )

    assert "logging" not in discovered.json()["result"]["capabilities"]
    assert set_level.status == 404
    assert set_level.error_code == METHOD_NOT_FOUND


async def test_set_level_stores_the_level_on_the_session_and_is_audited(cast):
    session_id = await open_session(cast.operator.raw_token)

    answered = await set_level(cast.operator.raw_token, session_id, "warning")

    assert answered["result"] == {}
    assert (await mcp_session(session_id)).log_level == "warning"
    assert await set_level_rows() == [("ok", "warning")]


@pytest.mark.parametrize("level", ["banana", "WARNING", "", None, 3, ["debug"], {"level": "debug"}])
async def test_an_invalid_level_is_invalid_params_naming_the_valid_ones_and_changes_nothing(cast, level):
    session_id = await open_session(cast.operator.raw_token)
    await set_level(cast.operator.raw_token, session_id, "error")

    answered = await set_level(cast.operator.raw_token, session_id, level)

    assert answered["error"]["code"] == INVALID_PARAMS
    assert "debug, info, notice, warning, error, critical, alert, emergency" in answered["error"]["message"]
    assert answered["error"]["data"] == {"levels": list(client_logging.LEVELS)}
    assert (await mcp_session(session_id)).log_level == "error"
    assert (await set_level_rows())[-1][0] == "invalid_params"


# --- messages on the call's own stream ---------------------------------------------------------------------


async def test_no_log_message_before_the_client_sets_a_level(cast):
    session_id = await open_session(cast.operator.raw_token)

    with registered(EVERY_LEVEL):
        response = await call(cast.operator.raw_token, session_id, "test.every_level", {"name": "ada"})

    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["structuredContent"] == {"greeting": "hello ada"}


async def test_messages_at_or_above_the_level_come_before_the_answer_on_its_event_stream(cast):
    token = cast.operator.raw_token
    session_id = await session_at(token, "error")

    with registered(EVERY_LEVEL):
        response = await call(token, session_id, "test.every_level", {"name": "ada"})

    assert response.headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(response.body)
    assert [m["level"] for m in log_messages(messages)] == ["error", "critical", "alert", "emergency"]
    assert all(m["logger"] == "fixture" for m in log_messages(messages))
    assert messages[-1]["id"] == 9
    assert messages[-1]["result"]["structuredContent"] == {"greeting": "hello ada"}


async def test_a_tool_call_is_logged_at_debug_with_its_argument_names_never_their_values(cast):
    token = cast.operator.raw_token
    session_id = await session_at(token, "debug")

    response = await call(token, session_id, "server_info", {})
    with registered(REFUSING):
        refused = await call(token, session_id, "test.refusing", {"name": "ada", "secret_word": "swordfish"})

    started, answered = log_messages(sse_messages(response.body))
    assert (started["level"], started["logger"], started["data"]["tool"]) == ("debug", "forge.tools", "server_info")
    assert (answered["level"], answered["data"]["outcome"]) == ("info", "ok")
    debug, warning = log_messages(sse_messages(refused.body))
    assert debug["data"]["arguments"] == ["name", "secret_word"]
    assert "swordfish" not in refused.body.decode().split('"result"')[0]
    assert warning["level"] == "warning"
    assert warning["data"]["code"] == "FORGE_ERR_TEST_REFUSED"
    assert warning["data"]["message"] == "Refused for the test: ask again with another name."


async def test_a_refusal_is_not_heard_by_a_session_that_asked_for_errors_only(cast):
    token = cast.operator.raw_token
    session_id = await session_at(token, "error")

    with registered(REFUSING):
        refused = await call(token, session_id, "test.refusing", {"name": "ada"})

    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["result"]["isError"] is True


async def test_invalid_arguments_and_an_unknown_tool_are_warnings(cast):
    token = cast.operator.raw_token
    session_id = await session_at(token, "warning")

    with registered(REFUSING):
        invalid = await call(token, session_id, "test.refusing", {"nom": "ada"})
    unknown = await call(token, session_id, "no.such_tool", {})

    [invalid_warning] = log_messages(sse_messages(invalid.body))
    [unknown_warning] = log_messages(sse_messages(unknown.body))
    assert invalid_warning["data"]["outcome"] == "invalid_params"
    assert sse_messages(invalid.body)[-1]["error"]["code"] == INVALID_PARAMS
    assert unknown_warning["data"]["outcome"] == "unknown_tool"


async def test_the_level_is_read_from_the_session_row_whichever_process_stored_it(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)
    # Another process stored it: only the row says so.
    await database_sync_to_async(McpSession.objects.filter(pk=session_id).update)(log_level="info")

    response = await call(token, session_id, "server_info", {})

    assert [m["level"] for m in log_messages(sse_messages(response.body))] == ["info"]


async def test_another_sessions_level_and_calls_are_not_this_sessions(cast):
    token = cast.operator.raw_token
    listening, quiet = await open_session(token), await open_session(token)
    await set_level(token, listening, "debug")

    response = await call(token, quiet, "server_info", {})

    assert response.headers["content-type"] == "application/json"


ADD_EXTRA = {"project": "steps", "scope": "pou/LineMain", "section": "localVars", "name": "Extra", "type": "INT"}


@pytest.fixture
def writes(settings, root) -> Iterator[None]:
    """An override deployment (the write tools registered) with the main fixture project as `steps`."""
    settings.FORGE_OVERRIDE_SECURITIES = True
    do_import_project(fixture_bytes(MAIN), slug="steps", acting_user="tests")
    register_write_tools()
    yield
    unregister_write_tools()


async def allowed_session_at(token: str, level: str) -> str:
    session_id = await session_at(token, level)
    await database_sync_to_async(_allow)(session_id, "steps")
    return session_id


@pytest.mark.usefixtures("writes")
async def test_a_write_waiting_for_an_operator_is_one_notice_naming_its_confirmation(cast):
    token = cast.operator.raw_token
    session_id = await allowed_session_at(token, "notice")

    response = await call(token, session_id, "project.write.add_variable", ADD_EXTRA)

    [notice] = log_messages(sse_messages(response.body))  # no warning besides: the notice says it all
    answer = sse_messages(response.body)[-1]["result"]["structuredContent"]
    assert answer["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert (notice["level"], notice["data"]["confirmation"]) == ("notice", answer["pending_id"])


@pytest.mark.usefixtures("writes")
async def test_a_write_waiting_on_its_stream_logs_the_decision_before_the_outcome(cast, settings):
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    token = cast.operator.raw_token
    session_id = await allowed_session_at(token, "info")
    params = {"name": "project.write.add_variable", "arguments": ADD_EXTRA, "_meta": {"progressToken": "p"}}

    headers = mcp_headers(token, session_id=session_id)
    async with open_stream("POST", "/mcp", headers=headers, body=rpc("tools/call", params, id=7)) as stream:
        events = [(await stream.next_event()).json()]
        pending = await database_sync_to_async(PendingConfirmation.objects.get)()
        await database_sync_to_async(do_deny_confirmation)(str(pending.id), acting_user=cast.operator.user)
        events += [event.json() for event in await stream.until_closed()]

    logged = [(m["level"], m["data"].get("outcome")) for m in log_messages(events)]
    assert logged[0] == ("notice", None)
    assert logged[-1] == ("info", "FORGE_ERR_CONFIRMATION_DENIED")
    assert events[-1]["id"] == 7
    assert events[-1]["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_DENIED"


# --- messages elsewhere ------------------------------------------------------------------------------------


async def test_a_client_that_takes_json_only_hears_the_messages_on_its_session_stream(cast):
    token = cast.operator.raw_token
    session_id = await session_at(token, "info")

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        response = await call(token, session_id, "server_info", {}, accept="application/json")
        event = await stream.next_event()

    assert response.headers["content-type"] == "application/json"
    assert event.json()["method"] == "notifications/message"
    assert event.json()["params"]["data"]["tool"] == "server_info"


async def test_a_batch_is_answered_as_json_and_its_messages_go_to_the_session_stream(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token, "2025-03-26")
    await set_level(token, session_id, "info")

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        batch = [rpc("tools/call", {"name": "server_info", "arguments": {}}, id=n) for n in (1, 2)]
        response = await post(token, batch, session_id=session_id)
        events = [(await stream.next_event()).json() for _ in batch]

    assert [answer["id"] for answer in response.json()] == [1, 2]
    assert [event["params"]["level"] for event in events] == ["info", "info"]


async def test_the_legacy_transport_sends_the_messages_before_the_answers_on_its_stream(cast):
    token = cast.operator.raw_token
    async with open_stream("GET", "/sse", headers=mcp_headers(token, accept="text/event-stream")) as stream:
        endpoint = (await stream.next_event()).data
        headers = mcp_headers(token)

        async def message(body: dict[str, Any]) -> None:
            response = await send("POST", endpoint, headers=headers, body=body)
            assert response.status == 202, response.body

        await message(initialize_message("2024-11-05"))
        await stream.next_event()
        await message(notification("notifications/initialized"))
        await message(rpc("logging/setLevel", {"level": "info"}, id=2))
        assert (await stream.next_event()).json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        await message(rpc("tools/call", {"name": "server_info", "arguments": {}}, id=3))
        logged, answered = (await stream.next_event()).json(), (await stream.next_event()).json()
        await message([rpc("tools/call", {"name": "server_info", "arguments": {}}, id=4)])
        batch_logged, batch_answered = (await stream.next_event()).json(), (await stream.next_event()).json()

    assert (logged["method"], logged["params"]["level"]) == ("notifications/message", "info")
    assert answered["id"] == 3
    assert (batch_logged["method"], batch_answered["id"]) == ("notifications/message", 4)


# --- emit, for tool handlers ---------------------------------------------------------------------------------


def test_emit_refuses_a_level_that_is_not_one_and_data_that_is_not_json(cast):
    quiet = CallContext(token=cast.operator.token, revision="2025-11-25", transport="streamable_http")
    session = McpSession(id="s", token=cast.operator.token, log_level="info")
    listening = CallContext(
        token=cast.operator.token, revision="2025-11-25", transport="streamable_http", session=session
    )

    with pytest.raises(ValueError, match="not an MCP log level"):
        client_logging.emit(quiet, "verbose", None, "x")  # whoever listens
    with pytest.raises(ValueError, match="JSON value"):
        client_logging.emit(listening, "info", None, {"when": object()})
    assert client_logging.emit(listening, "debug", None, {"when": object()}) is False  # not built: nobody hears it
    assert listening.messages == []


def test_emit_queues_nothing_without_a_session_or_at_2026_07_28(cast):
    session = McpSession(id="s", token=cast.operator.token, log_level="debug")
    stateless = CallContext(
        token=cast.operator.token, revision="2026-07-28", transport="streamable_http", session=session
    )
    sessionless = CallContext(token=cast.operator.token, revision="2025-11-25", transport="streamable_http")
    with_session = CallContext(
        token=cast.operator.token, revision="2025-11-25", transport="streamable_http", session=session
    )

    assert client_logging.emit(stateless, "emergency", None, "x") is False
    assert client_logging.emit(sessionless, "emergency", None, "x") is False
    assert client_logging.emit(with_session, "debug", "forge.test", {"n": 1}) is True
    assert stateless.messages == sessionless.messages == []
    assert with_session.messages == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "debug", "data": {"n": 1}, "logger": "forge.test"},
        }
    ]
