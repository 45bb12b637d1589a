"""A tool that talks with its client while it runs (`mcp_api.dialogue`), through the Streamable HTTP endpoint
in-process: progress on the call's event stream, a request to the client answered by a POST of the session,
and every way such a wait ends (answer, error, deadline, cancellation, the client gone), each audited; where no
stream can carry the conversation the tool is told at once."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest
from channels.db import database_sync_to_async

from audit.models import AuditEvent, EventKind
from mcp_api import dialogue
from mcp_api.registry import NoArguments, Tool
from mcp_api.results import Content
from tests.mcp_api.helpers import (
    CLIENT_INFO,
    EventStream,
    mcp_headers,
    notification,
    open_stream,
    post,
    registered,
    rpc,
    send,
    stateless_headers,
    stateless_rpc,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]


def asking(ctx: Any, arguments: NoArguments) -> Generator[Any, Any, Content]:
    """Asks the client's model one question and answers what it said."""
    yield dialogue.progress(0, 2)
    answer = yield dialogue.create_message(
        [{"role": "user", "content": {"type": "text", "text": "2+2?"}}], max_tokens=5
    )
    yield dialogue.progress(2, 2, "done")
    return Content(({"type": "text", "text": f"model said {answer['content']['text']}"},))


ASKING = Tool("asking", "Asking", "Asks the client.", NoArguments, asking)


async def session_with(token: str, capabilities: dict[str, Any]) -> str:
    initialize = rpc(
        "initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": CLIENT_INFO}, id=0
    )
    response = await post(token, initialize)
    session_id = response.headers["mcp-session-id"]
    assert (await post(token, notification("notifications/initialized"), session_id=session_id)).status == 202
    return session_id


def call(progress: bool = True) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "asking", "arguments": {}}
    if progress:
        params["_meta"] = {"progressToken": "p1"}
    return rpc("tools/call", params, id=7)


def call_stream(token: str, session_id: str, **options: Any) -> Any:
    return open_stream("POST", "/mcp", headers=mcp_headers(token, session_id=session_id), body=call(**options))


async def server_request(stream: EventStream) -> dict[str, Any]:
    while True:
        message = (await stream.next_event()).json()
        if "id" in message and "method" in message:
            return message


@database_sync_to_async
def outcomes() -> list[str]:
    return list(AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool="asking").values_list("outcome", flat=True))


async def test_a_tool_asks_the_client_on_its_stream_and_answers_with_what_the_client_said(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        async with call_stream(token, session_id) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            first = (await stream.next_event()).json()
            assert first["method"] == "notifications/progress" and first["params"]["progress"] == 0
            asked = await server_request(stream)
            assert asked["method"] == "sampling/createMessage" and asked["params"]["maxTokens"] == 5
            # Another session's answer with the same id reaches nothing.
            other = await session_with(token, {"sampling": {}})
            reply = {
                "jsonrpc": "2.0",
                "id": asked["id"],
                "result": {"role": "assistant", "content": {"type": "text", "text": "5"}, "model": "m"},
            }
            assert (await post(token, reply, session_id=other)).status == 202
            # Another client is answered while this call waits: the wait holds no worker.
            assert (await post(token, rpc("ping", id=3), session_id=other)).json()["result"] == {}
            reply["result"]["content"]["text"] = "4"
            assert (await post(token, reply, session_id=session_id)).status == 202
            events = [event.json() for event in await stream.until_closed()]
    assert events[0]["params"] == {"progressToken": "p1", "progress": 2, "total": 2, "message": "done"}
    assert events[-1] == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [{"type": "text", "text": "model said 4"}], "isError": False},
    }
    assert await outcomes() == ["ok"]


