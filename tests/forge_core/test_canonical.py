"""The service's canonical JSON (forge_core.canonical): the bytes audit MACs and Merkle leaves are computed over."""

from __future__ import annotations

import math

import pytest

from forge_core.canonical import canonical_json


def test_canonical_json_sorts_keys_leaves_out_whitespace_and_keeps_characters_unescaped():
    value = {
        "b": [1, -2, 2.5, True, False, None],
        "a": 'Förderband € \u2028 "quoted" \\ tab\t',
        "c": {"z": {}, "y": [], "é": "\u0000"},
    }

    # Pinned: every audit event stored so far was MACed over this form, so it must never change.
    assert canonical_json(value) == (
        '{"a":"Förderband € \u2028 \\"quoted\\" \\\\ tab\\t","b":[1,-2,2.5,true,false,null],'
        '"c":{"y":[],"z":{},"é":"\\u0000"}}'
    )


def test_canonical_json_is_the_same_whatever_the_order_of_keys():
    assert canonical_json({"a": 1, "b": {"d": 2, "c": 3}}) == canonical_json({"b": {"c": 3, "d": 2}, "a": 1})


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_nan_and_infinities(number):
    with pytest.raises(ValueError):
        canonical_json({"x": number})
