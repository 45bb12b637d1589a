"""The mechanics every event stream of the service shares: the MCP transports' streams and the console's feed.

One consumer instance answers one HTTP request with a long-lived `text/event-stream` fed by channel-layer
groups, so an event sent by any process reaches it (DESIGN section 3). `EventStreamConsumer.stream` joins
the groups, sends the headers and the first bytes, and then dispatches, until the client goes away or a
handler ends the stream, whatever arrives from the client and from the layer to the method named after its
type (`console.changed` lands in `console_changed`), without Channels' per-message thread hop. Meanwhile it
sends a keep-alive comment every `FORGE_SSE_KEEPALIVE_SECONDS`, so that idle proxies do not cut the stream,
and every `FORGE_STREAM_RECHECK_SECONDS` asks the subclass whether the stream may stay open and adds it to
its groups again: channels-redis forgets a group member after its `group_expiry`, and a stream that
outlives that would stop hearing its groups without a word. At the end it leaves its groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings

from forge_core.live import SSE_HEADERS

logger = logging.getLogger("forge.streams")

KEEPALIVE = b": keepalive\n\n"


class EventStreamConsumer(AsyncConsumer):
    """Base of a consumer that answers with an event stream fed by channel-layer groups.

    A subclass decides in `__call__` whether to stream, then awaits `stream(...)`, which returns when the
    stream has ended. It may refine `lapsed` (checked at every keep-alive, without the database),
    `may_stay_open` (at every recheck, may use the database) and `stream_closed` (after the stream left its
    groups), and end the stream from a handler with `end_stream`."""

    async def stream(
        self,
        receive: Any,
        groups: Iterable[str],
        *,
        first: bytes,
        headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        self.channel_layer: Any = get_channel_layer()
        self.channel_name: str = await self.channel_layer.new_channel()
        self.stream_groups = list(groups)
        await self.join_groups()
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + list(headers)})
        await self.send({"type": "http.response.body", "body": first, "more_body": True})
        keepalive = asyncio.create_task(self.keep_alive())
        try:
            with contextlib.suppress(StopConsumer):  # a handler ended the stream, or the layer failed
                await await_many_dispatch([receive, self.channel_receive], self.dispatch)
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keepalive
            for group in self.stream_groups:
                with contextlib.suppress(Exception):
                    await self.channel_layer.group_discard(group, self.channel_name)
            await self.stream_closed()

    async def channel_receive(self) -> dict[str, Any]:
        """The next event for this stream's channel. When the layer fails (a shared layer's server gone or too
        slow to answer), the stream ends, said in one line of the log: the client reconnects to a fresh one,
        and one stream's trouble is not a traceback."""
        try:
            message: dict[str, Any] = await self.channel_layer.receive(self.channel_name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the layer's own errors (redis-py's, OSError, timeouts) vary by backend
            logger.warning("a stream's channel layer failed (%s: %s); the stream ends", type(exc).__name__, exc)
            raise StopConsumer from None
        return message

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch makes a thread hop per message to close stale connections; the database work
        # of a stream already runs in database_sync_to_async, which does that, so the hop is pure cost.
        handler = getattr(self, get_handler_name(message), None)
        if handler is not None:
            await handler(message)

    async def join_groups(self) -> None:
        """Join the stream's groups, or renew its membership (the layer keeps it `group_expiry` from here)."""
        for group in self.stream_groups:
            await self.channel_layer.group_add(group, self.channel_name)

    async def keep_alive(self) -> None:
        """Send keep-alive comments; now and then re-check the stream and renew its groups; close it when it
        lapses."""
        interval = settings.FORGE_SSE_KEEPALIVE_SECONDS
        recheck = settings.FORGE_STREAM_RECHECK_SECONDS
        since_check = 0.0
        try:
            while True:
                await asyncio.sleep(interval)
                since_check += interval
                stays_open = not self.lapsed()
                if stays_open and since_check >= recheck:
                    since_check = 0.0
                    stays_open = await self.may_stay_open()
                    await self.join_groups()
                if not stays_open:
                    await self.close_soon()
                    return
                await self.send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
        except asyncio.CancelledError:
            raise
        except Exception:  # the stream's own housekeeping must not leave it hanging: end it
            logger.exception("stream keep-alive failed")
            with contextlib.suppress(Exception):
                await self.close_soon()

    async def close_soon(self) -> None:
        """End the stream from outside the dispatch loop: the loop is the one place a stream ends."""
        await self.channel_layer.send(self.channel_name, {"type": "stream.close"})

    def lapsed(self) -> bool:
        """Whether the stream must end now, judged without the database (at every keep-alive)."""
        return False

    async def may_stay_open(self) -> bool:
        """Whether the stream may stay open, judged now and then (every `FORGE_STREAM_RECHECK_SECONDS`)."""
        return True

    async def stream_closed(self) -> None:
        """What to do once the stream has ended and left its groups."""

    async def end_stream(self) -> None:
        """End the response and the dispatch loop (from a handler)."""
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        raise StopConsumer()

    async def stream_close(self, event: dict[str, Any]) -> None:
        await self.end_stream()

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        raise StopConsumer()

    async def http_request(self, message: dict[str, Any]) -> None:
        """Body chunks after the request was read belong to nothing; ignore them."""
