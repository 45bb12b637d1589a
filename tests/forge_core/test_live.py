"""Events to open streams (forge_core.live): a thread the server handed work to hands its events to the server's
event loop and goes on, and the loop sends them in the order they were handed over; elsewhere they are sent at once."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from forge_core.live import notify_streams, on_commit_first

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def joined(group: str) -> str:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return channel


async def test_a_worker_thread_goes_on_while_the_loop_sends_its_events_in_the_order_sent(monkeypatch):
    layer = get_channel_layer()
    channel = await joined("live-order")
    gate = asyncio.Event()  # a slow channel layer (Redis far away): nothing is sent until it opens
    real_send = layer.group_send

    async def slow_send(group: str, message: dict) -> None:
        await gate.wait()
        await real_send(group, message)

    monkeypatch.setattr(layer, "group_send", slow_send)

    def approve() -> None:
        for number in range(3):
            notify_streams("live-order", "test.event", number=number)

    await asyncio.wait_for(sync_to_async(approve, thread_sensitive=False)(), 5)  # back with nothing sent
    gate.set()
    received = [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(3)]

    assert [message["number"] for message in received] == [0, 1, 2]
    assert {message["type"] for message in received} == {"test.event"}


def test_outside_the_server_an_event_is_sent_before_the_call_returns():
    layer = get_channel_layer()

    async def make_channel() -> str:
        return await joined("live-direct")

    from asgiref.sync import async_to_sync

    channel = async_to_sync(make_channel)()
    notify_streams("live-direct", "test.event", number=7)

    message = async_to_sync(layer.receive)(channel)
    assert message == {"type": "test.event", "number": 7}


@pytest.mark.django_db(transaction=True)
def test_a_hook_put_first_runs_before_the_hooks_already_waiting_for_the_commit():
    ran: list[str] = []

    with transaction.atomic():
        transaction.on_commit(lambda: ran.append("earlier"))
        on_commit_first(lambda: ran.append("first"))
        transaction.on_commit(lambda: ran.append("later"))
        assert ran == []

    assert ran == ["first", "earlier", "later"]


@pytest.mark.django_db(transaction=True)
def test_a_hook_put_first_inside_a_savepoint_rolled_back_never_runs():
    ran: list[str] = []

    with transaction.atomic():
        transaction.on_commit(lambda: ran.append("kept"))
        with contextlib.suppress(RuntimeError), transaction.atomic():
            on_commit_first(lambda: ran.append("dropped"))
            raise RuntimeError("rolled back to the savepoint")

    assert ran == ["kept"]


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_hook_put_first_runs_at_once():
    ran: list[str] = []

    on_commit_first(lambda: ran.append("now"))

    assert ran == ["now"]
