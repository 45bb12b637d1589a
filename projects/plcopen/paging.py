"""Paging: how much one read answer may hold, and the opaque cursors that ask for the next part.

Every list a read query returns is bounded (`check_limit`) and continued with a cursor: URL-safe base64 of
a small JSON object naming the kind of call (`k`), a digest of the query (`q`) and the position to go on
from, so a cursor handed to another query, or to another kind of call, is refused with a sentence saying
to start again rather than answering with the wrong page. Pure: no Django, no database.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

T = TypeVar("T")

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 200
# A POU body is read in chunks of this many characters.
DEFAULT_BODY_LIMIT: Final = 8000
MAX_BODY_LIMIT: Final = 32000


def check_limit(limit: int, maximum: int = MAX_LIMIT) -> int:
    """The limit, when it is a whole number from 1 to `maximum`; ValueError saying what is wrong otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError("limit must be an integer")
    if limit > maximum:
        raise ValueError(f"limit {limit} is above the maximum of {maximum}")
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return limit


def encode_cursor(payload: dict[str, Any]) -> str:
    """The opaque cursor for a payload; `k` in it names the kind of call it continues."""
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str) -> dict[str, Any]:
    """The payload of a cursor issued for this kind of call; ValueError for any other."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("the cursor is not valid; start again without one") from None
    if not isinstance(payload, dict) or payload.get("k") != kind:
        raise ValueError("the cursor belongs to another kind of call; start again without one")
    return payload


def query_key(*parts: object) -> str:
    """A short digest of what a query asks, so a cursor is only taken back by the same query."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def position_from(cursor: str | None, kind: str, key: str) -> int:
    """Where a query goes on: 0 without a cursor, else the position its cursor holds for this query."""
    if cursor is None:
        return 0
    payload = decode_cursor(cursor, kind)
    if payload.get("q") != key:
        raise ValueError("the cursor belongs to a different query; repeat the query without a cursor")
    position = payload.get("p")
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError("the cursor is not valid; start again without one")
    return position


def page(
    entries: Sequence[T], matches: Callable[[T], bool], start: int, limit: int, kind: str, key: str
) -> tuple[list[T], str | None]:
    """At most `limit` of the entries from `start` on that match, and the cursor to the next one (None at
    the end)."""
    found: list[T] = []
    position = start
    while position < len(entries):
        entry = entries[position]
        position += 1
        if matches(entry):
            if len(found) == limit:
                return found, encode_cursor({"k": kind, "q": key, "p": position - 1})
            found.append(entry)
    return found, None
