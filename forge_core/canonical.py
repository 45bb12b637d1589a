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
from _json import make_encoder
from typing import Any

# What `json.dumps` with these options builds on every call, built once: `encode` keeps no state between calls.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON text; ValueError for NaN or an infinity, TypeError for what JSON cannot hold."""
    return _ENCODER.encode(value)


# The C encoder `_ENCODER.encode` builds on every call (with the same options, so the same text), built once. It keeps
# no state between calls but the set of containers it is inside of, for the circular-reference check, which it is
# built without: shared by every thread, that set would make a value that two threads encode at once look circular.
_TREE_ENCODER = make_encoder(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False)


def canonical_json_of_tree(value: Any) -> str:
    """`canonical_json(value)` for a value that holds no container inside itself (a tree, such as `audit.services`'
    sanitized arguments, built afresh): the same text, without the set-up `canonical_json` pays on every call (a
    Python `iterencode`, a new C encoder and its circular-reference check: about half of a small object's cost).
    A value that does hold itself recurses until Python's recursion limit (RecursionError) instead of ValueError."""
    return "".join(_TREE_ENCODER(value, 0))
