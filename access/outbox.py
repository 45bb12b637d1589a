"""The outbox that carries messages for open streams from a process outside the server to the server.

On the embedded in-memory channel layer each process has a layer of its own, so a `manage.py` command
cannot reach the streams the server holds. `forge_core.live` writes such a process's messages here as well
(`write`, registered by the composition root), and the server follows the table (`follow`, started by
`runmcp`): twice a second one indexed query for rows after the last one seen, each sent through the server's
own layer, in order. A row is delivered at most once per server process, starting from those written after
it started; repeating one would be harmless anyway (a second `list_changed` says nothing new, a stream that
was closed has left its groups). Rows older than `KEEP` are pruned. With Redis nothing is written here.

Each row is written after the change it reports has committed, in a statement of its own. On PostgreSQL two
commands writing at the same instant may commit their ids out of order, and the follower may pass over the
earlier one; the streams concerned then learn of it at their next re-check, as they would without the
outbox. SQLite assigns ids under its single writer lock, so there they arrive in order.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import DatabaseError, transaction
from django.db.models import Max
from django.utils import timezone

from access.models import OutboxMessage

logger = logging.getLogger("forge.outbox")

POLL_SECONDS = 0.5
BATCH = 200
KEEP = timedelta(minutes=5)
PRUNE_EVERY = 120  # polls: once a minute


def write(group: str, message: dict[str, Any]) -> None:
    """Put a message for a channel-layer group in the outbox (in the caller's transaction, if any: a savepoint
    of its own, so that a failed write leaves that transaction usable)."""
    with transaction.atomic():
        OutboxMessage.objects.create(group=group, message=message)


def last_id() -> int:
    return OutboxMessage.objects.aggregate(last=Max("id"))["last"] or 0


def after(seen: int) -> list[tuple[int, str, dict[str, Any]]]:
    """The next rows after `seen`, oldest first, at most BATCH of them."""
    rows = OutboxMessage.objects.filter(id__gt=seen).order_by("id").values_list("id", "group", "message")
    return list(rows[:BATCH])


def prune() -> int:
    """Delete the rows older than KEEP; every follower has sent them long ago."""
    deleted, _ = OutboxMessage.objects.filter(created_at__lt=timezone.now() - KEEP).delete()
    return deleted


async def follow(*, interval: float = POLL_SECONDS) -> None:
    """Send every row written after this started through this process's channel layer, until cancelled."""
    layer = get_channel_layer()
    seen: int | None = None
    polls = 0
    while True:
        try:
            if seen is None:
                seen = await database_sync_to_async(last_id)()
            for row_id, group, message in await database_sync_to_async(after)(seen):
                seen = row_id  # first: a row that cannot be sent is not tried again
                await layer.group_send(group, message)
            polls += 1
            if polls % PRUNE_EVERY == 0:
                await database_sync_to_async(prune)()
        except DatabaseError as exc:
            logger.warning("could not read the outbox (%s); will try again", type(exc).__name__)
        except Exception:  # the follower must outlive one bad row or one bug: log it and go on
            logger.exception("the outbox follower failed; will try again")
        await asyncio.sleep(interval)
