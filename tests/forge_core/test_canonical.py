"""The service's canonical JSON (forge_core.canonical): the bytes audit MACs and Merkle leaves are computed over."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_core.canonical import canonical_json, canonical_json_of_tree

# JSON values as the audit's sanitized arguments hold them: trees of text, numbers, booleans and None.
json_trees = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


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
@pytest.mark.parametrize("encode", [canonical_json, canonical_json_of_tree])
def test_canonical_json_refuses_nan_and_infinities(encode, number):
    with pytest.raises(ValueError):
        encode({"x": number})


@given(json_trees)
def test_the_canonical_json_of_a_tree_is_canonical_json(value):
    assert canonical_json_of_tree(value) == canonical_json(value)


def test_the_canonical_json_of_a_tree_refuses_what_json_cannot_hold():
    with pytest.raises(TypeError):
        canonical_json_of_tree({"x": object()})
