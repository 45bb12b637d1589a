"""The scale-out channel layer (forge_core.redis_layer): channels-redis's layer whose group send makes two round
trips to Redis; a member hears a group's message once, a full member is skipped, a member past the group's
expiry is dropped. Needs REDIS_URL (each test uses a prefix of its own and flushes it)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from forge_core.redis_layer import RedisChannelLayer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL (a Redis the tests may write to)"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def layer() -> AsyncIterator[RedisChannelLayer]:
    made = RedisChannelLayer(hosts=[os.environ["REDIS_URL"]], prefix=f"forge-test-{uuid.uuid4().hex}", capacity=2)
    try:
        yield made
    finally:
        await made.flush()


class RoundTrips:
    """Counts the commands and pipelines a Redis client sends (each one round trip)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, layer: RedisChannelLayer) -> None:
        self.count = 0
        connection = layer.connection(0)
        real_command, real_pipeline = connection.execute_command, connection.pipeline

        async def command(*args, **kwargs):
            self.count += 1
            return await real_command(*args, **kwargs)

        def pipeline(*args, **kwargs):
            made = real_pipeline(*args, **kwargs)
            real_execute = made.execute

            async def execute(*a, **k):
                self.count += 1
                return await real_execute(*a, **k)

            made.execute = execute
            return made

        monkeypatch.setattr(connection, "execute_command", command)
        monkeypatch.setattr(connection, "pipeline", pipeline)


async def test_every_member_of_a_group_hears_its_message_once_after_two_round_trips(layer, monkeypatch):
    local = await layer.new_channel()  # a process-local channel, as a waiting call's
    plain = "forge.test.plain"
    for channel in (local, plain):
        await layer.group_add("decisions", channel)
    trips = RoundTrips(monkeypatch, layer)

    await layer.group_send("decisions", {"type": "confirmation.decided", "outcome": {"state": "executed"}})

    assert trips.count == 2
    for channel in (local, plain):
        assert await layer.receive(channel) == {"type": "confirmation.decided", "outcome": {"state": "executed"}}
    await layer.group_send("decisions", {"type": "next"})
    assert (await layer.receive(local))["type"] == "next"  # nothing left over from the first send


async def test_a_member_at_its_capacity_misses_the_message_and_the_others_hear_it(layer):
    full, other = "forge.test.full", "forge.test.other"
    for channel in (full, other):
        await layer.group_add("decisions", channel)
    for number in range(2):  # the layer's capacity
        await layer.send(full, {"type": "filler", "number": number})

    await layer.group_send("decisions", {"type": "confirmation.decided"})

    assert [(await layer.receive(full))["type"] for _ in range(2)] == ["filler", "filler"]
    assert (await layer.receive(other))["type"] == "confirmation.decided"
    await layer.send(full, {"type": "after"})
    assert (await layer.receive(full))["type"] == "after"  # the decision was never queued behind the fillers


async def test_a_member_past_the_group_expiry_is_dropped_before_the_send(layer):
    gone, kept = "forge.test.gone", "forge.test.kept"
    await layer.group_add("decisions", kept)
    key = layer._group_key("decisions")
    # Joined longer ago than the group expiry, as a stream that stopped re-joining.
    await layer.connection(0).zadd(key, {gone: int(time.time()) - layer.group_expiry - 10})

    await layer.group_send("decisions", {"type": "confirmation.decided"})

    assert (await layer.receive(kept))["type"] == "confirmation.decided"
    assert await layer.connection(0).zrange(key, 0, -1) == [kept.encode()]
