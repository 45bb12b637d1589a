"""Approvals every client can follow, end to end: the official SDK client at 2026-07-28 against a live override
deployment follows a direct write through the Tasks extension (declared with a client extension of its own)
and through `input_required` (its URL elicitation callback, then its automatic retry with the request state),
and hears the decision on a `subscriptions/listen` that names the task in `taskIds`;
an operator decides through the operator REST API, which calls the same service functions as the console."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import pytest
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    CallToolResult,
    ElicitResult,
    GetTaskRequest,
    GetTaskRequestParams,
    Request,
    Result,
    SubscriptionFilter,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
)
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from tests.e2e.test_confirmations_sdk import (  # noqa: F401  (override_server: the module's live server)
    ADD,
    BOUND,
    SLUG,
    operator_api,
    override_server,
    project_file,
)
from tests.live import LiveServer, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

STATELESS = "2026-07-28"
WRITE = "project.write.add_variable"
ANY_RESULT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> LiveServer:
    return request.getfixturevalue("override_server")


class CreatedTask(Result):
    """A `CreateTaskResult` (resultType "task"), the fields this client reads."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class CancelTaskParams(BaseModel):
    task_id: str
    model_config = GetTaskRequestParams.model_config


class CancelTask(Request[CancelTaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: CancelTaskParams


class TasksExtension(ClientExtension):
    """The Tasks extension as a client follows it: a task answer is polled with tasks/get until it is done,
    calling `on_working` with the task while an operator has not decided."""

    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self, on_working: Callable[[ClaimContext, dict[str, Any]], Awaitable[None]]) -> None:
        self.on_working = on_working
        self.seen: list[dict[str, Any]] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._follow)]

    async def _follow(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        self.seen.append({"taskId": created.task_id, "status": created.status})
        while True:
            request = GetTaskRequest(params=GetTaskRequestParams(task_id=created.task_id))
            task = await ctx.session.send_request(request, ANY_RESULT)
            self.seen.append(task)
            if task["status"] == "working":
                await self.on_working(ctx, task)
            elif task["status"] == "completed":
                return CallToolResult.model_validate(task["result"])
            else:
                return CallToolResult(content=[], is_error=True, structured_content={"status": task["status"]})


async def granted_handle(client: Client, server: LiveServer) -> str:
    asked = (await client.call_tool("session.request_access", {"project": SLUG})).structured_content
    if asked["state"] == "pending":
        await anyio.to_thread.run_sync(lambda: server.manage("access_requests", "allow", "--pending", "--as", "live"))
    return asked["session_handle"]


async def pending_ids(server: LiveServer, state: str = "pending") -> list[str]:
    listing = await anyio.to_thread.run_sync(lambda: operator_api(server, "GET", f"/api/confirmations?state={state}"))
    return [item["id"] for item in listing.json()["confirmations"]]


async def approve_all_pending(server: LiveServer) -> None:
    for pending_id in await pending_ids(server):
        approved = await anyio.to_thread.run_sync(
            lambda pid=pending_id: operator_api(server, "POST", f"/api/confirmations/{pid}/approve", {})
        )
        assert approved.status_code == 200, approved.text


async def test_a_write_followed_through_the_tasks_extension_completes_after_the_operator_approves(server):
    async def approve(ctx: ClaimContext, task: dict[str, Any]) -> None:
        await approve_all_pending(server)

    tasks = TasksExtension(approve)
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode=STATELESS, extensions=[tasks]) as client:
            handle = await granted_handle(client, server)
            result = await client.call_tool(WRITE, {**ADD, "name": "ViaTask", "session_handle": handle})

    assert tasks.seen[0]["status"] == "working"
    assert [task["status"] for task in tasks.seen[1:]] == ["working", "completed"]
    assert result.is_error is False, result.structured_content
    assert result.structured_content["state"] == "executed"
    assert result.structured_content["result"]["changed_ids"] == ["pou/LineMain/var/ViaTask"]
    assert b'name="ViaTask"' in project_file(server).read_bytes()


