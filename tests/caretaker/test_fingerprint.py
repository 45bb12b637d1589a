"""Memorable IDs (caretaker.fingerprint): four BIP-39 words from the first 44 bits of a SHA-256 digest,
checked against a computation written out here by hand, and the lenient reading of what a person typed."""

from __future__ import annotations

import hashlib

import pytest
from mnemonic import Mnemonic

from caretaker.fingerprint import memorable_id, memorable_id_of_digest, normalize_typed_id

BIP39_ENGLISH = Mnemonic("english").wordlist
SAMPLE_INPUTS = [f"sample-{n}" for n in range(200)] + ["", "a", "0" * 1000, "é", "f47ac10b-58cc-4372-a567-0e02b2c3d479"]


def by_hand(data: bytes) -> str:
    """The first 44 bits of SHA-256 as a bit string, cut into four 11-bit indexes into the word list."""
    bits = "".join(f"{byte:08b}" for byte in hashlib.sha256(data).digest())[:44]
    return "-".join(BIP39_ENGLISH[int(bits[i : i + 11], 2)] for i in range(0, 44, 11))


def test_the_bip39_english_list_has_2048_words():
    assert len(BIP39_ENGLISH) == 2048 and len(set(BIP39_ENGLISH)) == 2048


def test_memorable_id_equals_the_first_44_bits_of_sha256_as_four_bip39_words():
    for text in SAMPLE_INPUTS:
        assert memorable_id(text) == by_hand(text.encode()), text


def test_memorable_id_of_bytes_equals_the_computation_by_hand():
    data = bytes(range(256))
    assert memorable_id(data) == by_hand(data)


def test_memorable_id_of_digest_equals_memorable_id_of_the_digested_bytes():
    assert memorable_id_of_digest(hashlib.sha256(b"forge").digest()) == memorable_id(b"forge")


def test_a_digest_whose_first_44_bits_are_all_ones_is_the_last_word_four_times():
    assert memorable_id_of_digest(b"\xff" * 6 + b"\x00" * 26) == "-".join([BIP39_ENGLISH[-1]] * 4)


def test_a_digest_whose_first_44_bits_are_zero_is_the_first_word_four_times_whatever_follows():
    assert memorable_id_of_digest(b"\x00" * 5 + b"\x0f" + b"\xff" * 26) == "-".join([BIP39_ENGLISH[0]] * 4)


def test_a_memorable_id_is_four_words_of_the_list_joined_with_hyphens():
    for text in SAMPLE_INPUTS:
        words = memorable_id(text).split("-")
        assert len(words) == 4 and all(word in BIP39_ENGLISH for word in words), text


def test_different_inputs_give_different_ids_in_a_sample():
    ids = [memorable_id(text) for text in SAMPLE_INPUTS]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_memorable_id_of_digest_refuses_a_digest_that_is_not_32_bytes(length):
    with pytest.raises(ValueError, match="32-byte"):
        memorable_id_of_digest(b"\x01" * length)


@pytest.mark.parametrize(
    "typed",
    [
        "ABANDON-ABILITY-ABLE-ABOUT",
        "abandon ability able about",
        "  Abandon   Ability able\tabout  ",
        "abandon - ability - able - about",
        "abandon_ability_able_about",
    ],
)
def test_normalize_typed_id_accepts_upper_case_spaces_and_extra_blanks(typed):
    assert normalize_typed_id(typed) == "abandon-ability-able-about"


def test_normalize_typed_id_keeps_a_different_word_different():
    assert normalize_typed_id("abandon ability able above") != "abandon-ability-able-about"
