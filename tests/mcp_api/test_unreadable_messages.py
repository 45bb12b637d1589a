"""Bodies refused unread, on every transport: not JSON, `NaN` / `Infinity`, lone surrogates, nesting past
FORGE_MAX_JSON_DEPTH. Each is a JSON-RPC error with the code its flaw's place calls for (never a 500 or
-32603), changes nothing, and leaves a `request_refused` audit row naming the flaw."""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit.models import EventKind
from mcp_api.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from tests.mcp_api.helpers import (
    STATELESS,
    audit_events,
    initialize_message,
    mcp_headers,
    mcp_sessions,
    open_session,
    open_stream,
    rpc,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.mcp_api.test_legacy_sse import answers_on, initialized, post_message, sse_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

LONE = "\ud800"


def raw(message: Any) -> bytes:
    """The message as a client that escapes everything would send it: lone surrogates survive as \\ud800."""
    return json.dumps(message).encode()


def nested(depth: int) -> Any:
    """A value `depth` levels of objects deep."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def refusal_outcomes() -> list[str]:
    return [event.outcome for event in await audit_events(EventKind.REQUEST_REFUSED)]


async def post_raw(token: str, body: bytes, *, session_id: str | None = None, **options: Any):
    return await send("POST", "/mcp", headers=mcp_headers(token, session_id=session_id, **options), body=body)


async def test_an_initialize_with_a_lone_surrogate_id_is_32600_with_an_audit_row(cast):
    message = initialize_message("2025-06-18")
    message["id"] = LONE

    response = await post_raw(cast.operator.raw_token, raw(message))

    assert response.status == 400
    assert response.json()["id"] is None
    assert response.error_code == INVALID_REQUEST
    assert "lone UTF-16 surrogate" in response.json()["error"]["message"]
    assert await mcp_sessions() == []
    [refusal] = await audit_events(EventKind.REQUEST_REFUSED)
    assert refusal.outcome == "lone_surrogate"
    assert refusal.arguments["where"] == "id"
    assert refusal.client_label == cast.operator.token.label


async def test_an_initialize_with_a_lone_surrogate_in_client_info_is_32602_with_its_id(cast):
    message = initialize_message("2025-03-26", id=3)
    message["params"]["clientInfo"] = {"name": f"client{LONE}", "version": "1.0"}

    response = await post_raw(cast.operator.raw_token, raw(message))

    assert response.status == 400
    assert response.json()["id"] == 3
    assert response.error_code == INVALID_PARAMS
    assert await mcp_sessions() == []
    assert await refusal_outcomes() == ["lone_surrogate"]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_in_a_request_is_32700(cast, constant):
    session_id = await open_session(cast.operator.raw_token, "2025-11-25")
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": %s}}' % constant.encode()

    response = await post_raw(cast.operator.raw_token, body, session_id=session_id)

    assert response.status == 400
    assert response.error_code == PARSE_ERROR
    assert response.json()["id"] is None
    assert await refusal_outcomes() == ["bad_json"]


async def test_a_lone_surrogate_in_a_tool_name_is_32602_and_no_tool_runs(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    message = rpc("tools/call", {"name": f"session.status{LONE}", "arguments": {}}, id="call-1")

    response = await post_raw(cast.operator.raw_token, raw(message), session_id=session_id)

    assert response.status == 400
    assert response.json()["id"] == "call-1"
    assert response.error_code == INVALID_PARAMS
    assert await audit_events(EventKind.TOOL_CALL) == []
    assert await refusal_outcomes() == ["lone_surrogate"]


async def test_a_lone_surrogate_in_an_object_key_is_refused_too(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    message = rpc("tools/call", {"name": "session.status", "arguments": {LONE: 1}}, id=2)

    response = await post_raw(cast.operator.raw_token, raw(message), session_id=session_id)

    assert response.error_code == INVALID_PARAMS
    assert await refusal_outcomes() == ["lone_surrogate"]


async def test_a_lone_surrogate_sent_as_utf_8_bytes_is_refused_too(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    body = b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"x": "\xed\xa0\x80"}}'

    response = await post_raw(cast.operator.raw_token, body, session_id=session_id)

    assert response.status < 500
    assert response.error_code in (PARSE_ERROR, INVALID_PARAMS)
    assert len(await refusal_outcomes()) == 1


async def test_arguments_nested_past_the_limit_are_32602(cast, settings):
    assert settings.FORGE_MAX_JSON_DEPTH == 32
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    # message (1) > params (2) > arguments (3) > 30 more levels: 33
    message = rpc("tools/call", {"name": "session.status", "arguments": nested(31)}, id=9)

    response = await post_raw(cast.operator.raw_token, raw(message), session_id=session_id)

    assert response.status == 400
    assert response.json()["id"] == 9
    assert response.error_code == INVALID_PARAMS
    assert response.json()["error"]["data"] == {"limit": 32, "where": "params"}
    assert "FORGE_MAX_JSON_DEPTH" in response.json()["error"]["message"]
    assert await audit_events(EventKind.TOOL_CALL) == []
    assert await refusal_outcomes() == ["too_deep"]


async def test_a_message_nested_exactly_to_the_limit_is_answered(cast, settings):
    settings.FORGE_MAX_JSON_DEPTH = 10
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    at_limit = rpc("ping", {"x": nested(8)}, id=1)  # message > params > 8 levels: 10
    past_limit = rpc("ping", {"x": nested(9)}, id=2)

    answered = await post_raw(cast.operator.raw_token, raw(at_limit), session_id=session_id)
    refused = await post_raw(cast.operator.raw_token, raw(past_limit), session_id=session_id)

    assert answered.status == 200 and answered.json()["result"] == {}
    assert refused.error_code == INVALID_PARAMS
    assert await refusal_outcomes() == ["too_deep"]


async def test_a_batch_with_one_unreadable_entry_is_refused_whole(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-03-26")
    batch = [rpc("ping", id=1), rpc("ping", {"x": LONE}, id=2)]

    response = await post_raw(cast.operator.raw_token, raw(batch), session_id=session_id)

    assert response.status == 400
    assert isinstance(response.json(), dict)
    assert response.error_code == INVALID_PARAMS
    assert await refusal_outcomes() == ["lone_surrogate"]


async def test_a_lone_surrogate_in_the_method_is_32600_with_the_request_id(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")

    response = await post_raw(cast.operator.raw_token, raw(rpc(f"ping{LONE}", id=5)), session_id=session_id)

    assert response.error_code == INVALID_REQUEST
    assert response.json()["id"] == 5
    assert response.json()["error"]["data"] == {"where": "method"}


async def test_a_stateless_request_with_a_lone_surrogate_is_32602(cast):
    message = stateless_rpc("tools/list", {"cursor": LONE}, id=6)

    response = await send(
        "POST", "/mcp", headers=stateless_headers(cast.operator.raw_token, "tools/list"), body=raw(message)
    )

    assert response.status == 400
    assert response.json()["id"] == 6
    assert response.error_code == INVALID_PARAMS
    assert await refusal_outcomes() == ["lone_surrogate"]


async def test_a_stateless_progress_token_with_a_lone_surrogate_is_32602(cast):
    message = stateless_rpc("tools/list", id=7)
    message["params"]["_meta"]["progressToken"] = LONE
    headers = mcp_headers(cast.operator.raw_token, protocol_version=STATELESS, extra={"mcp-method": "tools/list"})

    response = await send("POST", "/mcp", headers=headers, body=raw(message))

    assert response.error_code == INVALID_PARAMS
    assert response.json()["id"] == 7


async def test_on_the_legacy_transport_a_lone_surrogate_in_params_is_answered_on_the_stream(cast):
    token = cast.operator.raw_token
    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await initialized(token, stream)
        accepted = await post_message(token, endpoint, raw(rpc("ping", {"x": LONE}, id=8)))
        answers = await answers_on(stream, {8})

    assert accepted.status == 202
    assert answers[8]["error"]["code"] == INVALID_PARAMS
    assert await refusal_outcomes() == ["lone_surrogate"]


async def test_on_the_legacy_transport_nan_is_32700(cast):
    token = cast.operator.raw_token
    async with open_stream("GET", "/sse", headers=sse_headers(token)) as stream:
        endpoint = await initialized(token, stream)
        refused = await post_message(
            token, endpoint, b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}'
        )

    assert refused.status == 400
    assert refused.error_code == PARSE_ERROR
    assert await refusal_outcomes() == ["bad_json"]


async def test_a_nul_character_in_a_project_slug_is_32602_and_no_tool_runs(cast):
    # NUL is valid JSON, but no PLCopen file and no PostgreSQL text can hold it: refused before anything
    # looks a project up with it (on PostgreSQL that lookup itself would fail).
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    message = rpc("tools/call", {"name": "project.overview", "arguments": {"project": "line\x00one"}}, id=5)

    response = await post_raw(cast.operator.raw_token, raw(message), session_id=session_id)

    assert response.status == 400
    assert response.json()["id"] == 5
    assert response.error_code == INVALID_PARAMS
    assert "NUL character" in response.json()["error"]["message"]
    assert await audit_events(EventKind.TOOL_CALL) == []
    assert await refusal_outcomes() == ["nul_character"]


async def test_a_nul_character_in_an_object_key_or_the_id_is_refused_too(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    in_key = rpc("tools/call", {"name": "session.status", "arguments": {"a\x00": 1}}, id=6)
    in_id = rpc("ping", {}, id="x\x00")

    keyed = await post_raw(cast.operator.raw_token, raw(in_key), session_id=session_id)
    with_id = await post_raw(cast.operator.raw_token, raw(in_id), session_id=session_id)

    assert keyed.error_code == INVALID_PARAMS
    assert (with_id.error_code, with_id.json()["id"]) == (INVALID_REQUEST, None)
    assert await refusal_outcomes() == ["nul_character", "nul_character"]
