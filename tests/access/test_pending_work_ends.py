"""Ending a principal's standing ends its pending work: revoking its token, revoking its grant on a project,
ending its session and switching MCP off each cancel its pending confirmations (on that project, or on all),
one audit row each naming the cause, and a client waiting on its write call is answered with the refusal.
A cancelled confirmation cannot be approved afterwards.

Every confirmation here is made the way a client makes one: a direct write call (an override deployment)
through the MCP edge, in a stateless session handle that an operator allowed on the project."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from rest_framework.test import APIClient

from access.grants import do_revoke_access
from access.models import AccessRequest, McpSession
from access.services import do_end_session, do_revoke_token, do_switch_mcp
from audit.models import AuditEvent, EventKind
from confirmations.models import ConfirmationState, Contract, PendingConfirmation
from mcp_api.tools.writes import register_write_tools, unregister_write_tools
from projects.models import Project
from projects.services import do_import_project
from tests.conftest import Cast, Member
from tests.mcp_api.helpers import allow_project, open_stream, send, stateless_headers, stateless_rpc
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

C = ConfirmationState
WRITE = "project.write.add_variable"


@pytest.fixture(autouse=True)
def _override(settings, root: Path) -> Iterator[None]:
    """An override deployment (the write tools registered) with its projects under a temporary root."""
    settings.FORGE_OVERRIDE_SECURITIES = True
    register_write_tools()
    yield
    unregister_write_tools()


@pytest.fixture
def projects(transactional_db) -> list[Project]:
    return [do_import_project(fixture_bytes(MAIN), slug=slug, acting_user="tests") for slug in ("steps", "line")]


def write_call(handle: str, project: str, name: str) -> dict[str, Any]:
    arguments = {
        "project": project,
        "session_handle": handle,
        "scope": "pou/LineMain",
        "section": "localVars",
        "name": name,
        "type": "INT",
    }
    return stateless_rpc("tools/call", {"name": WRITE, "arguments": arguments})


async def propose(member: Member, project: str, name: str = "Extra") -> PendingConfirmation:
    """A write call by this member's client on the project: the pending confirmation it made."""
    handle = await database_sync_to_async(allow_project)(member.raw_token, project)
    headers = stateless_headers(member.raw_token, "tools/call", name=WRITE)
    response = await send("POST", "/mcp", headers=headers, body=write_call(handle, project, name))
    answer = response.json()["result"]["structuredContent"]
    assert answer["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", answer
    return await database_sync_to_async(PendingConfirmation.objects.get)(pk=answer["pending_id"])


@database_sync_to_async
def stored(*confirmations: PendingConfirmation) -> list[tuple[str, str | None]]:
    """Each confirmation's state and the cause of its cancellation, as stored."""
    found = {str(c.pk): c for c in PendingConfirmation.objects.filter(pk__in=[c.pk for c in confirmations])}
    return [(found[str(c.pk)].state, found[str(c.pk)].outcome.get("cause")) for c in confirmations]


@database_sync_to_async
def decision_rows(confirmation: PendingConfirmation) -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED).order_by("seq")
    return [(row.outcome, row.called_by) for row in rows if row.arguments["confirmation"] == str(confirmation.pk)]


@database_sync_to_async
def handle_of(confirmation: PendingConfirmation) -> McpSession:
    return McpSession.objects.select_related("token__owner").get(pk=confirmation.session_id)


async def test_revoking_a_token_cancels_its_pending_confirmations(cast: Cast, projects):
    mine = [await propose(cast.operator, "steps"), await propose(cast.operator, "line")]
    theirs = await propose(cast.other_operator, "steps")

    await database_sync_to_async(do_revoke_token)(cast.operator.token, acting_user="admin")

    assert await stored(*mine, theirs) == [(C.CANCELLED, "token_revoked")] * 2 + [(C.PENDING, None)]
    assert await decision_rows(mine[0]) == [("cancelled: token_revoked", "admin")]
    assert await decision_rows(theirs) == []


async def test_revoking_a_grant_cancels_the_sessions_pending_confirmations_on_that_project(cast: Cast, projects):
    on_steps = await propose(cast.operator, "steps")
    on_line = await propose(cast.operator, "line")
    grant = await database_sync_to_async(AccessRequest.objects.get)(
        session_id=on_steps.session_id, project__slug="steps"
    )

    await database_sync_to_async(do_revoke_access)(grant.pk, user=cast.other_operator.user)

    assert await stored(on_steps, on_line) == [(C.CANCELLED, "grant_revoked"), (C.PENDING, None)]
    assert await decision_rows(on_steps) == [("cancelled: grant_revoked", "oscar")]


async def test_ending_the_session_cancels_its_pending_confirmations(cast: Cast, projects):
    mine = await propose(cast.operator, "steps")
    theirs = await propose(cast.other_operator, "steps")

    assert await database_sync_to_async(do_end_session)(await handle_of(mine), reason="DELETE")

    assert await stored(mine, theirs) == [(C.CANCELLED, "session_ended"), (C.PENDING, None)]
    assert await decision_rows(mine) == [("cancelled: session_ended", "olivia")]


async def test_switching_mcp_off_cancels_every_pending_confirmation(cast: Cast, projects):
    pending = [await propose(cast.operator, "steps"), await propose(cast.other_operator, "line")]

    assert await database_sync_to_async(do_switch_mcp)(False, acting_user="admin")

    assert await stored(*pending) == [(C.CANCELLED, "mcp_disabled")] * 2
    assert await decision_rows(pending[1]) == [("cancelled: mcp_disabled", "admin")]


async def test_a_cancelled_confirmation_cannot_be_approved(cast: Cast, projects):
    confirmation = await propose(cast.operator, "steps")
    await database_sync_to_async(do_revoke_token)(cast.operator.token, acting_user="admin")
    operator = APIClient()
    await database_sync_to_async(operator.force_login)(cast.other_operator.user)

    response = await database_sync_to_async(operator.post)(f"/api/confirmations/{confirmation.pk}/approve")

    assert response.status_code == 409
    assert response.json()["code"] == "FORGE_ERR_ALREADY_DECIDED"
    assert await stored(confirmation) == [(C.CANCELLED, "token_revoked")]
    assert not await database_sync_to_async(Contract.objects.exists)()
    assert await decision_rows(confirmation) == [
        ("cancelled: token_revoked", "admin"),
        ("refused: approve, already cancelled", "oscar"),
    ]


async def test_the_waiting_client_is_told_its_write_was_cancelled(cast: Cast, projects, settings):
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    token = cast.operator.raw_token
    handle = await database_sync_to_async(allow_project)(token, "steps")
    body = write_call(handle, "steps", "Extra")
    body["params"]["_meta"]["progressToken"] = "p-1"
    headers = stateless_headers(token, "tools/call", name=WRITE)
    async with open_stream("POST", "/mcp", headers=headers, body=body) as stream:
        first = (await stream.next_event()).json()  # progress: the call is waiting for its decision
        assert first["method"] == "notifications/progress"
        grant = await database_sync_to_async(AccessRequest.objects.get)(session_id=handle, project__slug="steps")
        await database_sync_to_async(do_revoke_access)(grant.pk, user=cast.other_operator.user)
        message = (await stream.next_event()).json()
        while "result" not in message:
            assert message["method"] == "notifications/progress"
            message = (await stream.next_event()).json()
        await stream.until_closed()
    result = message["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_CANCELLED"
    assert result["structuredContent"]["cause"] == "grant_revoked"
    assert "revoked this session's access" in result["structuredContent"]["message"]
