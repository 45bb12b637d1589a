"""2026-07-28 rounds of one call (SEP-2322, `mcp_api.dialogue.Rounds`): a conversing tool's or prompt's requests
to the client come back in an `input_required` result with a sealed request state, are answered on the retry,
and a state that was changed, or issued for another call or client, is refused; plus the `Mcp-Param` headers a
tool's `x-mcp-header` arguments travel in (SEP-2243)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from pydantic import Field

from audit.models import AuditEvent, EventKind
from mcp_api import dialogue, prompts
from mcp_api.prompts import Prompt
from mcp_api.registry import Arguments, NoArguments, Tool
from mcp_api.results import Content
from mcp_api.revisions import CLIENT_CAPABILITIES_META_KEY
from tests.mcp_api.helpers import (
    envelope,
    open_stream,
    registered,
    send,
    stateless_headers,
    stateless_rpc,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
EVERYTHING = {"elicitation": {}, "sampling": {}, "roots": {}}


def two_questions(ctx: Any, arguments: NoArguments) -> Generator[Any, Any, Content]:
    """Asks a name, then a model's greeting and the roots at once."""
    first = yield dialogue.elicit("Name?", NAME, key="name")
    both = yield dialogue.ask_all(
        {
            "greeting": dialogue.create_message(
                [{"role": "user", "content": {"type": "text", "text": "Hi"}}], max_tokens=5
            ),
            "roots": dialogue.list_roots(),
        }
    )
    said = both["greeting"]["content"]["text"]
    return Content(({"type": "text", "text": f"{first['content']['name']}|{said}|{len(both['roots']['roots'])}"},))


TWO_QUESTIONS = Tool("two_questions", "Two questions", "Asks twice.", NoArguments, two_questions)


class Echo(Arguments):
    region: str = Field(max_length=100, json_schema_extra={"x-mcp-header": "Region"})
    count: int = Field(default=0, json_schema_extra={"x-mcp-header": "Count"})


ECHO = Tool("mirrored", "Mirrored", "Echoes.", Echo, lambda ctx, arguments: {"region": arguments.region})


def call(params: dict[str, Any], capabilities: dict[str, Any] | None = None, name: str = "two_questions"):
    meta = envelope(**{CLIENT_CAPABILITIES_META_KEY: EVERYTHING if capabilities is None else capabilities})
    return stateless_rpc("tools/call", {"name": name, "arguments": {}, **params}, id=3, meta=meta)


async def post_call(token: str, message: dict[str, Any], extra: dict[str, str] | None = None) -> Any:
    name = message["params"]["name"]
    headers = stateless_headers(token, message["method"], name=name, extra=extra)
    return await send("POST", "/mcp", headers=headers, body=message)


@database_sync_to_async
def outcomes(tool: str) -> list[str]:
    rows = AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool=tool).order_by("seq")
    return list(rows.values_list("outcome", flat=True))


ACCEPT_ALICE = {"action": "accept", "content": {"name": "Alice"}}
GREETING = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m", "stopReason": "endTurn"}
ROOTS = {"roots": [{"uri": "file:///a"}]}


async def test_a_call_that_asks_answers_input_required_and_completes_over_its_rounds(cast):
    token = cast.caretaker.raw_token
    with registered(TWO_QUESTIONS):
        first = (await post_call(token, call({}))).json()["result"]
        assert first["resultType"] == "input_required"
        assert list(first["inputRequests"]) == ["name"]
        assert first["inputRequests"]["name"]["method"] == "elicitation/create"
        second = (
            await post_call(
                token, call({"inputResponses": {"name": ACCEPT_ALICE}, "requestState": first["requestState"]})
            )
        ).json()["result"]
        # The batch goes out whole, in one round; the state now seals the first answer.
        assert set(second["inputRequests"]) == {"greeting", "roots"}
        assert {r["method"] for r in second["inputRequests"].values()} == {"sampling/createMessage", "roots/list"}
        assert second["requestState"] != first["requestState"]
        answers = {"greeting": GREETING, "roots": ROOTS, "name": {"action": "accept", "content": {"name": "Mallory"}}}
        done = (
            await post_call(token, call({"inputResponses": answers, "requestState": second["requestState"]}))
        ).json()["result"]
    assert done["resultType"] == "complete"
    # The sealed first answer wins over one sent again in a later round.
    assert done["content"][0]["text"] == "Alice|hello|1"
    assert await outcomes("two_questions") == ["input_required", "input_required", "ok"]


async def test_a_changed_request_state_is_refused_with_invalid_params_and_audited(cast):
    token = cast.caretaker.raw_token
    with registered(TWO_QUESTIONS):
        first = (await post_call(token, call({}))).json()["result"]
        tampered = call({"inputResponses": {"name": ACCEPT_ALICE}, "requestState": first["requestState"] + "x"})
        response = await post_call(token, tampered)
    assert response.status == 400
    assert response.error_code == -32602
    assert "changed or forged" in response.json()["error"]["message"]
    assert await outcomes("two_questions") == ["input_required", "request_state_refused"]


async def test_a_request_state_is_bound_to_its_client_and_its_arguments(cast):
    with registered(TWO_QUESTIONS), registered(ECHO):
        first = (await post_call(cast.caretaker.raw_token, call({}))).json()["result"]
        retry = call({"inputResponses": {"name": ACCEPT_ALICE}, "requestState": first["requestState"]})
        other_client = await post_call(cast.operator.raw_token, retry)
    assert other_client.error_code == -32602
    assert "another client" in other_client.json()["error"]["message"]


