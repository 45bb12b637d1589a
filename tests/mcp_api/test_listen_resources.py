"""Resource subscriptions at 2026-07-28, through `subscriptions/listen`'s `resourceSubscriptions`: each
address passes the gates of resources/subscribe (a project's needs the grant of the session handle named in
`_meta`), the acknowledgement names the addresses followed, and a change to the accepted file or the draft is
announced on the listen stream with its subscription id; a refused address refuses the listen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from access.models import McpSession
from access.services import do_end_session
from audit.models import AuditEvent, EventKind
from mcp_api.consent import SESSION_HANDLE_META_KEY
from mcp_api.jsonrpc import INVALID_PARAMS, REFUSED
from mcp_api.resource_updates import announce
from mcp_api.resources import GUIDELINES_URI
from mcp_api.revisions import SUBSCRIPTION_ID_META_KEY
from projects.models import Project
from projects.services import do_import_project
from tests.mcp_api.helpers import allow_project, envelope, open_stream, send, stateless_headers, stateless_rpc
from tests.mcp_api.test_resources import begin_a_group
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

SLUG = "steps"
ACCEPTED = f"forge://projects/{SLUG}/accepted.xml"
DRAFT = f"forge://projects/{SLUG}/draft.xml"
BODY = f"forge://projects/{SLUG}/pous/FlowTotal/body.st"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def steps(transactional_db) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug=SLUG, acting_user="tests")


def listen(uris: Any, handle: str | None = None) -> dict[str, Any]:
    meta = envelope(**({SESSION_HANDLE_META_KEY: handle} if handle else {}))
    notifications = {"resourceSubscriptions": uris}
    return stateless_rpc("subscriptions/listen", {"notifications": notifications}, id="listen-r", meta=meta)


def headers(token: str) -> list[tuple[bytes, bytes]]:
    return stateless_headers(token, "subscriptions/listen")


def updated(uri: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": uri, "_meta": {SUBSCRIPTION_ID_META_KEY: "listen-r"}},
    }


async def test_a_listen_follows_the_draft_and_hears_when_it_changes(cast, steps):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(allow_project)(token, SLUG)

    async with open_stream(
        "POST", "/mcp", headers=headers(token), body=listen([DRAFT, GUIDELINES_URI], handle)
    ) as stream:
        ack = (await stream.next_event()).json()
        await database_sync_to_async(begin_a_group)(steps, cast.caretaker.user)
        event = (await stream.next_event()).json()

    assert ack["params"]["notifications"] == {"resourceSubscriptions": [DRAFT, GUIDELINES_URI]}
    assert event == updated(DRAFT)


async def test_a_new_accepted_file_is_announced_for_every_followed_address_a_draft_change_only_for_the_draft(
    cast, steps
):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(allow_project)(token, SLUG)

    async with open_stream("POST", "/mcp", headers=headers(token), body=listen([ACCEPTED, BODY], handle)) as stream:
        await stream.next_event()
        await sync_to_async(announce)(steps.pk, draft_only=True)  # nothing this stream follows
        await sync_to_async(announce)(steps.pk, draft_only=False)
        first, second = (await stream.next_event()).json(), (await stream.next_event()).json()

    assert [first, second] == [updated(ACCEPTED), updated(BODY)]


async def test_a_listen_without_the_grant_is_refused_with_what_to_do_and_audited(cast, steps):
    response = await send("POST", "/mcp", headers=headers(cast.operator.raw_token), body=listen([DRAFT]))

    assert response.status == 200
    assert response.error_code == REFUSED
    assert response.json()["error"]["data"]["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    [row] = await database_sync_to_async(list)(AuditEvent.objects.filter(tool="subscriptions/listen"))
    assert (row.kind, row.outcome, row.project) == (EventKind.TOOL_CALL, "FORGE_ERR_PROJECT_ACCESS_PENDING", SLUG)


@pytest.mark.parametrize(
    "uris", ["forge://projects/steps/draft.xml", ["forge://nowhere"], [42], [DRAFT] * 101], ids=str
)
async def test_resource_subscriptions_that_are_not_addresses_of_this_server_are_invalid_params(cast, steps, uris):
    handle = await database_sync_to_async(allow_project)(cast.operator.raw_token, SLUG)

    response = await send("POST", "/mcp", headers=headers(cast.operator.raw_token), body=listen(uris, handle))

    assert response.status == 400
    assert response.error_code == INVALID_PARAMS


async def test_a_listen_following_a_projects_resources_ends_once_its_session_handle_has_ended(cast, steps, settings):
    settings.FORGE_SSE_KEEPALIVE_SECONDS = 0.05
    settings.FORGE_STREAM_RECHECK_SECONDS = 0.05
    token = cast.operator.raw_token
    handle = await database_sync_to_async(allow_project)(token, SLUG)

    async with open_stream("POST", "/mcp", headers=headers(token), body=listen([DRAFT], handle)) as stream:
        await stream.next_event()
        session = await database_sync_to_async(McpSession.objects.select_related("token__owner").get)(pk=handle)
        await database_sync_to_async(do_end_session)(session, reason="tests")
        [final] = await stream.until_closed()

    assert final.json()["id"] == "listen-r"
    assert final.json()["result"]["resultType"] == "complete"
