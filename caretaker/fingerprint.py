"""Fingerprint art a person can compare: memorable IDs (and, with the caretaker, randomart).

A memorable ID is the first 44 bits of a SHA-256 digest written as four words of the BIP-39 English list
(four 11-bit indexes, `word-word-word-word`). People compare words far more reliably than hex, and four
words are enough to notice a substituted key or a confirmation other than the one they meant. Pure
module: no Django, so any app may use it (DESIGN section 2).
"""

from __future__ import annotations

import hashlib
from functools import cache

from mnemonic import Mnemonic

WORDS = 4
BITS_PER_WORD = 11


@cache
def _wordlist() -> tuple[str, ...]:
    words = tuple(Mnemonic("english").wordlist)
    assert len(words) == 1 << BITS_PER_WORD
    return words


def memorable_id_of_digest(digest: bytes) -> str:
    """The memorable ID of a SHA-256 digest (32 bytes): its first 44 bits as four words."""
    if len(digest) != hashlib.sha256().digest_size:
        raise ValueError("a memorable ID is made from a 32-byte SHA-256 digest")
    prefix = int.from_bytes(digest[:6], "big") >> (48 - WORDS * BITS_PER_WORD)
    words = _wordlist()
    indexes = [(prefix >> (BITS_PER_WORD * (WORDS - 1 - i))) & ((1 << BITS_PER_WORD) - 1) for i in range(WORDS)]
    return "-".join(words[i] for i in indexes)


def memorable_id(data: bytes | str) -> str:
    """The memorable ID of some bytes (a key's encoding, or an object's id as text)."""
    raw = data.encode() if isinstance(data, str) else data
    return memorable_id_of_digest(hashlib.sha256(raw).digest())


def normalize_typed_id(typed: str) -> str:
    """What a person typed, compared leniently: case, surrounding blanks and spaces for hyphens."""
    return "-".join(typed.strip().lower().replace("_", " ").replace("-", " ").split())
