"""Approvals every client can follow (`mcp_api.tasks`): a governed write answered as a task to a client that
declared the Tasks extension (2025-11-25's `task` parameter, 2026-07-28's extension), as an `input_required`
URL elicitation to a 2026-07-28 client that declared URL mode, and as today's pending confirmation to one that
declared nothing; task ids and request states bound to their principal; cancellation; status notifications; finished tasks purged past their ttl."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from access.models import BROADCAST_GROUP
from audit.models import AuditEvent, EventKind
from confirmations import sealing
from confirmations.models import CONFIRMATION_TRANSITIONS, ConfirmationState, PendingConfirmation
from confirmations.services import do_deny_confirmation
from forge_core.live import notify_streams
from mcp_api import tasks
from mcp_api.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_api.models import ApprovalTask
from mcp_api.revisions import CLIENT_CAPABILITIES_META_KEY, SUBSCRIPTION_ID_META_KEY
from projects.models import Project
from tests.mcp_api.helpers import (
    Response,
    envelope,
    mcp_headers,
    open_session,
    open_stream,
    post,
    rpc,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.mcp_api.test_write_tools import (  # noqa: F401  (fixtures)
    ADD_EXTRA,
    _projects_root,
    allow_session,
    approve,
    file_bytes,
    override,
    steps,
    with_handle,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("mcp_on", "override", "steps"),
]

WRITE = "project.write.add_variable"
TASKS = {"extensions": {tasks.TASKS_EXTENSION: {}}}
URL_ELICITATION = {"elicitation": {"url": {}}}
HANDSHAKE = "2025-11-25"


def meta(capabilities: dict[str, Any]) -> dict[str, Any]:
    return envelope(**{CLIENT_CAPABILITIES_META_KEY: capabilities})


async def stateless(
    token: str, method: str, params: dict[str, Any], capabilities: dict[str, Any], *, name: str | None = None
) -> Response:
    body = stateless_rpc(method, params, meta=meta(capabilities))
    return await send("POST", "/mcp", headers=stateless_headers(token, method, name=name), body=body)


async def write(token: str, capabilities: dict[str, Any], **params: Any) -> Response:
    arguments = await with_handle(token, {"project": "steps", **ADD_EXTRA})
    return await stateless(
        token, "tools/call", {"name": WRITE, "arguments": arguments, **params}, capabilities, name=WRITE
    )


def result(response: Response) -> dict[str, Any]:
    assert response.status == 200, response.body
    body = response.json()
    assert "result" in body, body
    return body["result"]


def error(response: Response) -> dict[str, Any]:
    body = response.json()
    assert "error" in body, body
    return body["error"]


async def task_call(token: str, method: str, task_id: str, capabilities: dict[str, Any] = TASKS) -> Response:
    return await stateless(token, method, {"taskId": task_id}, capabilities)


async def written() -> bytes:
    return await file_bytes(await database_sync_to_async(Project.objects.get)(slug="steps"))


@database_sync_to_async
def confirmation() -> PendingConfirmation:
    return PendingConfirmation.objects.get()


@database_sync_to_async
def refusals(method: str) -> list[str]:
    return list(
        AuditEvent.objects.filter(kind=EventKind.REQUEST_REFUSED, tool=method).values_list("outcome", flat=True)
    )


@database_sync_to_async
def deny(pending_id: Any, user: Any) -> None:
    do_deny_confirmation(pending_id, acting_user=user)


# --- the fallback: a client that declared nothing ------------------------------------------------------------


async def test_a_client_that_declares_nothing_gets_the_pending_confirmation_and_no_task(cast):
    answer = result(await write(cast.operator.raw_token, {}))

    assert answer["isError"] is True
    assert answer["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert answer["resultType"] == "complete"
    assert await database_sync_to_async(ApprovalTask.objects.count)() == 0


# --- Tasks at 2026-07-28 -------------------------------------------------------------------------------------


async def test_server_discover_declares_the_tasks_extension(cast):
    answer = result(await stateless(cast.operator.raw_token, "server/discover", {}, {}))

    assert answer["capabilities"]["extensions"] == {tasks.TASKS_EXTENSION: {}}


async def test_a_write_from_a_tasks_client_answers_a_task_committed_before_the_answer(cast):
    answer = result(await write(cast.operator.raw_token, TASKS))

    assert answer["resultType"] == "task"
    assert answer["status"] == "working"
    assert answer["pollIntervalMs"] == tasks.POLL_INTERVAL_MS and answer["ttlMs"] >= 5 * 60 * 1000
    assert "/console/confirmations/" in answer["statusMessage"]
    task = await database_sync_to_async(ApprovalTask.objects.select_related("confirmation", "principal").get)()
    assert str(task.id) == answer["taskId"]
    assert task.principal == cast.operator.user
    assert task.confirmation.state == ConfirmationState.PENDING


async def test_the_task_completes_with_the_written_result_once_an_operator_approves(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]
    working = result(await task_call(token, "tasks/get", task_id))
    await approve(str((await confirmation()).id), cast.operator.user)
    done = result(await task_call(token, "tasks/get", task_id))

    assert working["status"] == "working" and "result" not in working
    assert done["status"] == "completed" and done["resultType"] == "complete"
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["state"] == "executed"
    assert done["result"]["structuredContent"]["result"]["changed_ids"] == ["pou/LineMain/var/Extra"]
    assert b'name="Extra"' in await written()


async def test_a_denied_task_completes_with_the_denial_as_the_tools_error(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]
    await deny((await confirmation()).id, cast.operator.user)

    done = result(await task_call(token, "tasks/get", task_id))

    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_DENIED"


async def test_a_finished_task_is_kept_for_its_ttl_then_purged_and_a_working_one_whatever_its_ttl(cast):
    token = cast.operator.raw_token
    finished_id = result(await write(token, TASKS))["taskId"]
    await deny((await confirmation()).id, cast.operator.user)
    task = await database_sync_to_async(ApprovalTask.objects.get)(pk=finished_id)
    past_its_ttl = task.created_at + timedelta(milliseconds=task.ttl_ms)

    kept = await database_sync_to_async(tasks.purge_expired)(past_its_ttl - timedelta(seconds=1))
    still_there = result(await task_call(token, "tasks/get", finished_id))
    purged = await database_sync_to_async(tasks.purge_expired)(past_its_ttl)
    gone = error(await task_call(token, "tasks/get", finished_id))

    assert (kept, still_there["status"], purged) == (0, "completed", 1)
    assert gone["code"] == -32602 and "kept for its ttl, then removed" in gone["message"]
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 1  # the history stays


async def test_a_working_task_is_kept_past_its_ttl_and_none_is_kept_past_the_longest(cast):
    token = cast.operator.raw_token
    working_id = result(await write(token, TASKS))["taskId"]
    task = await database_sync_to_async(ApprovalTask.objects.get)(pk=working_id)
    long_after = task.created_at + timedelta(milliseconds=tasks.MAX_TTL_MS + 1)

    kept = await database_sync_to_async(tasks.purge_expired)(long_after)
    await deny((await confirmation()).id, cast.operator.user)
    purged = await database_sync_to_async(tasks.purge_expired)(long_after)

    assert (kept, purged) == (0, 1)
    assert await database_sync_to_async(ApprovalTask.objects.count)() == 0


async def test_another_principals_task_id_is_not_found_and_the_attempt_audited(cast):
    task_id = result(await write(cast.operator.raw_token, TASKS))["taskId"]
    other = cast.other_operator.raw_token

    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        refused = error(await task_call(other, method, task_id))
        assert refused["code"] == INVALID_PARAMS and "no such task" in refused["message"], method
        assert await refusals(method) == ["refused: task not found"]
    assert (await confirmation()).state == ConfirmationState.PENDING


@pytest.mark.parametrize("task_id", ["", "not-a-uuid", "0" * 500, "00000000-0000-0000-0000-000000000000"])
async def test_an_unknown_or_malformed_task_id_is_invalid_params(cast, task_id):
    refused = error(await task_call(cast.operator.raw_token, "tasks/get", task_id))

    assert refused["code"] == INVALID_PARAMS


async def test_task_methods_need_the_declared_extension_at_2026(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]

    refused = error(await task_call(token, "tasks/get", task_id, capabilities={}))

    assert refused["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused["data"] == {"requiredCapabilities": {"extensions": {tasks.TASKS_EXTENSION: {}}}}


@pytest.mark.parametrize("method", ["tasks/list", "tasks/result"])
async def test_the_methods_2026_removed_are_not_found(cast, method):
    refused = error(await stateless(cast.operator.raw_token, method, {}, TASKS))

    assert refused["code"] == METHOD_NOT_FOUND


async def test_tasks_update_acknowledges_and_ignores_responses_nothing_asked_for(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]
    params = {"taskId": task_id, "inputResponses": {"approve": {"action": "accept"}}}

    answer = result(await stateless(token, "tasks/update", params, TASKS))

    assert answer["resultType"] == "complete"
    assert (await confirmation()).state == ConfirmationState.PENDING


async def test_cancelling_a_task_cancels_its_pending_confirmation_audited(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]

    acknowledged = result(await task_call(token, "tasks/cancel", task_id))
    after = result(await task_call(token, "tasks/get", task_id))

    assert acknowledged == {"resultType": "complete", "_meta": acknowledged["_meta"]}
    cancelled = await confirmation()
    assert cancelled.state == ConfirmationState.CANCELLED
    assert cancelled.outcome["cause"] == "task_cancelled"
    assert after["status"] == "cancelled" and "tasks/cancel" in after["statusMessage"]
    rows = await database_sync_to_async(list)(
        AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED).values_list("outcome", "called_by")
    )
    assert rows == [("cancelled: task_cancelled", cast.operator.user.username)]


async def test_a_decided_task_cannot_be_cancelled_and_the_refusal_says_why(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]
    await deny((await confirmation()).id, cast.operator.user)

    refused = error(await task_call(token, "tasks/cancel", task_id))

    assert refused["code"] == INVALID_PARAMS
    assert "already decided: it is denied" in refused["message"]
    assert (await confirmation()).state == ConfirmationState.DENIED
    assert await refusals("tasks/cancel") == ["refused: already denied"]


def listen_to(task_ids: Any, capabilities: dict[str, Any] = TASKS, **filters: Any) -> dict[str, Any]:
    notifications = {"taskIds": task_ids, **filters} if task_ids is not None else filters
    return stateless_rpc(
        "subscriptions/listen", {"notifications": notifications}, id="listen-t", meta=meta(capabilities)
    )


LISTEN_HEADERS = "subscriptions/listen"


async def test_a_listen_naming_the_task_hears_its_decision_with_the_subscription_id(cast):
    token = cast.operator.raw_token
    task_id = result(await write(token, TASKS))["taskId"]
    headers = stateless_headers(token, LISTEN_HEADERS)

    async with open_stream("POST", "/mcp", headers=headers, body=listen_to([task_id])) as stream:
        acknowledged = (await stream.next_event()).json()
        await approve(str((await confirmation()).id), cast.operator.user)
        event = (await stream.next_event()).json()

    assert acknowledged["params"]["notifications"] == {"taskIds": [task_id]}
    assert event["method"] == "notifications/tasks"
    assert event["params"]["taskId"] == task_id
    assert event["params"]["status"] == "completed"
    assert event["params"]["result"]["structuredContent"]["state"] == "executed"
    assert event["params"]["_meta"] == {SUBSCRIPTION_ID_META_KEY: "listen-t"}


async def test_a_listen_naming_a_task_already_finished_hears_its_final_status_at_once(cast):
    token = cast.operator.raw_token
    finished_id = result(await write(token, TASKS))["taskId"]
    await deny((await confirmation()).id, cast.operator.user)
    working_id = result(await write(token, TASKS))["taskId"]
    headers = stateless_headers(token, LISTEN_HEADERS)

    async with open_stream(
        "POST", "/mcp", headers=headers, body=listen_to([working_id, finished_id], toolsListChanged=True)
    ) as stream:
        acknowledged = (await stream.next_event()).json()
        event = (await stream.next_event()).json()
        await database_sync_to_async(notify_streams)(BROADCAST_GROUP, "mcp.tools_changed")
        after = (await stream.next_event()).json()

    assert acknowledged["params"]["notifications"]["taskIds"] == sorted([working_id, finished_id])
    assert after["method"] == "notifications/tools/list_changed"  # nothing was said of the working one
    assert event["method"] == "notifications/tasks"
    assert (event["params"]["taskId"], event["params"]["status"]) == (finished_id, "completed")
    assert event["params"]["result"]["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_DENIED"
    assert event["params"]["_meta"] == {SUBSCRIPTION_ID_META_KEY: "listen-t"}


async def test_a_listen_naming_no_task_hears_no_task_notification(cast):
    token = cast.operator.raw_token
    await write(token, TASKS)
    headers = stateless_headers(token, LISTEN_HEADERS)
    body = listen_to(None, toolsListChanged=True)

    async with open_stream("POST", "/mcp", headers=headers, body=body) as stream:
        await stream.next_event()  # the acknowledgement
        await approve(str((await confirmation()).id), cast.operator.user)
        await database_sync_to_async(notify_streams)(BROADCAST_GROUP, "mcp.tools_changed")
        event = (await stream.next_event()).json()

    # The first thing it hears after the decision is the later tool-list change: no task notification came.
    assert event["method"] == "notifications/tools/list_changed"


async def test_a_listen_naming_another_principals_task_is_refused_and_audited(cast):
    task_id = result(await write(cast.operator.raw_token, TASKS))["taskId"]
    headers = stateless_headers(cast.other_operator.raw_token, LISTEN_HEADERS)

    response = await send("POST", "/mcp", headers=headers, body=listen_to([task_id]))

    assert response.status == 400
    refused = error(response)
    assert refused["code"] == INVALID_PARAMS and "no such task" in refused["message"]
    assert await refusals("subscriptions/listen") == ["refused: task not found"]


@pytest.mark.parametrize(
    "task_ids", [["00000000-0000-0000-0000-000000000000"], ["not-a-uuid"], [7], [], "a-task", ["x"] * 101]
)
async def test_a_listen_naming_unknown_or_malformed_task_ids_is_invalid_params(cast, task_ids):
    headers = stateless_headers(cast.operator.raw_token, LISTEN_HEADERS)

    response = await send("POST", "/mcp", headers=headers, body=listen_to(task_ids))

    assert response.status == 400
    assert error(response)["code"] == INVALID_PARAMS


async def test_a_listen_naming_tasks_needs_the_declared_extension(cast):
    task_id = result(await write(cast.operator.raw_token, TASKS))["taskId"]
    headers = stateless_headers(cast.operator.raw_token, LISTEN_HEADERS)

    response = await send("POST", "/mcp", headers=headers, body=listen_to([task_id], capabilities={}))

    assert error(response)["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY


# --- Tasks at 2025-11-25 -------------------------------------------------------------------------------------


async def session_for(token: str, revision: str = HANDSHAKE) -> str:
    session_id = await open_session(token, revision)
    await database_sync_to_async(allow_session)(token, session_id, "steps")
    return session_id


async def in_session(token: str, session_id: str, method: str, params: dict[str, Any], revision: str = HANDSHAKE):
    return await post(token, rpc(method, params), session_id=session_id, protocol_version=revision)


async def session_write(token: str, session_id: str, revision: str = HANDSHAKE, **params: Any) -> Response:
    call = {"name": WRITE, "arguments": {"project": "steps", **ADD_EXTRA}, **params}
    return await in_session(token, session_id, "tools/call", call, revision)


async def test_2025_11_25_declares_tasks_and_marks_the_governed_tools(cast):
    token = cast.operator.raw_token
    initialized = await post(
        token,
        rpc(
            "initialize",
            {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        ),
    )
    session_id = initialized.headers["mcp-session-id"]
    listing = result(await in_session(token, session_id, "tools/list", {}))

    assert result(initialized)["capabilities"]["tasks"] == tasks.CAPABILITY
    marked = {tool["name"] for tool in listing["tools"] if tool.get("execution") == {"taskSupport": "optional"}}
    assert WRITE in marked and not {name for name in marked if not name.startswith(("project.write.", "team."))}


async def test_a_2025_11_25_call_with_task_answers_a_task_and_tasks_result_gives_the_outcome(cast):
    token = cast.operator.raw_token
    session_id = await session_for(token)

    created = result(await session_write(token, session_id, task={"ttl": 60_000}))["task"]
    early = error(await in_session(token, session_id, "tasks/result", {"taskId": created["taskId"]}))
    listed = result(await in_session(token, session_id, "tasks/list", {}))
    await deny((await confirmation()).id, cast.operator.user)
    final = result(await in_session(token, session_id, "tasks/result", {"taskId": created["taskId"]}))
    got = result(await in_session(token, session_id, "tasks/get", {"taskId": created["taskId"]}))

    assert created["status"] == "working" and created["pollInterval"] == tasks.POLL_INTERVAL_MS
    assert created["ttl"] >= 60_000 and "ttlMs" not in created
    assert early["code"] == INVALID_PARAMS and "still working" in early["message"]
    assert [task["taskId"] for task in listed["tasks"]] == [created["taskId"]]
    assert final["isError"] is True
    assert final["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_DENIED"
    assert final["_meta"][tasks.RELATED_TASK_META_KEY] == {"taskId": created["taskId"]}
    assert got["status"] == "completed" and "result" not in got


async def test_a_2025_11_25_cancel_answers_the_cancelled_task(cast):
    token = cast.operator.raw_token
    session_id = await session_for(token)
    created = result(await session_write(token, session_id, task={}))["task"]

    cancelled = result(await in_session(token, session_id, "tasks/cancel", {"taskId": created["taskId"]}))

    assert cancelled["taskId"] == created["taskId"] and cancelled["status"] == "cancelled"
    assert (await confirmation()).state == ConfirmationState.CANCELLED


async def test_a_2025_11_25_decision_is_announced_on_the_sessions_stream(cast):
    token = cast.operator.raw_token
    session_id = await session_for(token)
    created = result(await session_write(token, session_id, task={}))["task"]

    headers = mcp_headers(token, session_id=session_id, protocol_version=HANDSHAKE)
    async with open_stream("GET", "/mcp", headers=headers) as stream:
        await stream.first_chunk()
        await approve(str((await confirmation()).id), cast.operator.user)
        event = (await stream.next_event()).json()

    assert event["method"] == "notifications/tasks/status"
    assert event["params"]["taskId"] == created["taskId"] and event["params"]["status"] == "completed"


async def test_tasks_list_shows_only_the_callers_own_tasks_and_refuses_a_foreign_cursor(cast):
    mine = await session_for(cast.operator.raw_token)
    result(await session_write(cast.operator.raw_token, mine, task={}))
    theirs = await open_session(cast.other_operator.raw_token, HANDSHAKE)

    listed = result(await in_session(cast.other_operator.raw_token, theirs, "tasks/list", {}))
    refused = error(await in_session(cast.other_operator.raw_token, theirs, "tasks/list", {"cursor": "bm9wZQ=="}))

    assert listed == {"tasks": []}
    assert refused["code"] == INVALID_PARAMS and "tasks/list" in refused["message"]


async def test_before_2025_11_25_a_task_parameter_changes_nothing_and_task_methods_are_not_found(cast):
    token = cast.operator.raw_token
    session_id = await session_for(token, "2025-06-18")

    answer = result(await session_write(token, session_id, "2025-06-18", task={}))
    refused = error(await in_session(token, session_id, "tasks/list", {}, "2025-06-18"))

    assert answer["structuredContent"]["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert refused["code"] == METHOD_NOT_FOUND
    assert await database_sync_to_async(ApprovalTask.objects.count)() == 0


# --- input_required at 2026-07-28 ---------------------------------------------------------------------------


async def test_a_url_elicitation_client_gets_input_required_with_the_console_page_and_sealed_state(cast):
    answer = result(await write(cast.operator.raw_token, URL_ELICITATION))

    pending = await confirmation()
    assert answer["resultType"] == "input_required"
    [(_key, request)] = answer["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "url"
    assert request["params"]["url"].endswith(f"/console/confirmations/{pending.id}/")
    assert "approves nothing" in request["params"]["message"]
    assert answer["requestState"].startswith(tasks.STATE_VERSION + ".")
    assert str(pending.id) not in answer["requestState"].split(".")[2]  # the mac, not the id in clear
    assert pending.state == ConfirmationState.PENDING


async def test_a_retry_with_the_state_waits_while_pending_then_returns_the_outcome(cast):
    token = cast.operator.raw_token
    first = result(await write(token, URL_ELICITATION))
    again = result(await write(token, URL_ELICITATION, requestState=first["requestState"]))
    await approve(str((await confirmation()).id), cast.operator.user)
    final = result(
        await write(
            token, URL_ELICITATION, requestState=first["requestState"], inputResponses={"x": {"action": "accept"}}
        )
    )

    assert again["resultType"] == "input_required"
    assert again["requestState"] == first["requestState"]
    assert again["inputRequests"] == first["inputRequests"]
    assert final["resultType"] == "complete" and final["isError"] is False
    assert final["structuredContent"]["state"] == "executed"
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 1
    assert b'name="Extra"' in await written()


def tampered(state: str) -> str:
    version, payload, mac = state.split(".")
    return f"{version}.{payload}.{'0' if mac[0] != '0' else '1'}{mac[1:]}"


@pytest.mark.parametrize(
    "make_state",
    [tampered, lambda state: "not-a-state", lambda state: "frs1.@@@.00", lambda state: "x" * 3000],
    ids=["tampered", "garbage", "undecodable", "oversized"],
)
async def test_a_forged_state_is_refused_and_proposes_nothing(cast, make_state):
    token = cast.operator.raw_token
    first = result(await write(token, URL_ELICITATION))

    answer = result(await write(token, URL_ELICITATION, requestState=make_state(first["requestState"])))

    assert answer["isError"] is True
    assert answer["structuredContent"]["error"] == tasks.STATE_REFUSED
    assert await database_sync_to_async(PendingConfirmation.objects.count)() == 1


async def test_another_principals_state_is_refused(cast):
    first = result(await write(cast.operator.raw_token, URL_ELICITATION))

    answer = result(await write(cast.other_operator.raw_token, URL_ELICITATION, requestState=first["requestState"]))

    assert answer["structuredContent"]["error"] == tasks.STATE_REFUSED
    assert "another client" in answer["structuredContent"]["message"]


async def test_a_state_for_other_arguments_is_refused(cast):
    token = cast.operator.raw_token
    first = result(await write(token, URL_ELICITATION))
    arguments = await with_handle(token, {"project": "steps", **ADD_EXTRA, "name": "Other"})
    params = {"name": WRITE, "arguments": arguments, "requestState": first["requestState"]}

    answer = result(await stateless(token, "tools/call", params, URL_ELICITATION, name=WRITE))

    assert answer["structuredContent"]["error"] == tasks.STATE_REFUSED
    assert "arguments differ" in answer["structuredContent"]["message"]


async def test_a_stale_state_is_refused(cast):
    token = cast.operator.raw_token
    first = result(await write(token, URL_ELICITATION))
    payload = first["requestState"].split(".")[1]
    parts = tasks.json.loads(tasks.base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    parts["expires"] = 1  # sealed by the server, but long past
    encoded = tasks.base64.urlsafe_b64encode(tasks.json.dumps(parts).encode()).decode().rstrip("=")
    stale = f"{tasks.STATE_VERSION}.{encoded}.{await database_sync_to_async(sealing.mac)(parts)}"

    answer = result(await write(token, URL_ELICITATION, requestState=stale))

    assert answer["structuredContent"]["error"] == tasks.STATE_REFUSED
    assert "stale" in answer["structuredContent"]["message"]


async def test_a_client_declaring_both_gets_a_task(cast):
    answer = result(await write(cast.operator.raw_token, {**TASKS, **URL_ELICITATION}))

    assert answer["resultType"] == "task"


@pytest.mark.parametrize("state", ConfirmationState.values)
def test_a_task_is_working_exactly_while_its_confirmation_can_still_move_and_purge_keeps_those(state):
    confirmation = PendingConfirmation(state=state, expires_at=timezone.now(), outcome={"message": "done"})
    can_move = state in CONFIRMATION_TRANSITIONS

    assert (tasks._status(confirmation)[0] == "working") is can_move
    assert (state in tasks.WORKING_STATES) is can_move
