"""Bearer token values: minted with their kind's prefix, stored as a digest, and a value of one kind is never
looked up as the other."""

from __future__ import annotations

import hashlib

import pytest

from forge_core.tokens import (
    CLIENT_TOKEN_PREFIX,
    MAX_TOKEN_CHARS,
    OPERATOR_TOKEN_PREFIX,
    mint_token,
    presented_digest,
    token_digest,
)


@pytest.mark.parametrize("prefix", [CLIENT_TOKEN_PREFIX, OPERATOR_TOKEN_PREFIX])
def test_a_minted_token_carries_its_prefix_and_keeps_only_its_digest_and_first_characters(prefix):
    minted = mint_token(prefix)

    assert minted.raw.startswith(prefix) and len(minted.raw) == len(prefix) + 43
    assert minted.digest == hashlib.sha256(minted.raw.encode()).hexdigest() == token_digest(minted.raw)
    assert minted.shown == minted.raw[:12]
    assert mint_token(prefix).raw != minted.raw


def test_neither_prefix_starts_the_other():
    assert not CLIENT_TOKEN_PREFIX.startswith(OPERATOR_TOKEN_PREFIX)
    assert not OPERATOR_TOKEN_PREFIX.startswith(CLIENT_TOKEN_PREFIX)


@pytest.mark.parametrize(
    ("minted_as", "presented_as"),
    [(CLIENT_TOKEN_PREFIX, OPERATOR_TOKEN_PREFIX), (OPERATOR_TOKEN_PREFIX, CLIENT_TOKEN_PREFIX)],
)
def test_a_token_of_one_kind_is_not_looked_up_as_the_other(minted_as, presented_as):
    raw = mint_token(minted_as).raw

    assert presented_digest(raw, presented_as) is None
    assert presented_digest(raw, minted_as) == token_digest(raw)


@pytest.mark.parametrize("raw", [None, "", CLIENT_TOKEN_PREFIX + "x" * MAX_TOKEN_CHARS])
def test_no_value_or_an_overlong_one_is_not_looked_up(raw):
    assert presented_digest(raw, CLIENT_TOKEN_PREFIX) is None
