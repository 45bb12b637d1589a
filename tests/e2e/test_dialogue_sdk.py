"""A tool that talks with its client while it runs, end to end: the official `mcp` SDK client against a live
server with the conformance fixtures app (whose tools ask the client to sample and to elicit, and report
progress): the client's sampling and elicitation callbacks are called on the call's stream and the tool
answers with what they returned; progress arrives before the result; a client that declared neither is never
asked."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp import types

from tests.e2e.test_scaleout import next_message, sse_events
from tests.live import bearer, prepare, run_server, scaleout_configured, scratch_database, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30  # seconds for one whole conversation on loopback


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("dialogue")
    with scratch_database() as database:
        env, token = prepare(data_dir, DJANGO_SETTINGS_MODULE="tests.conformance_fixtures.settings", **database)
        with run_server(env, token, data_dir) as live:
            yield live


async def test_the_sdk_client_answers_sampling_and_elicitation_on_the_call_stream(server):
    asked: list[Any] = []

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="forty-two"), model="test-model"
        )

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    with anyio.fail_after(BOUND):
        async with streamable_client(
            server, mode="legacy", sampling_callback=sample, elicitation_callback=elicit
        ) as client:
            sampled = await client.call_tool("test_sampling", {"prompt": "What is six times seven?"})
            elicited = await client.call_tool("test_elicitation", {"message": "Who are you?"})
    assert sampled.is_error is False and sampled.content[0].text == "LLM response: forty-two"
    assert asked[0].messages[0].content.text == "What is six times seven?" and asked[0].max_tokens == 100
    assert elicited.is_error is False
    assert (
        elicited.content[0].text
        == 'User response: action=accept, content={"username": "ada", "email": "ada@example.com"}'
    )
    assert asked[1].message == "Who are you?" and asked[1].requested_schema["required"] == ["username", "email"]


async def test_progress_arrives_before_the_result(server):
    reports: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(progress)

    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            result = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
    assert result.is_error is False
    assert reports == [0, 50, 100]


async def test_a_client_that_declared_no_sampling_is_never_asked(server):
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            result = await client.call_tool("test_sampling", {"prompt": "anyone?"})
    assert result.is_error is True
    assert result.structured_content["error"] == "FORGE_ERR_CLIENT_CAPABILITY"


@pytest.mark.scaleout
@pytest.mark.skipif(not scaleout_configured(), reason="two processes need a shared PostgreSQL and Redis")
async def test_the_answer_to_a_tool_request_may_reach_another_process(server, tmp_path_factory):
    """The call waits in one process; the client's answer is posted to another, which hands it over through the
    shared channel layer."""
    data_dir = tmp_path_factory.mktemp("dialogue-second")
    env = {**server.env, "FORGE_DATA_DIR": str(data_dir), "FORGE_SECRETS_DIR": str(server.data_dir / "secrets")}
    headers = {**bearer(server.token), "Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "e2e"}},
    }
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "test_sampling", "arguments": {"prompt": "across?"}}
    with run_server(env, server.token, data_dir) as second, anyio.fail_after(BOUND):
        async with httpx.AsyncClient(base_url=server.base, timeout=BOUND) as first_http:
            opened = await first_http.post("/mcp", headers=headers, json=initialize)
            session = {
                **headers,
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "MCP-Protocol-Version": "2025-11-25",
            }
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await first_http.post("/mcp", headers=session, json=initialized)).status_code == 202
            async with first_http.stream("POST", "/mcp", headers=session, json=call) as answer:
                events = sse_events(answer)
                asked = await next_message(events)
                assert asked["method"] == "sampling/createMessage"
                said = {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"}
                async with httpx.AsyncClient(base_url=second.base, timeout=BOUND) as second_http:
                    reply = {"jsonrpc": "2.0", "id": asked["id"], "result": said}
                    assert (await second_http.post("/mcp", headers=session, json=reply)).status_code == 202
                final = await next_message(events)
    assert final["id"] == 2 and final["result"]["content"][0]["text"] == "LLM response: yes"
