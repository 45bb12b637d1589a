"""The service's canonical JSON: the one serialization its digests, MACs and Merkle leaves are computed over.

Keys sorted, no whitespace, text as its own characters rather than `\\u` escapes, and NaN and infinities
refused (JSON has no form for them). The audit chain's MACs, the mirror's lines and the Merkle tree's
leaves are computed over exactly these bytes (as UTF-8), and so are the digests of the recovery
contracts' targets and intents (after `confirmations.sealing` normalises them) and the arguments digest
of a pending confirmation: a change here would leave every stored audit event failing verification, so
the form is fixed.
"""

from __future__ import annotations

import json
from typing import Any

# What `json.dumps` with these options builds on every call, built once: `encode` keeps no state between calls.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON text; ValueError for NaN or an infinity, TypeError for what JSON cannot hold."""
    return _ENCODER.encode(value)
