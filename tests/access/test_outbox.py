"""The outbox through which a process outside the server reaches the server's open streams on the embedded
in-memory channel layer: what such a process tells streams is also written there (and nothing is written by
the server itself, or on a shared layer), the server's follower sends each row written after it started
through its own layer, and old rows are pruned."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, channel_layers, get_channel_layer
from django.utils import timezone

from access import outbox
from access.models import OutboxMessage
from forge_core import live

TIMEOUT = 5.0


@pytest.fixture
def outside_server() -> Iterator[None]:
    """This process is a `manage.py` command, not the server."""
    live.mark_outside_server()
    yield
    live.mark_outside_server(False)


class SharedLayer(BaseChannelLayer):
    """A channel layer every process shares (as channels-redis is): it only records what it is sent."""

    extensions = ["groups"]

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


def stored() -> list[tuple[str, dict[str, Any]]]:
    return list(OutboxMessage.objects.values_list("group", "message"))


@pytest.mark.django_db
@pytest.mark.usefixtures("outside_server", "fresh_channel_layer")
def test_outside_the_server_what_streams_are_told_is_written_to_the_outbox():
    channel_layers.backends["default"] = InMemoryChannelLayer()  # the embedded default, even when REDIS_URL is set
    live.notify_streams("mcp.broadcast", "mcp.tools_changed")
    live.notify_streams("confirmation.1", "confirmation.decided", outcome={"state": "cancelled"})

    assert stored() == [
        ("mcp.broadcast", {"type": "mcp.tools_changed"}),
        ("confirmation.1", {"type": "confirmation.decided", "outcome": {"state": "cancelled"}}),
    ]


@pytest.mark.django_db
def test_the_server_itself_writes_nothing_to_the_outbox():
    live.notify_streams("mcp.broadcast", "mcp.tools_changed")

    assert stored() == []


@pytest.mark.django_db
@pytest.mark.usefixtures("outside_server", "fresh_channel_layer")
def test_on_a_shared_channel_layer_nothing_is_written_to_the_outbox():
    shared = SharedLayer()
    channel_layers.backends["default"] = shared

    live.notify_streams("mcp.broadcast", "mcp.tools_changed")

    assert shared.sent == [("mcp.broadcast", {"type": "mcp.tools_changed"})]
    assert stored() == []


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_the_follower_sends_each_row_written_after_it_started_through_its_own_layer(monkeypatch):
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add("mcp.broadcast", channel)
    await database_sync_to_async(outbox.write)("mcp.broadcast", {"type": "before.start"})
    started, loop, where_it_stood = asyncio.Event(), asyncio.get_running_loop(), outbox.last_id

    def noting_where_it_starts() -> int:
        seen = where_it_stood()
        loop.call_soon_threadsafe(started.set)
        return seen

    monkeypatch.setattr(outbox, "last_id", noting_where_it_starts)
    follower = asyncio.create_task(outbox.follow(interval=0.01))
    try:
        async with asyncio.timeout(TIMEOUT):
            await started.wait()
            for kind in ("first", "second"):
                await database_sync_to_async(outbox.write)("mcp.broadcast", {"type": kind})
            received = [await layer.receive(channel), await layer.receive(channel)]
    finally:
        follower.cancel()
    assert received == [{"type": "first"}, {"type": "second"}]


@pytest.mark.django_db
def test_pruning_deletes_only_the_rows_older_than_the_outbox_keeps_them():
    outbox.write("mcp.broadcast", {"type": "old"})
    outbox.write("mcp.broadcast", {"type": "recent"})
    OutboxMessage.objects.filter(message__type="old").update(created_at=timezone.now() - outbox.KEEP - timedelta(1))

    assert outbox.prune() == 1
    assert stored() == [("mcp.broadcast", {"type": "recent"})]