async def test_cancelling_the_task_cancels_the_pending_confirmation_and_writes_nothing(server):
    cancelled_ids: list[str] = []

    async def cancel(ctx: ClaimContext, task: dict[str, Any]) -> None:
        cancelled_ids.extend(await pending_ids(server))
        await ctx.session.send_request(CancelTask(params=CancelTaskParams(task_id=task["taskId"])), ANY_RESULT)

    tasks = TasksExtension(cancel)
    before = project_file(server).read_bytes()
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode=STATELESS, extensions=[tasks]) as client:
            handle = await granted_handle(client, server)
            result = await client.call_tool(WRITE, {**ADD, "name": "Cancelled", "session_handle": handle})

    assert result.structured_content == {"status": "cancelled"}
    assert len(cancelled_ids) == 1 and cancelled_ids[0] in await pending_ids(server, "cancelled")
    assert project_file(server).read_bytes() == before


class TaskNotice(BaseModel):
    """`notifications/tasks` params, the fields this client reads."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str = Field(alias="taskId")
    status: str
    meta: dict[str, Any] = Field(default_factory=dict, alias="_meta")


class ListeningTasksExtension(TasksExtension):
    """The Tasks extension that also hears `notifications/tasks` (bound by the extension, as the SDK's core
    tables do not name it)."""

    def __init__(self, on_working: Callable[[ClaimContext, dict[str, Any]], Awaitable[None]]) -> None:
        super().__init__(on_working)
        self.notices: list[TaskNotice] = []
        self.noticed = anyio.Event()

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks", params_type=TaskNotice, handler=self._notice)]

    async def _notice(self, notice: TaskNotice) -> None:
        self.notices.append(notice)
        self.noticed.set()


async def test_a_listen_naming_the_task_hears_the_operators_decision_with_its_subscription_id(server):
    acknowledged = anyio.Event()
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/subscriptions/acknowledged":
            heard.append(message.params)
            acknowledged.set()

    async def listen_then_approve(ctx: ClaimContext, task: dict[str, Any]) -> None:
        if tasks.notices:
            return
        # The SDK's listen() has no taskIds; its filter passes extension keys through, so the request is sent
        # as such and stays open (its result comes when the stream ends) until this test is done with it.
        request = SubscriptionsListenRequest(
            params=SubscriptionsListenRequestParams(notifications=SubscriptionFilter(taskIds=[task["taskId"]]))
        )
        async with anyio.create_task_group() as group:
            group.start_soon(ctx.session.send_request, request, ANY_RESULT)
            await acknowledged.wait()
            await approve_all_pending(server)
            await tasks.noticed.wait()
            group.cancel_scope.cancel()

    tasks = ListeningTasksExtension(listen_then_approve)
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode=STATELESS, extensions=[tasks], message_handler=on_message) as client:
            handle = await granted_handle(client, server)
            result = await client.call_tool(WRITE, {**ADD, "name": "Listened", "session_handle": handle})

    [ack] = heard
    [notice] = tasks.notices
    task_id = tasks.seen[0]["taskId"]
    assert ack.notifications.model_dump(by_alias=True, exclude_none=True) == {"taskIds": [task_id]}
    assert (notice.task_id, notice.status) == (task_id, "completed")
    assert set(notice.meta) == {SUBSCRIPTION_ID_META_KEY}
    assert result.structured_content["state"] == "executed"


async def test_a_write_followed_through_input_required_returns_the_outcome_on_retry(server):
    elicited: list[Any] = []

    async def on_elicitation(context: Any, params: Any) -> ElicitResult:
        elicited.append(params)
        # Opening the page decides nothing: the operator's approval does, after which the client retries.
        await approve_all_pending(server)
        return ElicitResult(action="accept")

    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode=STATELESS, elicitation_callback=on_elicitation) as client:
            handle = await granted_handle(client, server)
            result = await client.call_tool(WRITE, {**ADD, "name": "ViaElicitation", "session_handle": handle})

    [request] = elicited
    assert request.mode == "url"
    assert "/console/confirmations/" in request.url
    assert result.is_error is False, result.structured_content
    assert result.structured_content["state"] == "executed"
    assert b'name="ViaElicitation"' in project_file(server).read_bytes()
