"""Nothing a client sends produces a 500 or a traceback: every refusal is a well-formed answer.

A table of malformed bodies, sent to each MCP endpoint over a valid session (or a valid stateless
envelope), must each be answered with a status below 500 and, when there is a body, a JSON-RPC error
object whose message is a sentence without Python internals.
"""

from __future__ import annotations

import json

import pytest

from mcp_api.jsonrpc import HEADER_MISMATCH
from tests.mcp_api.helpers import envelope, mcp_headers, open_session, send, stateless_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

BAD_BODIES: list[bytes] = [
    b"",
    b"null",
    b"42",
    b'"text"',
    b"[]",
    b"[1, 2]",
    b"{}",
    b"\xff\xfe not utf-8",
    b"[" * 100_000,
    b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": {}, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": true, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": 7}',
    b'{"jsonrpc": "2.0", "id": 1, "method": ""}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "server_info", "arguments": []}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "server_info", "arguments": "x"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": {"a": 1}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "!!!"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5, "clientInfo": []}}',
    b'{"jsonrpc": "2.0", "id": 1, "result": {}}',
    b'{"jsonrpc": "2.0", "method": "notifications/unknown", "params": {"x": 1}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {"notifications": 3}}',
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x" * 10_000}).encode(),
]

INTERNALS = ("Traceback", 'File "', "Error(", "django.", "pydantic", "object at 0x")


def assert_well_formed(status: int, body: bytes) -> None:
    assert status < 500, body
    if not body or status == 202:
        return
    text = body.decode("utf-8", "replace")
    assert not any(marker in text for marker in INTERNALS), text
    if body.startswith(b"data:") or b"\ndata:" in body or body.startswith(b"event:"):
        return
    answer = json.loads(body)
    for item in answer if isinstance(answer, list) else [answer]:
        assert item["jsonrpc"] == "2.0"
        if "error" in item:
            assert isinstance(item["error"]["code"], int)
            assert item["error"]["message"].strip()


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
async def test_malformed_body_on_a_session_is_refused_cleanly(cast, body):
    token = cast.operator.raw_token
    session_id = await open_session(token, "2025-03-26")

    response = await send("POST", "/mcp", headers=mcp_headers(token, session_id=session_id), body=body)

    assert_well_formed(response.status, response.body)


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
async def test_malformed_body_without_a_session_is_refused_cleanly(cast, body):
    response = await send("POST", "/mcp", headers=mcp_headers(cast.operator.raw_token), body=body)

    assert_well_formed(response.status, response.body)


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
async def test_malformed_body_at_the_stateless_revision_is_refused_cleanly(cast, body):
    headers = stateless_headers(cast.operator.raw_token, "tools/call")

    response = await send("POST", "/mcp", headers=headers, body=body)

    assert_well_formed(response.status, response.body)


@pytest.mark.parametrize(
    "meta",
    [
        None,
        5,
        [],
        {"io.modelcontextprotocol/protocolVersion": 7, "io.modelcontextprotocol/clientCapabilities": {}},
        {**envelope(), "io.modelcontextprotocol/clientInfo": "x", "io.modelcontextprotocol/clientCapabilities": []},
    ],
    ids=["null", "number", "list", "numeric-version", "odd-info"],
)
async def test_malformed_stateless_envelope_is_refused_cleanly(cast, meta):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}

    response = await send("POST", "/mcp", headers=stateless_headers(cast.operator.raw_token, "tools/list"), body=body)

    assert_well_formed(response.status, response.body)


async def test_a_malformed_base64_name_header_is_a_header_mismatch(cast):
    headers = stateless_headers(cast.operator.raw_token, "tools/call", name="=?base64?////?=")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "server_info", "_meta": envelope()}}

    response = await send("POST", "/mcp", headers=[*headers, (b"x-odd", "é".encode("latin-1"))], body=body)

    assert_well_formed(response.status, response.body)
    assert (response.status, response.error_code) == (400, HEADER_MISMATCH)
