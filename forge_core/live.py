"""Messages to open streams and console pages, through the channel layer (whichever process holds them), and
the response headers every event stream (the MCP transports' and the console's live feed) opens with.

With Redis (`REDIS_URL`) every process shares one channel layer, so a message sent anywhere reaches every
stream. The embedded default is an in-memory layer, one per process: a `manage.py` command (`mcp_switch off`,
`revoke_token`, `access_requests revoke`, `shell`) could not reach the server's streams through it. So
`manage.py` marks its process as outside the server (`runmcp` takes the mark off again: it holds the streams),
and there, on an in-memory layer, every message is also written to the database outbox that the composition
root registered (`relay_through`); the server follows the outbox and sends each message through its own
layer (`access.outbox`). With Redis nothing is written: the direct send already arrives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import DatabaseError, transaction

logger = logging.getLogger("forge.live")

CONSOLE_GROUP = "console"
# Every MCP stream of every principal joins it: what changes the tool set for all (the MCP switch, the caretaker).
BROADCAST_GROUP = "mcp.broadcast"


class _Relay:
    """Where this process writes what its in-memory layer cannot deliver, and whether it must."""

    write: Callable[[str, dict[str, Any]], None] | None = None
    outside_server = False


def relay_through(write: Callable[[str, dict[str, Any]], None]) -> None:
    """Register how a message is written to the outbox the server follows (the composition root does)."""
    _Relay.write = write


def mark_outside_server(outside: bool = True) -> None:
    """Say whether this process is outside the server (holds no streams): `manage.py` marks it, `runmcp`
    takes the mark off."""
    _Relay.outside_server = outside


# No caching or transforming proxy may hold events back (x-accel-buffering: nginx's response buffering).
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


def notify_streams(group: str, event_type: str, **payload) -> None:
    """Send an event to every stream in a channel-layer group, whichever process holds it (outside the server,
    on an in-memory layer, through the outbox the server follows)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": event_type, **payload}
    async_to_sync(layer.group_send)(group, message)
    if _Relay.outside_server and _Relay.write is not None and isinstance(layer, InMemoryChannelLayer):
        try:
            _Relay.write(group, message)
        except DatabaseError as exc:
            # The change itself is committed; open streams still learn of it at their next re-check.
            logger.warning("could not write %s for %s to the outbox (%s)", event_type, group, type(exc).__name__)


def notify_console(what: str) -> None:
    """Tell open console pages that `what` changed, once the current transaction commits."""
    transaction.on_commit(lambda: notify_streams(CONSOLE_GROUP, "console.changed", what=what))


def notify_trust_changed() -> None:
    """Tell every open MCP stream that the roster, its CRL or the trust store changed, once the current
    transaction commits: a peer's stream checks its certificate again at once (`mcp.trust_changed`)."""
    transaction.on_commit(lambda: notify_streams(BROADCAST_GROUP, "mcp.trust_changed"))


def notify_tools_changed() -> None:
    """Tell every open MCP stream that the tool set changed (`notifications/tools/list_changed`), once the
    current transaction commits."""
    transaction.on_commit(lambda: notify_streams(BROADCAST_GROUP, "mcp.tools_changed"))
