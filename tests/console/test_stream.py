"""The console's live feed: operators only; a new access request is announced to open pages; the feed renews
its channel-layer group membership, so a layer that forgets members (channels-redis) does not silence it."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from access.grants import raise_request
from access.models import Transport
from access.services import do_open_session
from forge_core.live import CONSOLE_GROUP, notify_streams
from projects.models import Project
from tests.mcp_api.helpers import HOST, install_remembering_layer, open_stream

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def session_cookie(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    return [(b"host", HOST.encode()), (b"cookie", f"sessionid={cookie}".encode())]


async def test_a_visitor_without_an_operator_login_is_refused(cast):
    async with open_stream("GET", "/console/events", headers=[(b"host", HOST.encode())]) as stream:
        await stream.until_closed()

    assert stream.status == 403


async def test_an_operator_page_hears_of_a_new_access_request(cast):
    headers = await sync_to_async(session_cookie)(cast.operator.user)

    def raise_one() -> None:
        project = Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)
        session = do_open_session(
            cast.caretaker.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25"
        )
        raise_request(cast.caretaker.token, session, project)

    async with open_stream("GET", "/console/events", headers=headers) as stream:
        await stream.first_chunk()
        await sync_to_async(raise_one)()
        whats = {(await stream.next_event()).json()["what"] for _ in range(2)}

    assert stream.status == 200
    assert whats == {"sessions", "access_requests"}


async def test_an_open_page_renews_its_group_membership_and_still_hears_after_the_layer_forgot_it(cast, settings):
    settings.FORGE_SSE_KEEPALIVE_SECONDS = 0.05
    settings.FORGE_STREAM_RECHECK_SECONDS = 0.05
    layer = install_remembering_layer()
    headers = await sync_to_async(session_cookie)(cast.operator.user)

    async with open_stream("GET", "/console/events", headers=headers) as stream:
        await stream.first_chunk()
        channel = await layer.next_join(CONSOLE_GROUP)
        layer.forget(CONSOLE_GROUP)
        assert await layer.next_join(CONSOLE_GROUP) == channel
        await sync_to_async(notify_streams)(CONSOLE_GROUP, "console.changed", what="mcp")
        event = await stream.next_event()

    assert event.event == "changed"
    assert event.json() == {"what": "mcp"}
