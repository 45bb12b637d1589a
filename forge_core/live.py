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

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
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


class _Outgoing:
    """The messages this process's threads hand to the server's event loop, sent through the channel layer in the
    order they were handed over, by one task, while the threads go on.

    A thread that sent through `async_to_sync` waited for the event loop to take its turn and, with Redis, for
    Redis's answers: an approval announces three times, and its operator waited for each (a tenth of the approve
    request's time with Redis)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.messages: deque[tuple[str, dict[str, Any]]] = deque()
        self.sending: asyncio.Task[None] | None = None

    def hand_over(self, group: str, message: dict[str, Any]) -> None:
        """From any thread; the loop takes the message in the order handed over (call_soon_threadsafe is FIFO)."""
        self.loop.call_soon_threadsafe(self._take, group, message)

    def _take(self, group: str, message: dict[str, Any]) -> None:
        self.messages.append((group, message))
        if self.sending is None or self.sending.done():
            self.sending = self.loop.create_task(self._send_all())

    async def _send_all(self) -> None:
        layer = get_channel_layer()
        while self.messages:
            group, message = self.messages.popleft()
            try:
                await layer.group_send(group, message)
            except Exception as exc:  # this task's boundary: the change is committed, the next message still goes
                # Open streams and pages re-check on their own (keep-alive and page loads); say what was missed.
                logger.warning("could not send %s to %s (%s: %s)", message.get("type"), group, type(exc).__name__, exc)


_outgoing: dict[asyncio.AbstractEventLoop, _Outgoing] = {}
_outgoing_made = threading.Lock()


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop this thread's work was handed from (asgiref records it for a thread it runs sync code in, and
    the pool's hop, `forge_core.workers`, records it the same way), if it still runs."""
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    if loop is None or getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) != os.getpid():
        return None
    return loop if loop.is_running() else None


def _outgoing_of(loop: asyncio.AbstractEventLoop) -> _Outgoing:
    outgoing = _outgoing.get(loop)
    if outgoing is None:
        with _outgoing_made:
            for gone in [other for other in _outgoing if other.is_closed()]:
                del _outgoing[gone]
            outgoing = _outgoing.setdefault(loop, _Outgoing(loop))
    return outgoing


def notify_streams(group: str, event_type: str, **payload) -> None:
    """Send an event to every stream in a channel-layer group, whichever process holds it (outside the server,
    on an in-memory layer, through the outbox the server follows).

    In a thread the server handed work to, the event is handed to the server's loop, which sends the events of
    the process in order, and the thread goes on; elsewhere (a management command, a test) it is sent here."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": event_type, **payload}
    loop = _server_loop()
    if loop is None:
        async_to_sync(layer.group_send)(group, message)
    else:
        try:
            _outgoing_of(loop).hand_over(group, message)
        except RuntimeError:  # the loop closed since: the server is stopping, and its streams with it
            logger.info("the server's event loop has stopped; %s for %s not sent", event_type, group)
    if _Relay.outside_server and _Relay.write is not None and isinstance(layer, InMemoryChannelLayer):
        try:
            _Relay.write(group, message)
        except DatabaseError as exc:
            # The change itself is committed; open streams still learn of it at their next re-check.
            logger.warning("could not write %s for %s to the outbox (%s)", event_type, group, type(exc).__name__)


def on_commit_first(hook: Callable[[], None]) -> None:
    """`transaction.on_commit(hook)`, run before the hooks the transaction already holds: what a person or a
    client waits for (the outcome of an approval) is handed over first, not after the hooks that read the
    database to tell others (resource subscribers, task listeners), each a round trip on PostgreSQL. Outside a
    transaction it runs at once, as `on_commit` does."""
    transaction.on_commit(hook)
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        # The hook as `on_commit` put it at the end, with the savepoints it belongs to (so a rollback to one of
        # them still drops it).
        connection.run_on_commit.insert(0, connection.run_on_commit.pop())


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
