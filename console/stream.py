"""The console's live feed: an event stream that tells open console pages when what they show changed.

A console page (dashboard, access requests) opens `GET /console/events` with the operator's session
cookie and reloads its content when an event arrives, so a new access request appears without a
reload. Events travel through the channel layer group `console`, so a change made by any process
reaches every open page. The stream carries no data beyond what changed (`access_requests`,
`sessions`, `mcp`): the page fetches the content itself, with its own permissions. The stream's
mechanics (keep-alive comments, renewing its group membership, the end on disconnect) are
`forge_core.streams`'.
"""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async

from forge_core.console import is_operator
from forge_core.live import CONSOLE_GROUP
from forge_core.origin import refusal_reason
from forge_core.streams import EventStreamConsumer


class ConsoleEventsConsumer(EventStreamConsumer):
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
        await self.stream(receive, [CONSOLE_GROUP], first=b": console events\n\n")

    async def console_changed(self, event: dict[str, Any]) -> None:
        data = json.dumps({"what": event.get("what", "")})
        await self.send(
            {"type": "http.response.body", "body": f"event: changed\ndata: {data}\n\n".encode(), "more_body": True}
        )
