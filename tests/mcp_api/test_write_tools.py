"""Direct write tools and the editor tools in-process: registered only in override deployments, every
call suspended into a pending confirmation, the outcome through editor.confirm, and a streaming call that
waits for the operator's decision while sending progress."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from access.models import McpSession
from audit.models import AuditEvent, EventKind
from confirmations.models import ConfirmationState, PendingConfirmation
from confirmations.services import do_approve_confirmation, do_deny_confirmation
from mcp_api import protocol
from mcp_api.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from mcp_api.registry import REGISTRY, visible_tools
from mcp_api.tools.writes import WRITE_OPERATIONS, register_write_tools, unregister_write_tools
from mcp_api.transports import answers
from projects.models import Project
from projects.plcopen import documents
from projects.services import do_import_project, project_path
from tests.mcp_api.helpers import (
    Response,
    allow_project,
    envelope,
    mcp_headers,
    notification,
    open_session,
    open_stream,
    post,
    rpc,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

WRITE_TOOLS = [f"project.write.{name}" for name in WRITE_OPERATIONS]
ADD_EXTRA = {"scope": "pou/LineMain", "section": "localVars", "name": "Extra", "type": "INT"}


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def override(settings) -> Iterator[None]:
    """A deployment started with FORGE_OVERRIDE_SECURITIES=1: the write tools are registered."""
    settings.FORGE_OVERRIDE_SECURITIES = True
    register_write_tools()
    yield
    unregister_write_tools()


@pytest.fixture
def steps(transactional_db) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug="steps", acting_user="tests")


async def call(token: str, tool: str, arguments: dict[str, Any], *, meta: dict[str, Any] | None = None) -> Response:
    arguments = await with_handle(token, arguments)
    body = stateless_rpc("tools/call", {"name": tool, "arguments": arguments})
    if meta:
        body["params"]["_meta"].update(meta)
    return await send("POST", "/mcp", headers=stateless_headers(token, "tools/call", name=tool), body=body)


async def with_handle(token: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if "project" in arguments and "session_handle" not in arguments:
        handle = await database_sync_to_async(allow_project)(token, arguments["project"])
        return {**arguments, "session_handle": handle}
    return arguments


def structured(response: Response) -> tuple[dict[str, Any], bool]:
    assert response.status == 200, response.body
    result = response.json()["result"]
    return result["structuredContent"], result["isError"]


@database_sync_to_async
def approve(pending_id: str, user) -> PendingConfirmation:
    return do_approve_confirmation(pending_id, acting_user=user)


@database_sync_to_async
def file_bytes(project: Project) -> bytes:
    return project_path(project).read_bytes()


# --- registration ---------------------------------------------------------------------------------


def test_write_tools_are_not_in_the_registry_without_the_override_flag():
    assert not settings.FORGE_OVERRIDE_SECURITIES
    assert not [name for name in REGISTRY if name.startswith("project.write.")]
    assert not [t.name for t in visible_tools() if t.name.startswith("project.write.")]


@pytest.mark.usefixtures("override")
def test_the_override_flag_registers_the_eight_write_tools_and_announces_itself():
    names = [t.name for t in visible_tools()]
    assert [n for n in names if n.startswith("project.write.")] == WRITE_TOOLS
    assert "OVERRIDE MODE" in protocol.instructions()


def test_no_input_schema_offers_force():
    for tool in REGISTRY.values():
        assert "force" not in tool.input_schema()["properties"], tool.name


# --- a write call suspends into a confirmation ---------------------------------------------------------


@pytest.mark.usefixtures("override")
async def test_a_write_call_answers_confirmation_required_and_writes_nothing(cast, steps):
    before = await file_bytes(steps)
    answer, is_error = structured(
        await call(cast.operator.raw_token, "project.write.add_variable", {"project": "steps", **ADD_EXTRA})
    )
    assert is_error
    assert answer["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert answer["changed_ids"] == ["pou/LineMain/var/Extra"]
    assert answer["console_url"].endswith(f"/console/confirmations/{answer['pending_id']}/")
    assert "OVERRIDE MODE" in answer["warnings"][0]
    assert await file_bytes(steps) == before
    confirmation = await database_sync_to_async(PendingConfirmation.objects.get)(pk=answer["pending_id"])
    assert confirmation.state == ConfirmationState.PENDING
    assert confirmation.memorable_id == answer["memorable_id"]
    assert "+" in confirmation.preview["diff"] and "Extra" in confirmation.preview["diff"]
    assert confirmation.base_fingerprint == steps.fingerprint


@pytest.mark.usefixtures("override")
async def test_an_operation_that_does_not_apply_is_refused_with_its_index_and_proposes_nothing(cast, steps):
    arguments = {"project": "steps", **ADD_EXTRA, "scope": "pou/NoSuchPou"}
    answer, is_error = structured(await call(cast.operator.raw_token, "project.write.add_variable", arguments))
    assert is_error and answer["error"] == "FORGE_ERR_INVALID_OPERATION" and answer["index"] == 0
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 0


@pytest.mark.usefixtures("override")
async def test_a_client_sending_force_is_refused(cast, steps):
    response = await call(
        cast.operator.raw_token, "project.write.add_variable", {"project": "steps", **ADD_EXTRA, "force": True}
    )
    assert response.json()["error"]["code"] == INVALID_PARAMS
    response = await call(cast.operator.raw_token, "editor.confirm", {"pending_id": "x", "force": True})
    assert response.json()["error"]["code"] == INVALID_PARAMS
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 0


# --- editor.confirm ----------------------------------------------------------------------------------


async def propose(token: str) -> dict[str, Any]:
    answer, _ = structured(await call(token, "project.write.add_variable", {"project": "steps", **ADD_EXTRA}))
    return answer


@pytest.mark.usefixtures("override")
async def test_editor_confirm_reports_pending_then_the_executed_result(cast, steps):
    token = cast.operator.raw_token
    proposed = await propose(token)
    handle = await with_handle(token, {"project": "steps"})
    confirm = {"pending_id": proposed["pending_id"], "session_handle": handle["session_handle"]}
    answer, is_error = structured(await call(token, "editor.confirm", confirm))
    assert not is_error and answer["state"] == "pending"
    await approve(proposed["pending_id"], cast.operator.user)
    answer, is_error = structured(await call(token, "editor.confirm", confirm))
    assert not is_error, answer
    assert answer["state"] == "executed"
    assert answer["result"]["changed_ids"] == ["pou/LineMain/var/Extra"]
    assert answer["result"]["accepted_revision"] == 2
    written = await file_bytes(steps)
    assert b'name="Extra"' in written
    assert documents.validate(documents.load(written)) == []
    kinds = await database_sync_to_async(lambda: set(AuditEvent.objects.values_list("kind", flat=True)))()
    assert {EventKind.CONFIRMATION_CREATED, EventKind.CONFIRMATION_DECIDED, EventKind.CONTRACT_TRANSITION} <= kinds
    assert EventKind.PROJECT_WRITTEN in kinds


@pytest.mark.usefixtures("override")
async def test_a_write_keeps_the_bytes_its_preview_made_with_the_pending_confirmation(cast, steps):
    proposed = await propose(cast.operator.raw_token)

    stored = await database_sync_to_async(
        lambda: PendingConfirmation.objects.defer(None).get(pk=proposed["pending_id"])
    )()
    assert documents.fingerprint(bytes(stored.reviewed_result)) == stored.result_digest
    assert b'name="Extra"' in bytes(stored.reviewed_result)


@pytest.mark.usefixtures("override")
async def test_editor_confirm_reports_a_denial_as_an_error(cast, steps):
    token = cast.operator.raw_token
    proposed = await propose(token)
    await database_sync_to_async(do_deny_confirmation)(proposed["pending_id"], acting_user=cast.operator.user)
    confirm = await with_handle(token, {"project": "steps"})
    confirm = {"pending_id": proposed["pending_id"], "session_handle": confirm["session_handle"]}
    answer, is_error = structured(await call(token, "editor.confirm", confirm))
    assert is_error and answer["error"] == "FORGE_ERR_CONFIRMATION_DENIED"


@pytest.mark.usefixtures("override")
async def test_another_principal_cannot_see_a_confirmation(cast, steps):
    proposed = await propose(cast.operator.raw_token)
    other = cast.other_operator.raw_token
    handle = await with_handle(other, {"project": "steps"})
    confirm = {"pending_id": proposed["pending_id"], "session_handle": handle["session_handle"]}
    answer, is_error = structured(await call(other, "editor.confirm", confirm))
    assert is_error and answer["error"] == "FORGE_ERR_NOT_FOUND"
    listing, _ = structured(
        await call(other, "editor.pending_confirmations", {"session_handle": handle["session_handle"]})
    )
    assert listing["confirmations"] == []


@pytest.mark.usefixtures("override")
async def test_pending_confirmations_lists_the_sessions_items(cast, steps):
    token = cast.operator.raw_token
    proposed = await propose(token)
    handle = await with_handle(token, {"project": "steps"})
    listing, is_error = structured(
        await call(token, "editor.pending_confirmations", {"session_handle": handle["session_handle"]})
    )
    assert not is_error
    assert [item["pending_id"] for item in listing["confirmations"]] == [proposed["pending_id"]]
    assert listing["confirmations"][0]["state"] == "pending"


# --- waiting for the decision on a stream -----------------------------------------------------------------


async def waiting_call(token: str, arguments: dict[str, Any]):
    arguments = await with_handle(token, arguments)
    body = stateless_rpc("tools/call", {"name": "project.write.add_variable", "arguments": arguments})
    body["params"]["_meta"]["progressToken"] = "p-1"
    return open_stream(
        "POST", "/mcp", headers=stateless_headers(token, "tools/call", name="project.write.add_variable"), body=body
    )


@pytest.mark.usefixtures("override")
async def test_a_streaming_call_with_a_progress_token_waits_and_returns_the_outcome(cast, steps, settings):
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    token = cast.operator.raw_token
    async with await waiting_call(token, {"project": "steps", **ADD_EXTRA}) as stream:
        assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
        progress = (await stream.next_event()).json()
        assert progress["method"] == "notifications/progress"
        assert progress["params"]["progressToken"] == "p-1"
        pending = await database_sync_to_async(PendingConfirmation.objects.get)()
        await approve(str(pending.id), cast.operator.user)
        while True:
            message = (await stream.next_event()).json()
            if "result" in message:
                break
            assert message["method"] == "notifications/progress"
        result = message["result"]
        assert result["isError"] is False, result
        assert result["structuredContent"]["state"] == "executed"
        await stream.until_closed()
    assert b'name="Extra"' in await file_bytes(steps)


@pytest.mark.usefixtures("override")
async def test_a_waiting_call_hears_a_denial(cast, steps, settings):
    token = cast.operator.raw_token
    async with await waiting_call(token, {"project": "steps", **ADD_EXTRA}) as stream:
        pending = await _first_pending()
        await database_sync_to_async(do_deny_confirmation)(str(pending.id), acting_user=cast.operator.user)
        message = await _final(stream)
        assert message["result"]["isError"] is True
        assert message["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_DENIED"


@pytest.mark.usefixtures("override")
async def test_a_waiting_call_answers_confirmation_required_at_its_deadline(cast, steps, settings):
    settings.FORGE_CONFIRM_WAIT_S = 0.2
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    async with await waiting_call(cast.operator.raw_token, {"project": "steps", **ADD_EXTRA}) as stream:
        message = await _final(stream)
        assert message["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    pending = await _first_pending()
    assert pending.state == ConfirmationState.PENDING


@pytest.mark.usefixtures("override")
async def test_a_waiting_call_answers_before_it_leaves_its_groups(cast, steps, settings, monkeypatch):
    # Leaving a group is a round trip to Redis in a scale-out deployment: the client must not wait for it.
    layer = get_channel_layer()
    gate = asyncio.Event()
    real_discard = layer.group_discard

    async def held_discard(group: str, channel: str) -> None:
        await gate.wait()
        await real_discard(group, channel)

    monkeypatch.setattr(layer, "group_discard", held_discard)
    async with await waiting_call(cast.operator.raw_token, {"project": "steps", **ADD_EXTRA}) as stream:
        pending = await _first_pending()
        await database_sync_to_async(do_deny_confirmation)(str(pending.id), acting_user=cast.operator.user)
        message = await asyncio.wait_for(_final(stream), 5)  # while no group can be left yet
        gate.set()
        await stream.until_closed()
    assert message["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_DENIED"


async def _first_pending() -> PendingConfirmation:
    for _ in range(100):
        found = await database_sync_to_async(PendingConfirmation.objects.first)()
        if found is not None:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError("no pending confirmation was created")


async def _final(stream) -> dict[str, Any]:
    while True:
        message = (await stream.next_event()).json()
        if "result" in message or "error" in message:
            return message


# --- hostile input and cancellation while waiting -----------------------------------------------------


@pytest.mark.usefixtures("override")
async def test_a_write_with_a_surrogate_progress_token_answers(cast, steps):
    token = cast.operator.raw_token
    arguments = await with_handle(token, {"project": "steps", **ADD_EXTRA})
    body = stateless_rpc("tools/call", {"name": "project.write.add_variable", "arguments": arguments})
    body["params"]["_meta"]["progressToken"] = "\ud800"
    headers = stateless_headers(token, "tools/call", name="project.write.add_variable")

    response = await send("POST", "/mcp", headers=headers, body=json.dumps(body).encode())

    assert response.status == 400
    assert response.json()["id"] == 1
    assert response.error_code == INVALID_PARAMS
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 0
    [refusal] = await database_sync_to_async(list)(AuditEvent.objects.filter(kind=EventKind.REQUEST_REFUSED))
    assert refusal.outcome == "lone_surrogate"


async def cancel(token: str, request_id: Any) -> Response:
    body = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "_meta": envelope()},
    }
    return await send("POST", "/mcp", headers=stateless_headers(token, "notifications/cancelled"), body=body)


@pytest.mark.usefixtures("override")
async def test_notifications_cancelled_stops_a_waiting_write(cast, steps, settings):
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    token = cast.operator.raw_token
    async with await waiting_call(token, {"project": "steps", **ADD_EXTRA}) as stream:
        assert (await stream.next_event()).json()["method"] == "notifications/progress"  # it is waiting
        accepted = await cancel(token, 1)
        rest = await stream.until_closed()

    assert accepted.status == 202
    assert all(event.json().get("method") == "notifications/progress" for event in rest)  # and no answer
    pending = await _first_pending()
    assert pending.state == ConfirmationState.CANCELLED
    assert pending.outcome["cause"] == "client_cancelled"
    [decided] = await database_sync_to_async(list)(AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED))
    assert decided.outcome == "cancelled: client_cancelled"
    assert decided.called_by == cast.operator.user.get_username()
    assert b'name="Extra"' not in await file_bytes(steps)


@pytest.mark.usefixtures("override")
async def test_a_cancel_naming_another_request_leaves_the_wait_alone(cast, steps, settings):
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    settings.FORGE_CONFIRM_WAIT_S = 0.5
    token = cast.operator.raw_token
    async with await waiting_call(token, {"project": "steps", **ADD_EXTRA}) as stream:
        await stream.next_event()
        await cancel(token, 2)
        await cancel(cast.other_operator.raw_token, 1)  # another principal's request 1 is not this one
        message = await _final(stream)

    assert message["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert (await _first_pending()).state == ConfirmationState.PENDING


@pytest.mark.usefixtures("override")
async def test_a_failure_while_waiting_ends_the_stream_with_a_json_rpc_error(cast, steps, settings, monkeypatch):
    def broken(wait: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(answers, "decided", broken)
    async with await waiting_call(cast.operator.raw_token, {"project": "steps", **ADD_EXTRA}) as stream:
        [event] = await stream.until_closed()

    assert event.json()["id"] == 1
    assert event.json()["error"]["code"] == INTERNAL_ERROR
    assert "database" not in event.data


def allow_session(raw_token: str, session_id: str, slug: str) -> None:
    """An operator-allowed grant for a Streamable HTTP session on a project."""
    from access.grants import do_decide_access, raise_request
    from access.models import AccessState

    session = McpSession.objects.select_related("token__owner").get(pk=session_id)
    request = raise_request(session.token, session, Project.objects.get(slug=slug))
    if request.state == AccessState.PENDING:
        do_decide_access(request.pk, allow=True, user=session.token.owner)


@pytest.mark.usefixtures("override")
async def test_notifications_cancelled_on_a_session_stops_its_waiting_write(cast, steps, settings):
    settings.FORGE_CONFIRM_PROGRESS_SECONDS = 0.05
    token = cast.operator.raw_token
    session_id = await open_session(token, "2025-06-18")
    await database_sync_to_async(allow_session)(token, session_id, "steps")
    params = {"name": "project.write.add_variable", "arguments": {"project": "steps", **ADD_EXTRA}}
    body = rpc("tools/call", {**params, "_meta": {"progressToken": "p-9"}}, id="w-1")

    async with open_stream("POST", "/mcp", headers=mcp_headers(token, session_id=session_id), body=body) as stream:
        assert (await stream.next_event()).json()["method"] == "notifications/progress"
        other_session = await open_session(token, "2025-06-18")
        await post(token, notification("notifications/cancelled", {"requestId": "w-1"}), session_id=other_session)
        await post(token, notification("notifications/cancelled", {"requestId": "w-1"}), session_id=session_id)
        rest = await stream.until_closed()

    assert all("result" not in event.json() for event in rest)
    assert (await _first_pending()).state == ConfirmationState.CANCELLED
