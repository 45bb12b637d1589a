"""Memorable IDs (caretaker.fingerprint): four BIP-39 words from the first 44 bits of a SHA-256 digest,
checked against a computation written out here by hand, and the lenient reading of what a person typed."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from mnemonic import Mnemonic

from caretaker.fingerprint import memorable_id, memorable_id_of_digest, normalize_typed_id
from caretaker.randomart import key_art

BIP39_ENGLISH = Mnemonic("english").wordlist
SAMPLE_INPUTS = [f"sample-{n}" for n in range(200)] + ["", "a", "0" * 1000, "é", "f47ac10b-58cc-4372-a567-0e02b2c3d479"]


def by_hand(data: bytes) -> str:
    """The first 44 bits of SHA-256 as a bit string, cut into four 11-bit indexes into the word list."""
    return digest_by_hand(hashlib.sha256(data).digest())


def digest_by_hand(digest: bytes) -> str:
    bits = "".join(f"{byte:08b}" for byte in digest)[:44]
    return "-".join(BIP39_ENGLISH[int(bits[i : i + 11], 2)] for i in range(0, 44, 11))


def digest_of_indexes(*indexes: int) -> bytes:
    """A digest whose first 44 bits are the four given 11-bit word indexes, written as a bit string."""
    bits = "".join(f"{index:011b}" for index in indexes).ljust(256, "0")
    return int(bits, 2).to_bytes(32, "big")


def flip_bit(digest: bytes, bit: int) -> bytes:
    """The digest with one bit flipped, counting from the most significant bit of the first byte."""
    return (int.from_bytes(digest, "big") ^ (1 << (255 - bit))).to_bytes(32, "big")


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


@pytest.mark.parametrize(
    ("indexes", "words"),
    [
        ((0, 1, 2, 3), "abandon-ability-able-about"),
        ((2047, 0, 2047, 0), "zoo-abandon-zoo-abandon"),
        ((1, 1, 1, 1), "ability-ability-ability-ability"),
        (
            (1024, 512, 256, 128),
            f"{BIP39_ENGLISH[1024]}-{BIP39_ENGLISH[512]}-{BIP39_ENGLISH[256]}-{BIP39_ENGLISH[128]}",
        ),
    ],
)
def test_a_digest_built_from_four_word_indexes_reads_as_those_words(indexes, words):
    assert memorable_id_of_digest(digest_of_indexes(*indexes)) == words


@pytest.mark.parametrize(
    "digest",
    [
        bytes(range(32)),
        bytes(range(255, 223, -1)),
        hashlib.sha256(b"").digest(),
        bytes.fromhex("a5" * 32),
        bytes.fromhex("0123456789abcdef" * 4),
    ],
    ids=["counting up", "counting down", "sha256 of nothing", "alternating bits", "hex digits"],
)
def test_fixed_digests_read_as_their_first_44_bits_worked_out_by_hand(digest):
    assert memorable_id_of_digest(digest) == digest_by_hand(digest)


def test_the_digest_0123456789abcdef_reads_as_its_worked_out_words():
    # 0x0123456789a = 00000001001 00011010001 01011001111 00010011010: indexes 9, 209, 719 and 154.
    digest = bytes.fromhex("0123456789abcdef" * 4)
    assert memorable_id_of_digest(digest) == "-".join(BIP39_ENGLISH[i] for i in (9, 209, 719, 154))


def test_flipping_any_one_of_the_first_44_bits_of_a_key_digest_changes_its_memorable_id():
    digest = key_art(ed25519.Ed25519PrivateKey.generate()).digest
    original = memorable_id_of_digest(digest)
    flipped = [memorable_id_of_digest(flip_bit(digest, bit)) for bit in range(44)]
    assert len(flipped) == 44 and original not in flipped
    assert len(set(flipped)) == 44
    for bit, words in enumerate(flipped):
        assert words == digest_by_hand(flip_bit(digest, bit)), bit


def test_flipping_a_bit_after_the_44th_of_a_key_digest_keeps_its_memorable_id():
    digest = key_art(ed25519.Ed25519PrivateKey.generate()).digest
    original = memorable_id_of_digest(digest)
    for bit in range(44, 256):
        assert flip_bit(digest, bit) != digest
        assert memorable_id_of_digest(flip_bit(digest, bit)) == original, bit