async def test_input_responses_that_are_not_results_by_key_are_refused(cast):
    token = cast.caretaker.raw_token
    with registered(TWO_QUESTIONS):
        not_an_object = await post_call(token, call({"inputResponses": None}))
        not_a_result = await post_call(token, call({"inputResponses": {"name": 12345}}))
    assert not_an_object.status == not_a_result.status == 400
    assert not_an_object.error_code == not_a_result.error_code == -32602


async def test_a_request_the_client_did_not_declare_ends_the_call_with_missing_capability(cast):
    with registered(TWO_QUESTIONS):
        response = await post_call(cast.caretaker.raw_token, call({}, capabilities={"sampling": {}}))
    assert response.status == 400
    assert response.error_code == -32021
    assert response.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}}
    assert await outcomes("two_questions") == ["rpc_error -32021"]


def test_in_a_session_a_batch_is_asked_one_request_after_another():
    asks = {"a": dialogue.list_roots(), "b": dialogue.list_roots()}

    def tool() -> Generator[Any, Any, Any]:
        return (yield dialogue.ask_all(asks))

    steps = dialogue.one_at_a_time(tool())
    assert next(steps) is asks["a"]
    assert steps.send({"roots": []}) is asks["b"]
    with pytest.raises(StopIteration) as ended:
        steps.send({"roots": [1]})
    assert ended.value.value == {"a": {"roots": []}, "b": {"roots": [1]}}


def context_prompt(arguments: dict[str, str]) -> Generator[Any, Any, list[dict[str, Any]]]:
    answer = yield dialogue.elicit("Context?", NAME, key="context")
    return [{"role": "user", "content": {"type": "text", "text": answer["content"]["name"]}}]


async def test_a_prompt_that_asks_answers_input_required_then_its_messages(cast):
    token = cast.caretaker.raw_token
    prompts.register(Prompt("asking_prompt", "Asking", "Asks first.", (), converse=context_prompt))
    try:
        meta = envelope(**{CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}}})
        first_message = stateless_rpc("prompts/get", {"name": "asking_prompt"}, id=4, meta=meta)
        first = (await post_call(token, first_message)).json()["result"]
        retry = {"inputResponses": {"context": ACCEPT_ALICE}, "requestState": first["requestState"]}
        done_message = stateless_rpc("prompts/get", {"name": "asking_prompt", **retry}, id=5, meta=meta)
        done = (await post_call(token, done_message)).json()["result"]
    finally:
        prompts.PROMPTS.pop("asking_prompt")
    assert first["resultType"] == "input_required" and list(first["inputRequests"]) == ["context"]
    assert done["resultType"] == "complete"
    assert done["messages"][0]["content"]["text"] == "Alice"


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        ({"mcp-param-region": "north", "mcp-param-count": "2"}, True),
        ({"mcp-param-region": "=?base64?bm9ydGg=?=", "mcp-param-count": "2"}, True),
        ({"mcp-param-region": "=?base64?bm9ydGg?=", "mcp-param-count": "2"}, False),  # bad padding
        ({"mcp-param-region": "south", "mcp-param-count": "2"}, False),
        ({"mcp-param-count": "2"}, False),  # the header is left out
        ({"mcp-param-region": "north", "mcp-param-count": "3"}, False),
    ],
)
async def test_arguments_marked_x_mcp_header_must_match_their_mcp_param_headers(cast, headers, accepted):
    message = stateless_rpc("tools/call", {"name": "mirrored", "arguments": {"region": "north", "count": 2}}, id=6)
    with registered(ECHO):
        response = await post_call(cast.caretaker.raw_token, message, extra=headers)
    if accepted:
        assert response.status == 200 and response.json()["result"]["structuredContent"] == {"region": "north"}
    else:
        assert response.status == 400 and response.error_code == -32020


def reporting_then_asking(ctx: Any, arguments: NoArguments) -> Generator[Any, Any, Content]:
    """Reports progress, then asks a name."""
    yield dialogue.progress(1, 2)
    answer = yield dialogue.elicit("Name?", NAME, key="name")
    return Content(({"type": "text", "text": answer["content"]["name"]},))


REPORTING = Tool("reporting", "Reporting", "Reports, then asks.", NoArguments, reporting_then_asking)


async def test_on_an_event_stream_progress_goes_out_and_the_call_ends_with_input_required(cast):
    message = call({}, name="reporting")
    message["params"]["_meta"]["progressToken"] = "r"
    headers = stateless_headers(cast.caretaker.raw_token, "tools/call", name="reporting")
    with registered(REPORTING):
        async with open_stream("POST", "/mcp", headers=headers, body=message) as stream:
            events = [event.json() for event in await stream.until_closed()]
    assert [event.get("method") for event in events] == ["notifications/progress", None]
    # No request goes to the client on the stream: what it must answer is in the result.
    assert events[-1]["result"]["resultType"] == "input_required"
    assert list(events[-1]["result"]["inputRequests"]) == ["name"]


async def test_a_request_state_of_another_call_is_refused(cast):
    token = cast.caretaker.raw_token
    with registered(TWO_QUESTIONS), registered(REPORTING):
        first = (await post_call(token, call({}))).json()["result"]
        elsewhere = call(
            {"inputResponses": {"name": ACCEPT_ALICE}, "requestState": first["requestState"]}, name="reporting"
        )
        response = await post_call(token, elsewhere)
    assert response.status == 400 and response.error_code == -32602
    assert "another call" in response.json()["error"]["message"]
