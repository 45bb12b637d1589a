"""What an app may add to the MCP surface beside the real tools, resources and prompts (the conformance
fixtures do): open resources and templates, prompts that name no project, and tools answering content blocks,
each served through the same methods, paging and audit as the rest."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from channels.db import database_sync_to_async

from audit.models import AuditEvent, EventKind
from mcp_api import prompts, resources
from mcp_api.jsonrpc import INVALID_PARAMS
from mcp_api.prompts import Argument, Prompt
from mcp_api.registry import NoArguments, Tool
from mcp_api.resources import GUIDELINES_URI, OpenResource, OpenTemplate
from mcp_api.results import Content
from tests.mcp_api.helpers import open_session, post, registered, rpc

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

PIXEL = base64.b64encode(b"not really a png").decode()
NOTE = OpenResource("test://note", "note", "A note", "A note anyone may read.", "text/plain", lambda: {"text": "hello"})
BLOB = OpenResource("test://blob", "blob", "A blob", "Bytes.", "image/png", lambda: {"blob": PIXEL})
ITEMS = OpenTemplate(
    "test://items/{id}/data", "items", "Items", "An item by id.", "application/json", lambda v: {"text": v["id"]}
)
SIMPLE = Prompt("open_prompt", "Open prompt", "Names no project.", (), text=lambda arguments: "plain words")
PICTURE = Prompt(
    "picture_prompt",
    "Picture prompt",
    "An image, then a question.",
    (Argument("question", "What to ask about it."),),
    render=lambda arguments: [
        {"role": "user", "content": {"type": "image", "data": PIXEL, "mimeType": "image/png"}},
        {"role": "user", "content": {"type": "text", "text": arguments["question"]}},
    ],
)


@pytest.fixture
def extras() -> Iterator[None]:
    for resource in (NOTE, BLOB):
        resources.register_open_resource(resource)
    resources.register_open_template(ITEMS)
    prompts.register(SIMPLE)
    prompts.register(PICTURE)
    try:
        yield
    finally:
        for uri in (NOTE.uri, BLOB.uri):
            resources.OPEN_RESOURCES.pop(uri, None)
        resources.OPEN_TEMPLATES.remove(ITEMS)
        for name in (SIMPLE.name, PICTURE.name):
            prompts.PROMPTS.pop(name, None)


async def call(token: str, session_id: str, method: str, params: dict) -> dict:
    response = await post(token, rpc(method, params), session_id=session_id)
    assert response.status == 200, response.body
    return response.json()


async def test_open_resources_are_listed_after_the_guidelines_and_read_by_any_principal(cast, extras):
    session = await open_session(cast.caretaker.raw_token)
    listed = (await call(cast.caretaker.raw_token, session, "resources/list", {}))["result"]["resources"]
    assert [r["uri"] for r in listed[:3]] == [GUIDELINES_URI, NOTE.uri, BLOB.uri]
    read = (await call(cast.caretaker.raw_token, session, "resources/read", {"uri": BLOB.uri}))["result"]
    assert read == {"contents": [{"uri": BLOB.uri, "mimeType": "image/png", "blob": PIXEL}]}
    assert (
        await database_sync_to_async(
            lambda: AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool="resources/read", outcome="ok").count()
        )()
        == 1
    )


async def test_an_open_template_is_listed_read_with_its_values_and_completed_with_nothing(cast, extras):
    session = await open_session(cast.caretaker.raw_token)
    templates = (await call(cast.caretaker.raw_token, session, "resources/templates/list", {}))["result"]
    assert templates["resourceTemplates"][-1]["uriTemplate"] == ITEMS.uri_template
    read = (await call(cast.caretaker.raw_token, session, "resources/read", {"uri": "test://items/a%20b/data"}))[
        "result"
    ]
    assert read["contents"] == [{"uri": "test://items/a%20b/data", "mimeType": "application/json", "text": "a b"}]
    completion = await call(
        cast.caretaker.raw_token,
        session,
        "completion/complete",
        {"ref": {"type": "ref/resource", "uri": ITEMS.uri_template}, "argument": {"name": "id", "value": "1"}},
    )
    assert completion["result"]["completion"] == {"values": [], "total": 0, "hasMore": False}


async def test_an_open_template_matches_no_control_character_and_no_other_path(cast, extras):
    session = await open_session(cast.caretaker.raw_token)
    for uri in ("test://items/%00/data", "test://items/a/b/data", "test://items//data"):
        answer = await call(cast.caretaker.raw_token, session, "resources/read", {"uri": uri})
        assert "error" in answer and "no resource" in answer["error"]["message"], uri


async def test_subscribing_to_an_open_resource_is_accepted_and_stores_nothing(cast, extras):
    session = await open_session(cast.caretaker.raw_token)
    assert (await call(cast.caretaker.raw_token, session, "resources/subscribe", {"uri": NOTE.uri}))["result"] == {}
    from mcp_api.models import ResourceSubscription

    assert await database_sync_to_async(ResourceSubscription.objects.count)() == 0


async def test_a_prompt_naming_no_project_is_answered_without_a_grant(cast, extras):
    session = await open_session(cast.caretaker.raw_token)
    simple = (await call(cast.caretaker.raw_token, session, "prompts/get", {"name": SIMPLE.name}))["result"]
    assert simple["messages"] == [{"role": "user", "content": {"type": "text", "text": "plain words"}}]
    picture = await call(
        cast.caretaker.raw_token, session, "prompts/get", {"name": PICTURE.name, "arguments": {"question": "What?"}}
    )
    assert [m["content"]["type"] for m in picture["result"]["messages"]] == ["image", "text"]
    missing = await call(cast.caretaker.raw_token, session, "prompts/get", {"name": PICTURE.name})
    assert missing["error"]["code"] == INVALID_PARAMS and "missing question" in missing["error"]["message"]


def test_a_prompt_is_refused_twice_or_without_exactly_one_of_text_and_render():
    with pytest.raises(ValueError):
        prompts.register(Prompt("neither", "Neither", "No content.", ()))
    with pytest.raises(ValueError):
        prompts.register(Prompt("add_io_variables", "Again", "Taken.", (), text=lambda a: ""))


def test_an_open_resource_may_not_take_a_project_address_or_one_already_served():
    with pytest.raises(ValueError):
        resources.register_open_resource(
            OpenResource("forge://projects/x/accepted.xml", "x", "x", "x", "text/plain", lambda: {"text": ""})
        )
    with pytest.raises(ValueError):
        resources.register_open_resource(
            OpenResource(GUIDELINES_URI, "g", "g", "g", "text/plain", lambda: {"text": ""})
        )


async def test_a_tool_answering_content_blocks_gets_them_as_its_result(cast):
    blocks = ({"type": "text", "text": "one"}, {"type": "audio", "data": PIXEL, "mimeType": "audio/wav"})
    tool = Tool("blocks", "Blocks", "Answers two blocks.", NoArguments, lambda ctx, arguments: Content(blocks))
    with registered(tool):
        session = await open_session(cast.caretaker.raw_token)
        answer = await call(cast.caretaker.raw_token, session, "tools/call", {"name": "blocks", "arguments": {}})
    assert answer["result"] == {"content": list(blocks), "isError": False}
