"""The hot path's thread hops (DESIGN section 16): a plain exchange makes exactly one, a stream's events none.

Every hop from the event loop to a worker thread goes through the pool's own hop (`forge_core.workers.in_pool`)
or asgiref's `SyncToAsync` (Channels' `database_sync_to_async` and the `aclose_old_connections` of its stock
`dispatch` included), so counting the calls of both counts the hops.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from asgiref.sync import SyncToAsync
from channels.layers import get_channel_layer

from access.models import BROADCAST_GROUP
from forge_core.workers import LastIdleFirst
from tests.mcp_api.helpers import mcp_headers, open_session, open_stream, post, rpc

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def hops(monkeypatch) -> Iterator[list[str]]:
    """The names of the functions each hop made from now on ran in a worker thread."""
    made: list[str] = []
    real_call = SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        made.append(getattr(self.func, "__name__", repr(self.func)))
        return await real_call(self, *args, **kwargs)

    real_hand = LastIdleFirst.hand

    def handed(self, work):
        made.append(getattr(work.fn, "__name__", repr(work.fn)))
        return real_hand(self, work)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    monkeypatch.setattr(LastIdleFirst, "hand", handed)
    yield made


async def test_a_tools_call_on_a_session_makes_one_thread_hop(cast, hops):
    token = cast.operator.raw_token
    session_id = await open_session(token)
    hops.clear()

    response = await post(token, rpc("tools/call", {"name": "server_info"}), session_id=session_id)

    assert response.status == 200
    assert len(hops) == 1, hops


async def test_an_event_on_an_open_stream_makes_no_thread_hop(cast, hops):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        hops.clear()
        await get_channel_layer().group_send(BROADCAST_GROUP, {"type": "mcp.tools_changed"})
        changed = await stream.next_event()
        assert hops == []

    assert changed.json()["method"] == "notifications/tools/list_changed"
