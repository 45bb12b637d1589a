"""The request's body and Accept header as the transports read them: `jsonrpc.decode` screens a message by its
raw bytes when they show it holds nothing to refuse, and value by value otherwise; `Exchange.accepts` answers
from the Accept header parsed once."""

from __future__ import annotations

import json

import pytest

from mcp_api.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, UnreadableMessage, decode
from mcp_api.transports.core import Exchange


def call(arguments: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": arguments}}).encode()


def test_brackets_inside_text_past_the_depth_limit_are_only_text():
    body = call({"source": "[" * 40 + "{" * 40})

    assert decode(body, max_depth=8)["params"]["arguments"]["source"] == "[" * 40 + "{" * 40


def test_nesting_past_the_limit_is_refused_whatever_the_text_around_it():
    deep: object = "x"
    for _ in range(8):
        deep = [deep]

    with pytest.raises(UnreadableMessage) as refused:
        decode(call({"a": deep, "b": "plain"}), max_depth=8)

    assert (refused.value.code, refused.value.outcome) == (INVALID_PARAMS, "too_deep")


@pytest.mark.parametrize(
    ("text", "outcome"),
    [("\\u0000", "nul_character"), ("\\ud800", "lone_surrogate"), ("\\uDFFF", "lone_surrogate")],
)
def test_an_escaped_nul_or_surrogate_is_refused(text, outcome):
    body = b'{"jsonrpc":"2.0","id":1,"method":"x' + text.encode() + b'"}'

    with pytest.raises(UnreadableMessage) as refused:
        decode(body, max_depth=8)

    assert (refused.value.code, refused.value.outcome) == (INVALID_REQUEST, outcome)


def test_a_surrogate_sent_as_raw_utf_8_bytes_is_refused():
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"k":"\xed\xa0\x80"}}'

    with pytest.raises(UnreadableMessage) as refused:
        decode(body, max_depth=8)

    assert refused.value.outcome == "lone_surrogate"


def test_hangul_near_the_surrogates_and_escaped_plain_text_are_read():
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"k": "\ud7a3 \u00e9"}}).encode()

    assert decode(body, max_depth=8)["params"]["k"] == "\ud7a3 \u00e9"


@pytest.mark.parametrize(
    ("accept", "json_ok", "stream_ok"),
    [
        (None, True, True),
        ("application/json", True, False),
        ("text/event-stream", False, True),
        ("Application/JSON; q=1, text/event-stream", True, True),
        ("text/*", False, True),
        ("*/*;q=0.1", True, True),
        ("image/png", False, False),
    ],
)
def test_accepts_answers_each_media_type_from_the_header_read_once(accept, json_ok, stream_ok):
    exchange = Exchange(method="POST", path="/mcp", headers={} if accept is None else {"accept": accept})

    asked = [exchange.accepts("application/json"), exchange.accepts("text/event-stream")]
    asked_again = [exchange.accepts("application/json"), exchange.accepts("text/event-stream")]

    assert asked == asked_again == [json_ok, stream_ok]
