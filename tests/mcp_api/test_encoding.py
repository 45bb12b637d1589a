"""The answer's JSON as the transports write it: `jsonrpc.encode` and a tool result's text block give the text
`json.dumps` gives with their arguments, from an encoder made once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from mcp_api import jsonrpc
from mcp_api.results import tool_result

VALUES = [
    {"jsonrpc": "2.0", "id": 2**70, "result": {"a": [1, 2.5, -0.0, 1e-07, 1e16, None, True, False, {}]}},
    {"text": 'é€😀 \x00\x1f\x7f\u2028\ufeff "quoted" \\ </script>', "nested": [[[["deep"]]]], "": ""},
    {"floats": [float("nan"), float("inf"), -float("inf"), 0.1 + 0.2, 5e-324, 1.7976931348623157e308]},
    {1: "int key", False: "bool key", 2.5: "float key", None: "null key"},
    ("a", "tuple"),
    "just a string",
    12345,
    None,
]


@pytest.mark.parametrize("value", VALUES)
def test_a_message_is_encoded_as_json_dumps_encodes_it(value):
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    assert jsonrpc.encode(value) == expected
    assert jsonrpc.encode(value) == expected  # the encoder keeps nothing from one message to the next


@pytest.mark.parametrize("value", [v for v in VALUES if isinstance(v, dict)])
def test_a_tool_results_text_block_is_json_dumps_of_its_structured_content(value):
    text = tool_result(value)["content"][0]["text"]

    assert text == json.dumps(value, ensure_ascii=False, default=str)


def test_the_text_block_writes_what_json_cannot_as_its_string():
    when = datetime(2026, 12, 6, 1, 2, 3, tzinfo=UTC)

    text = tool_result({"when": when, "amount": Decimal("1.10")})["content"][0]["text"]

    assert text == '{"when": "2026-12-06 01:02:03+00:00", "amount": "1.10"}'


@pytest.mark.parametrize("value", [{"when": datetime(2026, 12, 6, tzinfo=UTC)}, {"set": {1}}, {"bytes": b"x"}])
def test_a_message_holding_a_value_json_cannot_write_is_refused_with_type_error(value):
    with pytest.raises(TypeError, match="is not JSON serializable"):
        jsonrpc.encode(value)


def test_a_message_that_contains_itself_fails_rather_than_being_written():
    message: dict = {"jsonrpc": "2.0", "id": 1}
    message["result"] = message

    with pytest.raises((RecursionError, ValueError)):
        jsonrpc.encode(message)
    with pytest.raises((RecursionError, ValueError)):
        tool_result(message)
