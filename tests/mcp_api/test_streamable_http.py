"""Streamable HTTP at /mcp (2025-03-26 .. 2025-11-25): sessions, the JSON-RPC envelope, auth, and streams."""

from __future__ import annotations

import gc
import hashlib
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.utils import timezone

from access.models import BROADCAST_GROUP, Transport
from access.services import do_create_token, do_revoke_token
from audit.models import EventKind
from forge_core.live import notify_streams
from mcp_api.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_api.registry import Arguments, Tool, visible_tools
from mcp_api.revisions import LATEST_HANDSHAKE
from mcp_api.transports.core import Exchange
from tests.mcp_api.helpers import (
    audit_events,
    initialize_message,
    install_remembering_layer,
    mcp_headers,
    mcp_session,
    mcp_sessions,
    notification,
    open_session,
    open_stream,
    post,
    registered,
    rpc,
    send,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


class SecretiveArguments(Arguments):
    note: str = ""
    password: str = ""
    passphrase: str = ""


@pytest.fixture
def secretive_tool():
    tool = Tool(
        name="test.secretive",
        title="Secretive",
        description="Takes a note and two secrets; answers that it got them.",
        arguments=SecretiveArguments,
        handler=lambda ctx, args: {"received": True},
        secret_arguments=frozenset({"passphrase"}),
    )
    with registered(tool):
        yield tool


# --- initialize and the session --------------------------------------------------------------------


async def test_initialize_opens_a_session_bound_to_the_token(cast):
    response = await post(cast.operator.raw_token, initialize_message("2025-06-18"))

    assert response.status == 200
    assert response.json()["result"]["protocolVersion"] == "2025-06-18"
    session = await mcp_session(response.headers["mcp-session-id"])
    assert session.token_id == cast.operator.token.pk
    assert session.transport == Transport.STREAMABLE_HTTP
    assert session.protocol_version == "2025-06-18"
    assert session.ended_at is None
    [opened] = await audit_events(EventKind.SESSION_OPENED)
    assert opened.session == session.id


async def test_initialize_with_a_revision_the_server_does_not_speak_gets_its_latest(cast):
    response = await post(cast.operator.raw_token, initialize_message("2024-01-01"))

    assert response.status == 200
    assert response.json()["result"]["protocolVersion"] == LATEST_HANDSHAKE
    assert (await mcp_session(response.headers["mcp-session-id"])).protocol_version == LATEST_HANDSHAKE


async def test_initialized_notification_marks_the_session_initialized(cast):
    session_id = await open_session(cast.operator.raw_token)

    assert (await mcp_session(session_id)).initialized is True


async def test_notification_is_answered_202_with_an_empty_body(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(
        cast.operator.raw_token,
        notification("notifications/cancelled", {"requestId": 7, "reason": "changed my mind"}),
        session_id=session_id,
    )

    assert response.status == 202
    assert response.body == b""
    assert response.headers["content-length"] == "0"


async def test_a_json_answer_carries_its_length_so_the_server_need_not_chunk_it(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("tools/list"), session_id=session_id)

    assert response.status == 200
    assert response.headers["content-length"] == str(len(response.body))


# --- the JSON-RPC envelope -------------------------------------------------------------------------


async def test_body_that_is_not_json_is_a_parse_error(cast):
    response = await post(cast.operator.raw_token, b'{"jsonrpc": "2.0", "id": 1, "method": ')

    assert response.status == 400
    assert response.error_code == PARSE_ERROR
    assert response.json()["id"] is None


async def test_message_without_jsonrpc_version_is_an_invalid_request(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, {"id": 5, "method": "tools/list"}, session_id=session_id)

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST
    assert response.json()["id"] == 5


async def test_unknown_method_is_method_not_found(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("resources/teleport", id=3), session_id=session_id)

    assert response.status == 200
    assert response.error_code == METHOD_NOT_FOUND
    assert response.json()["id"] == 3


async def test_tools_call_with_invalid_arguments_is_invalid_params_naming_the_path(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(
        cast.operator.raw_token,
        rpc("tools/call", {"name": "server_info", "arguments": {"verbose": True}}),
        session_id=session_id,
    )

    assert response.status == 200
    error = response.json()["error"]
    assert error["code"] == INVALID_PARAMS
    assert [problem["path"] for problem in error["data"]["errors"]] == ["verbose"]


async def test_tools_call_with_invalid_arguments_is_audited_as_invalid_params(cast):
    session_id = await open_session(cast.operator.raw_token)

    await post(
        cast.operator.raw_token,
        rpc("tools/call", {"name": "server_info", "arguments": {"verbose": True}}),
        session_id=session_id,
    )

    [call] = await audit_events(EventKind.TOOL_CALL)
    assert (call.tool, call.outcome, call.arguments) == ("server_info", "invalid_params", {"verbose": True})


async def test_tools_call_of_an_unknown_tool_is_invalid_params(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(
        cast.operator.raw_token, rpc("tools/call", {"name": "project.delete_everything"}), session_id=session_id
    )

    assert response.status == 200
    assert response.error_code == INVALID_PARAMS


# --- the body limit --------------------------------------------------------------------------------


async def test_oversize_body_is_refused_413_before_it_is_parsed(cast, settings):
    settings.FORGE_MAX_BODY_BYTES = 1024
    not_json = b"{" * 2048  # parsing it would answer -32700

    response = await post(cast.operator.raw_token, not_json)

    assert response.status == 413
    assert response.error_code == INVALID_REQUEST


async def test_declared_content_length_over_the_limit_is_refused_without_reading_the_body(cast, settings):
    settings.FORGE_MAX_BODY_BYTES = 1024

    response = await post(cast.operator.raw_token, initialize_message(), extra={"content-length": "2000000"})

    assert response.status == 413
    assert await mcp_sessions() == []


# --- Host and Origin -------------------------------------------------------------------------------


async def test_foreign_origin_is_refused_403_and_audited(cast):
    response = await post(cast.operator.raw_token, initialize_message(), origin="https://evil.example")

    assert response.status == 403
    assert response.error_code == INVALID_REQUEST
    [refusal] = await audit_events(EventKind.ORIGIN_REFUSED)
    assert refusal.arguments["path"] == "/mcp"
    assert await mcp_sessions() == []


async def test_foreign_host_is_refused_403_and_audited(cast):
    response = await post(cast.operator.raw_token, initialize_message(), host="evil.example:8000")

    assert response.status == 403
    assert len(await audit_events(EventKind.ORIGIN_REFUSED)) == 1
    assert await mcp_sessions() == []


async def test_loopback_origin_is_allowed(cast):
    response = await post(cast.operator.raw_token, initialize_message(), origin="http://localhost:5173")

    assert response.status == 200
    assert len(await mcp_sessions()) == 1


# --- finding the session ---------------------------------------------------------------------------


async def test_unknown_session_id_is_404(cast):
    response = await post(cast.operator.raw_token, rpc("tools/list"), session_id="no-such-session")

    assert response.status == 404
    assert response.error_code == INVALID_REQUEST


async def test_request_without_session_id_after_initialize_is_400(cast):
    await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("tools/list"))

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST


async def test_another_principals_session_id_is_404(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.other_operator.raw_token, rpc("tools/list"), session_id=session_id)

    assert response.status == 404
    assert (await mcp_session(session_id)).ended_at is None


async def test_delete_ends_the_session_and_reusing_its_id_is_404(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    deleted = await send("DELETE", "/mcp", headers=mcp_headers(token, session_id=session_id))
    reused = await post(token, rpc("tools/list"), session_id=session_id)

    assert deleted.status == 204
    assert "content-length" not in deleted.headers  # a 204 has no body to measure
    assert reused.status == 404
    assert (await mcp_session(session_id)).ended_at is not None
    [ended] = await audit_events(EventKind.SESSION_ENDED)
    assert ended.session == session_id


async def test_protocol_version_header_naming_another_handshake_revision_keeps_the_negotiated_one(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-11-25")

    response = await post(
        cast.operator.raw_token,
        rpc("tools/call", {"name": "session.status"}),
        session_id=session_id,
        protocol_version="2025-03-26",
    )

    assert response.status == 200
    assert response.json()["result"]["structuredContent"]["revision"] == "2025-11-25"


async def test_protocol_version_header_naming_an_unknown_revision_is_400_unsupported(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-11-25")

    response = await post(
        cast.operator.raw_token, rpc("tools/list"), session_id=session_id, protocol_version="2099-01-01"
    )

    assert response.status == 400
    assert response.error_code == UNSUPPORTED_PROTOCOL_VERSION


# --- batches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", ["2025-06-18", "2025-11-25"])
async def test_batch_is_refused_on_revisions_without_batches(cast, revision):
    session_id = await open_session(cast.operator.raw_token, revision)

    response = await post(
        cast.operator.raw_token,
        [rpc("tools/list", id=1), rpc("ping", id=2)],
        session_id=session_id,
        protocol_version=revision,
    )

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST


async def test_batch_on_2025_03_26_is_answered_with_an_array(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-03-26")

    response = await post(
        cast.operator.raw_token,
        [rpc("tools/list", id=1), notification("notifications/progress"), rpc("ping", id=2)],
        session_id=session_id,
    )

    assert response.status == 200
    answers = response.json()
    assert isinstance(answers, list)
    assert sorted(answer["id"] for answer in answers) == [1, 2]
    assert all("result" in answer for answer in answers)


async def test_initialize_inside_a_batch_is_refused(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-03-26")

    response = await post(
        cast.operator.raw_token, [initialize_message("2025-03-26", id=9), rpc("ping", id=10)], session_id=session_id
    )

    assert response.status == 400
    assert response.error_code == INVALID_REQUEST
    assert len(await mcp_sessions()) == 1


async def test_a_batch_over_the_limit_is_refused_whole_naming_the_limit_and_audited(cast, settings):
    assert settings.FORGE_MAX_BATCH == 50
    session_id = await open_session(cast.operator.raw_token, "2025-03-26")
    batch = [rpc("tools/call", {"name": "session.status"}, id=n) for n in range(1000)]

    response = await post(cast.operator.raw_token, batch, session_id=session_id)

    assert response.status == 400
    body = response.json()
    assert isinstance(body, dict)  # one error for the batch, no answer to any of its entries
    assert body["error"]["code"] == INVALID_REQUEST
    assert "1000 messages" in body["error"]["message"]
    assert "Send at most 50 messages per batch" in body["error"]["message"]
    assert body["error"]["data"] == {"limit": 50, "received": 1000}
    assert await audit_events(EventKind.TOOL_CALL) == []
    [refusal] = await audit_events(EventKind.REQUEST_REFUSED)
    assert refusal.outcome == "batch_too_large"
    assert refusal.session == session_id
    assert refusal.client_label == cast.operator.token.label
    assert refusal.arguments["batch_size"] == 1000
    assert refusal.arguments["limit"] == 50


async def test_a_batch_of_exactly_the_limit_is_answered(cast, settings):
    settings.FORGE_MAX_BATCH = 7
    session_id = await open_session(cast.operator.raw_token, "2025-03-26")

    response = await post(cast.operator.raw_token, [rpc("ping", id=n) for n in range(7)], session_id=session_id)
    over = await post(cast.operator.raw_token, [rpc("ping", id=n) for n in range(8)], session_id=session_id)

    assert response.status == 200
    assert sorted(answer["id"] for answer in response.json()) == list(range(7))
    assert all(answer["result"] == {} for answer in response.json())
    assert over.status == 400
    assert over.error_code == INVALID_REQUEST
    assert "at most 7 messages" in over.json()["error"]["message"]
    assert len(await audit_events(EventKind.REQUEST_REFUSED)) == 1


async def test_a_batch_of_the_default_limit_is_answered(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-03-26")

    response = await post(cast.operator.raw_token, [rpc("ping", id=n) for n in range(50)], session_id=session_id)

    assert response.status == 200
    assert len(response.json()) == 50
    assert await audit_events(EventKind.REQUEST_REFUSED) == []


# --- the token -------------------------------------------------------------------------------------


async def test_request_without_a_token_is_401_with_a_bearer_challenge(cast):
    response = await post(None, initialize_message())

    assert response.status == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert await mcp_sessions() == []


async def test_unknown_token_is_401_and_audited(cast):
    response = await post("fmcp_" + "x" * 43, initialize_message())

    assert response.status == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    [refusal] = await audit_events(EventKind.AUTH_REFUSED)
    assert refusal.outcome == "bad_token"


async def test_revoked_token_is_401_on_its_next_request(cast):
    session_id = await open_session(cast.operator.raw_token)

    await database_sync_to_async(do_revoke_token)(cast.operator.token, acting_user="olivia")
    response = await post(cast.operator.raw_token, rpc("tools/list"), session_id=session_id)

    assert response.status == 401


async def test_expired_token_is_401(cast):
    expired = await database_sync_to_async(do_create_token)(
        owner=cast.operator.user, label="stale-client", expires_at=timezone.now() - timedelta(minutes=1)
    )

    response = await post(expired.raw, initialize_message())

    assert response.status == 401
    assert await mcp_sessions() == []


# --- tools/list pagination -------------------------------------------------------------------------


async def test_tools_list_page_smaller_than_the_list_carries_a_next_cursor(cast, settings):
    settings.FORGE_TOOLS_PAGE_SIZE = 1
    session_id = await open_session(cast.operator.raw_token)

    result = (await post(cast.operator.raw_token, rpc("tools/list"), session_id=session_id)).json()["result"]

    assert len(result["tools"]) == 1
    assert result["nextCursor"]


async def test_following_next_cursor_gives_the_next_tool(cast, settings):
    settings.FORGE_TOOLS_PAGE_SIZE = 1
    token = cast.operator.raw_token
    session_id = await open_session(token)
    first = (await post(token, rpc("tools/list"), session_id=session_id)).json()["result"]

    cursor = first["nextCursor"]
    second = (await post(token, rpc("tools/list", {"cursor": cursor}), session_id=session_id)).json()["result"]

    names = [tool["name"] for tool in first["tools"] + second["tools"]]
    assert names == [tool.name for tool in visible_tools()[:2]]


async def test_tools_list_with_an_unknown_cursor_is_invalid_params(cast, settings):
    settings.FORGE_TOOLS_PAGE_SIZE = 1
    session_id = await open_session(cast.operator.raw_token)

    response = await post(cast.operator.raw_token, rpc("tools/list", {"cursor": "not-a-cursor"}), session_id=session_id)

    assert response.status == 200
    assert response.error_code == INVALID_PARAMS


# --- the audit of tool calls -----------------------------------------------------------------------


async def test_tools_call_writes_one_audit_event_with_its_attribution(cast):
    session_id = await open_session(cast.operator.raw_token)

    response = await post(
        cast.operator.raw_token, rpc("tools/call", {"name": "server_info", "arguments": {}}), session_id=session_id
    )

    assert response.json()["result"]["isError"] is False
    [call] = await audit_events(EventKind.TOOL_CALL)
    assert call.tool == "server_info"
    assert call.arguments == {}
    assert call.outcome == "ok"
    assert call.called_by == "olivia"
    assert call.session == session_id
    assert call.client_label == "olivia-client"


async def test_tools_call_audit_event_holds_sanitized_arguments(cast, secretive_tool):
    session_id = await open_session(cast.operator.raw_token)
    long_note = "n" * 5000

    await post(
        cast.operator.raw_token,
        rpc(
            "tools/call",
            {"name": secretive_tool.name, "arguments": {"note": long_note, "password": "hunter2", "passphrase": "p"}},
        ),
        session_id=session_id,
    )

    [call] = await audit_events(EventKind.TOOL_CALL)
    assert call.arguments == {
        "note": {"sha256": hashlib.sha256(long_note.encode()).hexdigest(), "length": 5000},
        "password": "[redacted]",
        "passphrase": "[redacted]",
    }


# --- GET /mcp: the session's stream ----------------------------------------------------------------


async def test_get_with_a_session_opens_an_event_stream(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()

        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert not stream.ended


async def test_an_open_stream_keeps_nothing_of_the_exchange_that_opened_it(cast):
    # A stream may stay open for hours: the request's decoded headers and body are not kept that long.
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        gc.collect()

        # type(), not isinstance(): isinstance on a dead weakref.proxy among the objects raises ReferenceError
        assert not [held for held in gc.get_objects() if type(held) is Exchange]
        assert not stream.ended


async def test_get_stream_closes_when_its_session_is_deleted(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        await send("DELETE", "/mcp", headers=mcp_headers(token, session_id=session_id))
        await stream.until_closed()

    assert stream.ended


async def test_get_stream_closes_when_its_token_is_revoked(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        await database_sync_to_async(do_revoke_token)(cast.operator.token, acting_user="olivia")
        await stream.until_closed()

    assert stream.ended


async def test_get_stream_delivers_tools_list_changed(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        await sync_to_async(notify_streams)(BROADCAST_GROUP, "mcp.tools_changed")
        changed = await stream.next_event()

    assert changed.json()["method"] == "notifications/tools/list_changed"


async def test_get_stream_renews_its_group_membership_and_still_hears_after_the_layer_forgot_it(cast, settings):
    settings.FORGE_SSE_KEEPALIVE_SECONDS = 0.05
    settings.FORGE_STREAM_RECHECK_SECONDS = 0.05
    layer = install_remembering_layer()
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        channel = await layer.next_join(BROADCAST_GROUP)
        layer.forget(BROADCAST_GROUP)
        assert await layer.next_join(BROADCAST_GROUP) == channel
        await sync_to_async(notify_streams)(BROADCAST_GROUP, "mcp.tools_changed")
        changed = await stream.next_event()

    assert changed.json()["method"] == "notifications/tools/list_changed"


# --- HTTP methods and content negotiation ----------------------------------------------------------


async def test_get_that_does_not_accept_an_event_stream_is_406(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    response = await send("GET", "/mcp", headers=mcp_headers(token, session_id=session_id, accept="application/json"))

    assert response.status == 406


async def test_post_that_accepts_neither_json_nor_an_event_stream_is_406(cast):
    response = await post(cast.operator.raw_token, initialize_message(), accept="text/html")

    assert response.status == 406
    assert await mcp_sessions() == []


async def test_put_is_405_with_the_allowed_methods(cast):
    response = await send("PUT", "/mcp", headers=mcp_headers(cast.operator.raw_token), body=initialize_message())

    assert response.status == 405
    assert {method.strip() for method in response.headers["allow"].split(",")} == {"GET", "POST", "DELETE"}


async def test_a_used_token_records_when_it_was_last_used(cast):
    assert cast.operator.token.last_used_at is None

    await post(cast.operator.raw_token, initialize_message())

    await database_sync_to_async(cast.operator.token.refresh_from_db)()
    assert cast.operator.token.last_used_at is not None


async def test_a_session_records_when_it_was_last_seen(cast):
    session_id = await open_session(cast.operator.raw_token)

    await post(cast.operator.raw_token, rpc("tools/list"), session_id=session_id)

    assert (await mcp_session(session_id)).last_seen_at is not None
