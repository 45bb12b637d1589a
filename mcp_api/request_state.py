"""Request states a client carries between the rounds of one call (2026-07-28, SEP-2322): sealed here, opened
only if they authenticate.

A state is `<version>.<payload>.<mac>`: the payload is the parts as base64url JSON, the mac an HMAC-SHA256 of
the parts under the server's contract key (`confirmations.sealing`, a secret file, not in the database). The
client can read a state but not change it: what a state holds must be something the client may see (its own
answers, ids it was given), never a secret. Each user of a state names its own version and purpose, so a state
made for one use never opens for another.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Mapping
from typing import Any

from confirmations import sealing


class StateRefused(ValueError):
    """The state is not one this server issued for this use, or it was changed."""


def seal(version: str, parts: Mapping[str, Any]) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(parts, sort_keys=True).encode()).decode().rstrip("=")
    return f"{version}.{payload}.{sealing.mac(parts)}"


def unseal(version: str, purpose: str, state: Any, keys: frozenset[str], max_chars: int) -> dict[str, Any]:
    """The parts of `state` once it authenticates, has exactly `keys` and was made for `purpose`; else
    `StateRefused` with the reason (not issued by this server, or changed)."""
    if not isinstance(state, str) or len(state) > max_chars or state.count(".") != 2:
        raise StateRefused("not issued")
    found_version, payload, mac = state.split(".")
    try:
        parts = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        parts = None
    if found_version != version or not isinstance(parts, dict) or set(parts) != keys:
        raise StateRefused("not issued")
    try:
        authentic = hmac.compare_digest(sealing.mac(parts), mac)
    except (sealing.NotCanonical, TypeError, ValueError):
        authentic = False
    if not authentic or parts.get("purpose") != purpose:
        raise StateRefused("changed")
    return parts