async def test_a_client_error_answer_is_a_refusal_inside_the_tool(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        async with call_stream(token, session_id, progress=False) as stream:
            asked = await server_request(stream)
            refusal = {"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -1, "message": "User rejected sampling"}}
            await post(token, refusal, session_id=session_id)
            final = (await stream.until_closed())[-1].json()
    assert final["result"]["isError"] is True
    assert final["result"]["structuredContent"]["error"] == "FORGE_ERR_CLIENT_REFUSED"
    assert "User rejected sampling" in final["result"]["structuredContent"]["message"]
    assert await outcomes() == ["FORGE_ERR_CLIENT_REFUSED"]


async def test_a_request_unanswered_by_the_deadline_is_cancelled_and_the_tool_told(cast, settings):
    settings.FORGE_CLIENT_REQUEST_SECONDS = 0.3
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        async with call_stream(token, session_id, progress=False) as stream:
            asked = await server_request(stream)
            events = [event.json() for event in await stream.until_closed()]
    assert events[0] == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": asked["id"], "reason": "The client did not answer in time."},
    }
    assert events[-1]["result"]["structuredContent"]["error"] == "FORGE_ERR_CLIENT_TIMEOUT"
    assert await outcomes() == ["FORGE_ERR_CLIENT_TIMEOUT"]


async def test_a_client_that_cancels_the_call_gets_no_answer_and_the_call_is_audited_cancelled(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        async with call_stream(token, session_id, progress=False) as stream:
            await server_request(stream)
            cancel = notification("notifications/cancelled", {"requestId": 7, "reason": "user stopped"})
            assert (await post(token, cancel, session_id=session_id)).status == 202
            assert await stream.until_closed() == []
    assert await outcomes() == ["client_cancelled"]


async def test_a_session_that_ends_while_its_client_is_asked_ends_the_call_without_an_answer(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        async with call_stream(token, session_id, progress=False) as stream:
            await server_request(stream)
            ended = await send("DELETE", "/mcp", headers=mcp_headers(token, session_id=session_id))
            assert ended.status == 204
            assert await stream.until_closed() == []
    assert await outcomes() == ["session_ended"]


async def test_a_client_that_goes_away_while_asked_ends_the_call(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        async with call_stream(token, session_id, progress=False) as stream:
            await server_request(stream)
            await stream.disconnect()
    async with asyncio.timeout(5):
        while await outcomes() != ["client_gone"]:
            await asyncio.sleep(0.02)  # the consumer audits after the disconnect it was told of; no event to await


async def test_a_client_that_did_not_declare_the_capability_is_never_asked(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {})
        response = await post(token, call(progress=False), session_id=session_id)
    # The tool ended in its first step, so the answer is the plain JSON one: nothing was sent to the client.
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["structuredContent"]["error"] == "FORGE_ERR_CLIENT_CAPABILITY"


async def test_a_client_taking_json_only_is_answered_at_once_that_it_cannot_be_asked(cast):
    token = cast.caretaker.raw_token
    with registered(ASKING):
        session_id = await session_with(token, {"sampling": {}})
        response = await post(token, call(), session_id=session_id, accept="application/json")
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["structuredContent"]["error"] == "FORGE_ERR_CLIENT_UNREACHABLE"
    assert await outcomes() == ["FORGE_ERR_CLIENT_UNREACHABLE"]


def test_a_conversing_tool_must_only_read():
    from mcp_api.protocol import CallContext, _converse

    tool = Tool("writer", "Writer", "Writes.", NoArguments, asking, read_only=False)
    with pytest.raises(TypeError):
        _converse(
            CallContext(token=None, revision="2025-11-25", transport="streamable_http"), tool, NoArguments(), None, {}
        )  # type: ignore[arg-type]


def counting(ctx: Any, arguments: NoArguments) -> Generator[Any, Any, dict[str, Any]]:
    """Counts to two, reporting progress."""
    for done in (1, 2):
        yield dialogue.pause(0.01)
        yield dialogue.progress(done, 2)
    return {"counted": 2}


COUNTING = Tool("counting", "Counting", "Counts.", NoArguments, counting)


async def test_at_the_stateless_revision_progress_goes_on_the_call_stream_and_no_request_is_sent(cast):
    token = cast.caretaker.raw_token
    with registered(COUNTING), registered(ASKING):
        counted = stateless_rpc("tools/call", {"name": "counting", "arguments": {}}, id=4)
        counted["params"]["_meta"]["progressToken"] = "c"
        headers = stateless_headers(token, "tools/call", name="counting")
        async with open_stream("POST", "/mcp", headers=headers, body=counted) as stream:
            events = [event.json() for event in await stream.until_closed()]
        asked = stateless_rpc("tools/call", {"name": "asking", "arguments": {}}, id=5)
        asked["params"]["_meta"]["progressToken"] = "a"
        headers = stateless_headers(token, "tools/call", name="asking")
        async with open_stream("POST", "/mcp", headers=headers, body=asked) as stream:
            refused = [event.json() for event in await stream.until_closed()]
    assert [e["params"]["progress"] for e in events[:-1]] == [1, 2]
    assert events[-1]["result"]["structuredContent"] == {"counted": 2}
    assert events[-1]["result"]["resultType"] == "complete"
    assert [e.get("method") for e in refused] == ["notifications/progress", None]
    # Its request is never sent: the client declared no sampling, so the call ends with -32021.
    assert refused[-1]["error"]["code"] == -32021
    assert refused[-1]["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}
