"""The stateless revision 2026-07-28 on POST /mcp: the per-request envelope, routing headers, and listen."""

from __future__ import annotations

import base64

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from access.models import BROADCAST_GROUP
from access.services import do_revoke_token
from forge_core.live import notify_streams
from mcp_api.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_api.revisions import (
    CLIENT_CAPABILITIES_META_KEY,
    SERVER_INFO_META_KEY,
    SUBSCRIPTION_ID_META_KEY,
)
from tests.mcp_api.helpers import (
    STATELESS,
    Response,
    envelope,
    mcp_headers,
    mcp_sessions,
    notification,
    open_stream,
    send,
    stateless_headers,
    stateless_rpc,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


async def call(message: dict | list, headers: list[tuple[bytes, bytes]]) -> Response:
    return await send("POST", "/mcp", headers=headers, body=message)


def listen_request(**filters: bool) -> dict:
    return stateless_rpc("subscriptions/listen", {"notifications": filters}, id="listen-1")


# --- results ---------------------------------------------------------------------------------------


async def test_server_discover_describes_the_server(cast):
    token = cast.operator.raw_token

    response = await call(stateless_rpc("server/discover"), stateless_headers(token, "server/discover"))

    assert response.status == 200
    result = response.json()["result"]
    assert STATELESS in result["supportedVersions"]
    assert result["capabilities"]["tools"]["listChanged"] is True
    assert result["resultType"] == "complete"
    assert isinstance(result["ttlMs"], int)
    assert result["cacheScope"] in {"private", "public"}
    assert result["_meta"][SERVER_INFO_META_KEY]["name"] == "forge-mcp"


async def test_tools_list_carries_its_cache_hints_and_result_type(cast):
    token = cast.operator.raw_token

    response = await call(stateless_rpc("tools/list"), stateless_headers(token, "tools/list"))

    assert response.status == 200
    result = response.json()["result"]
    assert result["tools"]
    assert isinstance(result["ttlMs"], int)
    assert result["cacheScope"] in {"private", "public"}
    assert result["resultType"] == "complete"


async def test_tools_call_result_carries_its_result_type_and_server_info(cast):
    token = cast.operator.raw_token

    response = await call(
        stateless_rpc("tools/call", {"name": "server_info", "arguments": {}}),
        stateless_headers(token, "tools/call", name="server_info"),
    )

    assert response.status == 200
    result = response.json()["result"]
    assert result["isError"] is False
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO_META_KEY]["name"] == "forge-mcp"


# --- routing headers -------------------------------------------------------------------------------


async def test_mcp_method_header_disagreeing_with_the_body_is_a_header_mismatch(cast):
    token = cast.operator.raw_token

    response = await call(stateless_rpc("tools/list"), stateless_headers(token, "server/discover"))

    assert response.status == 400
    assert response.error_code == HEADER_MISMATCH


async def test_mcp_name_header_disagreeing_with_the_body_is_a_header_mismatch(cast):
    token = cast.operator.raw_token

    response = await call(
        stateless_rpc("tools/call", {"name": "server_info", "arguments": {}}),
        stateless_headers(token, "tools/call", name="session.status"),
    )

    assert response.status == 400
    assert response.error_code == HEADER_MISMATCH


async def test_mcp_name_header_in_base64_form_that_matches_is_accepted(cast):
    token = cast.operator.raw_token
    encoded = "=?base64?" + base64.b64encode(b"server_info").decode("ascii") + "?="

    response = await call(
        stateless_rpc("tools/call", {"name": "server_info", "arguments": {}}),
        stateless_headers(token, "tools/call", name=encoded),
    )

    assert response.status == 200
    assert response.json()["result"]["isError"] is False


async def test_protocol_version_header_disagreeing_with_meta_is_a_header_mismatch(cast):
    token = cast.operator.raw_token

    response = await call(
        stateless_rpc("tools/list", meta=envelope("2025-11-25")),
        stateless_headers(token, "tools/list", protocol_version=STATELESS),
    )

    assert response.status == 400
    assert response.error_code == HEADER_MISMATCH


# --- the envelope ----------------------------------------------------------------------------------


