"""The console's live feed: an event stream that tells open console pages when what they show changed.

A console page (dashboard, access requests) opens `GET /console/events` with the operator's session
cookie and reloads its content when an event arrives, so a new access request appears without a
reload. Events travel through the channel layer group `console`, so a change made by any process
reaches every open page. The stream carries no data beyond what changed (`access_requests`,
`sessions`, `mcp`): the page fetches the content itself, with its own permissions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings

from forge_core.console import is_operator
from forge_core.live import CONSOLE_GROUP, SSE_HEADERS
from forge_core.origin import refusal_reason


class ConsoleEventsConsumer(AsyncConsumer):
    async def __call__(self, scope, receive, send) -> None:
        self.scope, self.base_send = scope, send
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        user = scope.get("user")
        allowed = (
            refusal_reason(headers) is None and user is not None and await database_sync_to_async(is_operator)(user)
        )
        if scope.get("method") != "GET" or not allowed:
            await send({"type": "http.response.start", "status": 403, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Log in to the console as an operator."})
            return
        self.channel_layer = get_channel_layer()
        self.channel_name = await self.channel_layer.new_channel()
        await self.channel_layer.group_add(CONSOLE_GROUP, self.channel_name)
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await send({"type": "http.response.body", "body": b": console events\n\n", "more_body": True})
        keepalive = asyncio.create_task(self.keep_alive())
        try:
            await await_many_dispatch([receive, lambda: self.channel_layer.receive(self.channel_name)], self.dispatch)
        except StopConsumer:
            pass
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keepalive
            await self.channel_layer.group_discard(CONSOLE_GROUP, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is not None:
            await handler(message)

    async def keep_alive(self) -> None:
        while True:
            await asyncio.sleep(settings.FORGE_SSE_KEEPALIVE_SECONDS)
            await self.base_send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})

    async def console_changed(self, event: dict[str, Any]) -> None:
        data = json.dumps({"what": event.get("what", "")})
        await self.base_send(
            {"type": "http.response.body", "body": f"event: changed\ndata: {data}\n\n".encode(), "more_body": True}
        )

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        raise StopConsumer()

    async def http_request(self, message: dict[str, Any]) -> None:
        """The GET's (empty) body: nothing to do."""
