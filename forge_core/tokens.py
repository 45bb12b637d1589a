"""Bearer tokens as values: how a raw token is minted, which digest is stored for it, and which kind it is.

Forge has three kinds of bearer token, each in its own table: client tokens (`access.models.ClientToken`, raw
value `fmcp_...`), which open MCP sessions, operator tokens (`console.models.OperatorToken`, `fop_...`),
which act as an operator on the operator API, and runtime connector tokens (`access.models.RuntimeToken`,
`frt_...`), which only post their project's runtime snapshots. All are minted, stored and looked up the same
way, here: the raw value is the kind's prefix and 256 random bits, shown once and never stored; the database
keeps its SHA-256 digest and its first characters (to recognise it in a list). A presented value is looked up only in
the table of the kind its prefix names (`presented_digest`), so one kind can never authenticate as another
even before the lookup misses.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

CLIENT_TOKEN_PREFIX = "fmcp_"
OPERATOR_TOKEN_PREFIX = "fop_"
RUNTIME_TOKEN_PREFIX = "frt_"
SHOWN_CHARS = 12  # the stored `prefix`: the kind's prefix and a few random characters, never enough to guess
MAX_TOKEN_CHARS = 200  # a longer bearer value is refused before it is hashed


def token_digest(raw: str) -> str:
    # Tokens carry 256 bits of randomness, so a plain SHA-256 is the right digest: a slow password hash
    # would add nothing but latency to every call.
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class MintedToken:
    raw: str  # shown once, never stored
    digest: str
    shown: str  # the first characters, stored as the token's `prefix`


def mint_token(prefix: str) -> MintedToken:
    """A new raw token of the kind `prefix` names, with what is stored for it."""
    raw = prefix + secrets.token_urlsafe(32)
    return MintedToken(raw=raw, digest=token_digest(raw), shown=raw[:SHOWN_CHARS])


def presented_digest(raw: str | None, prefix: str) -> str | None:
    """The digest to look up for a presented bearer value, or None when it is not a token of the kind
    `prefix` names (another kind, no value, or too long to be one)."""
    if not raw or not raw.startswith(prefix) or len(raw) > MAX_TOKEN_CHARS:
        return None
    return token_digest(raw)