async def test_unknown_revision_is_unsupported_and_names_the_supported_ones(cast):
    token = cast.operator.raw_token

    response = await call(
        stateless_rpc("tools/list", meta=envelope("2027-01-01")),
        stateless_headers(token, "tools/list", protocol_version="2027-01-01"),
    )

    assert response.status == 400
    error = response.json()["error"]
    assert error["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert STATELESS in error["data"]["supported"]
    assert error["data"]["requested"] == "2027-01-01"


async def test_envelope_missing_client_capabilities_is_invalid_params(cast):
    token = cast.operator.raw_token

    response = await call(
        stateless_rpc("tools/list", meta=envelope(**{CLIENT_CAPABILITIES_META_KEY: None})),
        stateless_headers(token, "tools/list"),
    )

    assert response.status == 400
    assert response.error_code == INVALID_PARAMS


async def test_ping_is_not_offered_at_2026_07_28(cast):
    token = cast.operator.raw_token

    response = await call(stateless_rpc("ping"), stateless_headers(token, "ping"))

    assert response.status == 404
    assert response.error_code == METHOD_NOT_FOUND


async def test_batch_is_an_invalid_request(cast):
    token = cast.operator.raw_token

    response = await call(
        [stateless_rpc("tools/list", id=1), stateless_rpc("server/discover", id=2)],
        stateless_headers(token, "tools/list"),
    )

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST


async def test_notification_is_answered_202(cast):
    token = cast.operator.raw_token
    message = notification("notifications/cancelled", {"requestId": 4, "_meta": envelope()})

    response = await call(message, stateless_headers(token, "notifications/cancelled"))

    assert response.status == 202
    assert response.body == b""


async def test_session_id_header_is_ignored_and_no_session_is_created(cast):
    token = cast.operator.raw_token

    response = await call(
        stateless_rpc("tools/list"),
        stateless_headers(token, "tools/list", extra={"mcp-session-id": "left-over-from-2025"}),
    )

    assert response.status == 200
    assert "mcp-session-id" not in response.headers
    assert await mcp_sessions() == []


async def test_get_at_2026_07_28_is_405(cast):
    response = await send("GET", "/mcp", headers=mcp_headers(cast.operator.raw_token, protocol_version=STATELESS))

    assert response.status == 405


async def test_get_at_2026_07_28_names_the_allowed_methods(cast):
    # RFC 9110 section 15.5.6: a 405 response MUST carry Allow with the methods the resource supports.
    response = await send("GET", "/mcp", headers=mcp_headers(cast.operator.raw_token, protocol_version=STATELESS))

    assert "POST" in {method.strip() for method in response.headers.get("allow", "").split(",")}


# --- subscriptions/listen --------------------------------------------------------------------------


async def test_listen_acknowledges_first_with_its_request_id_and_the_honoured_filter(cast):
    token = cast.operator.raw_token
    request = listen_request(toolsListChanged=True, promptsListChanged=True)

    async with open_stream(
        "POST", "/mcp", headers=stateless_headers(token, "subscriptions/listen"), body=request
    ) as stream:
        ack = (await stream.next_event()).json()

    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"][SUBSCRIPTION_ID_META_KEY] == "listen-1"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}


async def test_listen_delivers_tools_list_changed_without_event_ids(cast):
    token = cast.operator.raw_token

    async with open_stream(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "subscriptions/listen"),
        body=listen_request(toolsListChanged=True),
    ) as stream:
        await stream.next_event()
        await sync_to_async(notify_streams)(BROADCAST_GROUP, "mcp.tools_changed")
        changed = (await stream.next_event()).json()

    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"][SUBSCRIPTION_ID_META_KEY] == "listen-1"
    assert not [line for line in stream.raw.splitlines() if line.startswith("id:")]


async def test_listen_stream_ends_with_its_result_when_the_token_is_revoked(cast):
    token = cast.operator.raw_token

    async with open_stream(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "subscriptions/listen"),
        body=listen_request(toolsListChanged=True),
    ) as stream:
        await stream.next_event()
        await database_sync_to_async(do_revoke_token)(cast.operator.token, acting_user="olivia")
        rest = await stream.until_closed()

    last = rest[-1].json()
    assert last["id"] == "listen-1"
    assert last["result"]["resultType"] == "complete"
