"""The legacy HTTP+SSE transport (2024-11-05): GET /sse is the stream, POST /messages/ carries requests."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from access.models import Transport
from audit.models import EventKind
from mcp_api.jsonrpc import INVALID_REQUEST
from tests.mcp_api.helpers import (
    EventStream,
    Response,
    audit_events,
    initialize_message,
    mcp_headers,
    mcp_session,
    open_stream,
    rpc,
    send,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def sse_headers(token: str) -> list[tuple[bytes, bytes]]:
    return mcp_headers(token, accept="text/event-stream")


async def endpoint_of(stream: EventStream) -> str:
    event = await stream.next_event()
    assert event.event == "endpoint"
    return event.data


async def post_message(token: str, endpoint: str, message: dict | list) -> Response:
    return await send("POST", endpoint, headers=mcp_headers(token, accept=None), body=message)


async def answers_on(stream: EventStream, ids: set[Any]) -> dict[Any, dict[str, Any]]:
    """The answers to the given request ids, as they arrive on the stream (an event may hold an array)."""
    answers: dict[Any, dict[str, Any]] = {}
    while not ids <= answers.keys():
        data = (await stream.next_event()).json()
        for message in data if isinstance(data, list) else [data]:
            answers[message.get("id")] = message
    return answers


async def initialized(token: str, stream: EventStream, revision: str = "2024-11-05") -> str:
    endpoint = await endpoint_of(stream)
    accepted = await post_message(token, endpoint, initialize_message(revision, id=0))
    assert accepted.status == 202
    await answers_on(stream, {0})
    return endpoint


async def test_stream_opens_with_the_endpoint_event_naming_the_session(cast):
    async with open_stream("GET", "/sse", headers=sse_headers(cast.operator.raw_token)) as stream:
        endpoint = await endpoint_of(stream)

    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    url = urlsplit(endpoint)
    assert url.path == "/messages/"
    [session_id] = parse_qs(url.query)["session_id"]
    session = await mcp_session(session_id)
    assert session.transport == Transport.SSE
    assert session.token_id == cast.operator.token.pk


async def test_initialize_is_accepted_202_and_answered_on_the_stream(cast):
    token = cast.operator.raw_token

    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await endpoint_of(stream)
        accepted = await post_message(token, endpoint, initialize_message("2024-11-05", id=0))
        answers = await answers_on(stream, {0})

    assert accepted.status == 202
    assert answers[0]["result"]["protocolVersion"] == "2024-11-05"
    assert answers[0]["result"]["serverInfo"]["name"] == "forge-mcp"


async def test_tools_call_is_answered_on_the_stream(cast):
    token = cast.operator.raw_token

    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await initialized(token, stream)
        accepted = await post_message(token, endpoint, rpc("tools/call", {"name": "server_info"}, id=1))
        answers = await answers_on(stream, {1})

    assert accepted.status == 202
    result = answers[1]["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["transports"]["legacy_sse"] == "/sse"


async def test_message_for_an_unknown_session_id_is_404(cast):
    response = await post_message(
        cast.operator.raw_token, "/messages/?session_id=no-such-session", initialize_message("2024-11-05")
    )

    assert response.status == 404
    assert response.error_code == INVALID_REQUEST


async def test_closing_the_stream_ends_the_session(cast):
    async with open_stream("GET", "/sse", headers=sse_headers(cast.operator.raw_token)) as stream:
        endpoint = await endpoint_of(stream)
        await stream.disconnect()

    [session_id] = parse_qs(urlsplit(endpoint).query)["session_id"]
    assert (await mcp_session(session_id)).ended_at is not None


async def test_message_after_the_stream_closed_is_404(cast):
    token = cast.operator.raw_token
    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await endpoint_of(stream)
        await stream.disconnect()

    response = await post_message(token, endpoint, initialize_message("2024-11-05"))

    assert response.status == 404


async def test_batch_on_2024_11_05_is_answered_on_the_stream(cast):
    token = cast.operator.raw_token

    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await initialized(token, stream)
        accepted = await post_message(token, endpoint, [rpc("tools/list", id=1), rpc("ping", id=2)])
        answers = await answers_on(stream, {1, 2})

    assert accepted.status == 202
    assert answers[1]["result"]["tools"]
    assert answers[2]["result"] == {}


async def test_a_batch_over_the_limit_on_2024_11_05_is_refused_and_nothing_reaches_the_stream(cast, settings):
    settings.FORGE_MAX_BATCH = 3
    token = cast.operator.raw_token

    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await initialized(token, stream)
        refused = await post_message(token, endpoint, [rpc("ping", id=n) for n in range(1, 5)])
        accepted = await post_message(token, endpoint, [rpc("ping", id=n) for n in range(11, 14)])
        answers = await answers_on(stream, {11, 12, 13})

    assert refused.status == 400
    assert refused.error_code == INVALID_REQUEST
    assert "at most 3 messages" in refused.json()["error"]["message"]
    assert accepted.status == 202
    assert set(answers) == {11, 12, 13}  # the refused batch's ids never arrived
    [refusal] = await audit_events(EventKind.REQUEST_REFUSED)
    assert refusal.outcome == "batch_too_large"
