"""The tool registry as data: generated schemas, descriptions and annotations, flags, and audit sanitizing."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from audit.services import MAX_VALUE_CHARS, REDACTED, sanitize
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from mcp_api.registry import (
    REGISTRY,
    Arguments,
    Need,
    Tool,
    decode_cursor,
    encode_cursor,
    find_tool,
    list_page,
    visible_tools,
)
from tests.mcp_api.helpers import registered


class Step(Arguments):
    name: str
    count: int = 1


class Plan(Arguments):
    project: str
    steps: list[Step] = []


def _handler(ctx, args) -> dict:
    return {}


def plan_tool(**overrides) -> Tool:
    declaration = {
        "name": "test.plan",
        "title": "Plan",
        "description": "Plans steps for tests.",
        "arguments": Plan,
        "handler": _handler,
    }
    return Tool(**{**declaration, **overrides})


@pytest.fixture
def override_tool():
    with registered(plan_tool(name="test.override_write", needs=frozenset({Need.TOKEN, Need.OVERRIDE}))) as tool:
        yield tool


# --- schemas and declarations ----------------------------------------------------------------------


def test_input_schema_is_generated_from_the_argument_model_and_closed():
    schema = plan_tool().input_schema()

    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"project", "steps"}
    assert schema["required"] == ["project"]
    assert schema["$defs"]["Step"]["additionalProperties"] is False


def test_a_tools_published_description_is_built_once_and_equals_a_fresh_one(monkeypatch):
    tool = plan_tool()
    first = tool.descriptor()
    assert first["inputSchema"] == plan_tool().input_schema()
    built = []
    monkeypatch.setattr(Plan, "model_json_schema", lambda *a, **k: built.append(1) or {})

    second = tool.descriptor()

    assert built == []  # the schema is not generated again
    assert second == first
    second["_meta"] = {"added": "by a caller"}
    assert "_meta" not in tool.descriptor()  # each call gets its own outer dict


def test_list_page_serves_the_cached_descriptions_and_answering_leaves_them_unchanged():
    from mcp_api.protocol import shape_result

    before = [copy.deepcopy(t.descriptor()) for t in visible_tools()]
    for revision in ("2025-11-25", "2026-07-28"):
        page = list_page(None, mcp_on=True)
        json.dumps(shape_result(revision, page))

    assert [t.descriptor() for t in visible_tools()] == before
    assert page["tools"] == before[: len(page["tools"])]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_tool_publishes_a_closed_input_schema(name):
    schema = REGISTRY[name].descriptor()["inputSchema"]

    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_tool_has_a_description_and_annotations(name):
    descriptor = REGISTRY[name].descriptor()

    assert descriptor["description"].strip()
    annotations = descriptor["annotations"]
    for hint in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"):
        assert isinstance(annotations[hint], bool), hint


def test_arguments_that_fail_validation_name_the_failing_path():
    with pytest.raises(RpcError) as raised:
        plan_tool().parse({"project": "pump", "steps": [{"name": "a"}, {"name": "b", "count": "many"}]})

    assert raised.value.code == INVALID_PARAMS
    assert [problem["path"] for problem in raised.value.data["errors"]] == ["steps.1.count"]


def test_unknown_arguments_are_refused():
    with pytest.raises(RpcError) as raised:
        plan_tool().parse({"project": "pump", "force": True})

    assert raised.value.code == INVALID_PARAMS
    assert [problem["path"] for problem in raised.value.data["errors"]] == ["force"]


# --- visibility under the deployment's flags -------------------------------------------------------


def test_override_tools_are_hidden_when_override_securities_is_off(settings, override_tool):
    settings.FORGE_OVERRIDE_SECURITIES = False

    assert all(Need.OVERRIDE not in tool.needs for tool in visible_tools())
    assert find_tool(override_tool.name) is None


@pytest.mark.django_db  # under override the list also asks whether the caretaker is active
def test_override_tools_are_offered_when_override_securities_is_on(settings, override_tool):
    settings.FORGE_OVERRIDE_SECURITIES = True

    assert override_tool in visible_tools()
    assert find_tool(override_tool.name) is override_tool


# --- cursors ---------------------------------------------------------------------------------------


def test_a_cursor_decodes_to_the_offset_it_encodes():
    assert decode_cursor(encode_cursor(3)) == 3


@pytest.mark.parametrize("cursor", ["not-a-cursor", encode_cursor(-1), "e30=", 7])
def test_a_cursor_the_server_did_not_issue_is_invalid_params(cursor):
    with pytest.raises(RpcError) as raised:
        decode_cursor(cursor)

    assert raised.value.code == INVALID_PARAMS


# --- audit sanitizing ------------------------------------------------------------------------------


def test_sanitize_redacts_secret_keys_at_any_depth_and_in_any_case():
    arguments = {"Password": "hunter2", "nested": {"token": "fmcp_x", "kept": "visible"}, "items": [{"KEY": "k"}]}

    assert sanitize(arguments) == {
        "Password": REDACTED,
        "nested": {"token": REDACTED, "kept": "visible"},
        "items": [{"KEY": REDACTED}],
    }


def test_sanitize_redacts_the_secret_keys_a_tool_declares():
    assert sanitize({"passphrase": "p", "note": "n"}, secret_keys={"passphrase"}) == {
        "passphrase": REDACTED,
        "note": "n",
    }


def test_sanitize_replaces_long_values_with_their_sha256_and_length():
    long_value = "x" * (MAX_VALUE_CHARS + 1)

    assert sanitize({"text": long_value}) == {
        "text": {"sha256": hashlib.sha256(long_value.encode()).hexdigest(), "length": MAX_VALUE_CHARS + 1}
    }


def test_sanitize_keeps_values_within_the_limit():
    value = "x" * MAX_VALUE_CHARS

    assert sanitize({"text": value}) == {"text": value}
