"""Messages to open streams and console pages, through the channel layer (whichever process holds them), and
the response headers every event stream (the MCP transports' and the console's live feed) opens with."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

CONSOLE_GROUP = "console"

# No caching or transforming proxy may hold events back (x-accel-buffering: nginx's response buffering).
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


def notify_streams(group: str, event_type: str, **payload) -> None:
    """Send an event to every stream in a channel-layer group, whichever process holds it."""
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(group, {"type": event_type, **payload})


def notify_console(what: str) -> None:
    """Tell open console pages that `what` changed, once the current transaction commits."""
    transaction.on_commit(lambda: notify_streams(CONSOLE_GROUP, "console.changed", what=what))
