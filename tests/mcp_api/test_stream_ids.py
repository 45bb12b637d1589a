"""SSE event ids and resumption: no stream can be resumed, so only the legacy /sse stream's events carry ids
(unique from one stream to the next), and a request to resume a stream (`Last-Event-ID`) is refused clearly,
never answered with a fresh stream as if nothing was missed."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from access.models import BROADCAST_GROUP, session_group
from audit.models import EventKind
from forge_core.live import notify_streams
from mcp_api.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST
from tests.mcp_api.helpers import audit_events, mcp_headers, mcp_sessions, open_session, open_stream, send

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


async def test_the_streamable_get_streams_carry_no_event_ids_so_no_client_asks_to_resume_them(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)
    headers = mcp_headers(token, session_id=session_id)

    async with (
        open_stream("GET", "/mcp", headers=headers) as first,
        open_stream("GET", "/mcp", headers=headers) as second,
    ):
        await first.first_chunk()
        await second.first_chunk()
        for _ in range(2):
            await sync_to_async(notify_streams)(BROADCAST_GROUP, "mcp.tools_changed")
        events = [await stream.next_event() for stream in (first, second) for _ in range(2)]

    assert all(event.json()["method"] == "notifications/tools/list_changed" for event in events)
    assert [event.id for event in events] == [None] * 4


async def test_the_legacy_streams_event_ids_differ_from_one_stream_to_the_next(cast):
    headers = mcp_headers(cast.operator.raw_token, accept="text/event-stream")
    async with (
        open_stream("GET", "/sse", headers=headers) as first,
        open_stream("GET", "/sse", headers=headers) as second,
    ):
        endpoints = [await first.next_event(), await second.next_event()]

    assert [event.event for event in endpoints] == ["endpoint", "endpoint"]
    assert endpoints[0].id and endpoints[1].id and endpoints[0].id != endpoints[1].id


async def test_last_event_id_is_refused_clearly(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    response = await send(
        "GET", "/mcp", headers=mcp_headers(token, session_id=session_id, extra={"last-event-id": "abc-3"})
    )

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST
    assert "Last-Event-ID" in response.json()["error"]["message"]
    assert "Open a new stream without Last-Event-ID" in response.json()["error"]["message"]
    [refusal] = await audit_events(EventKind.REQUEST_REFUSED)
    assert refusal.outcome == "resumption_refused"
    assert refusal.client_label == cast.operator.token.label


async def test_last_event_id_on_the_legacy_stream_is_refused_and_opens_no_session(cast):
    headers = mcp_headers(cast.operator.raw_token, accept="text/event-stream", extra={"last-event-id": "abc-1"})

    response = await send("GET", "/sse", headers=headers)

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST
    assert await mcp_sessions() == []
    assert [event.outcome for event in await audit_events(EventKind.REQUEST_REFUSED)] == ["resumption_refused"]


async def test_a_message_that_cannot_be_sent_ends_the_stream_with_a_json_rpc_error(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)
    # Valid JSON text (the escape crosses any layer) that decodes to a string UTF-8 cannot encode.
    unsendable = '{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "\\ud800"}}'

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        await get_channel_layer().group_send(session_group(session_id), {"type": "mcp.message", "json": unsendable})
        [event] = await stream.until_closed()

    assert event.json()["error"]["code"] == INTERNAL_ERROR
    assert event.json()["id"] is None
