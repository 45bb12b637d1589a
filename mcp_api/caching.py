"""Caching hints on the results of the stateless revision (2026-07-28, SEP-2549): `ttlMs`, how long a client
may take a result as fresh, and `cacheScope`, who may keep it ("private": this credential's cache only;
"public": any cache, shared gateways included). The spec asks for them on `server/discover`, the four list
methods and `resources/read`; the earlier revisions have no such fields, so nothing is added there.

Each result gets the hint of what it depends on, chosen here in one place:
- `PER_CALLER` (0 ms, private): it depends on who asks (the projects they may view, a read-only peer's tool
  list), on this session's grants, or on state that changes at any time (the MCP switch, a working draft).
- `SHARED_LIVE` (0 ms, public): the same for everyone but it may change at any moment (an open resource
  other than the guidelines, whose content its provider decides).
- `STATIC` (one hour, public): the same for everyone, and it changes only with the server's code, so only
  across a restart: the prompt and template lists and the guidelines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext


@dataclass(frozen=True)
class CacheHint:
    ttl_ms: int
    scope: str  # "private" or "public"

    def apply(self, ctx: CallContext, result: dict[str, Any]) -> dict[str, Any]:
        """The result with this hint when the call's revision has caching hints (2026-07-28)."""
        if ctx.stateless:
            result.update({"ttlMs": self.ttl_ms, "cacheScope": self.scope})
        return result


PER_CALLER = CacheHint(0, "private")
SHARED_LIVE = CacheHint(0, "public")
STATIC = CacheHint(3_600_000, "public")
