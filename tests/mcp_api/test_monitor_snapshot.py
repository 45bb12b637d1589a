"""monitor.snapshot through the MCP endpoint in-process (stateless calls with session handles): the values a
runtime connector posted come back as they were sent, each with forced and its age; names never reported are
listed as unknown; a grant is needed; the arguments are bounded; and a runtime token opens no MCP call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone
from rest_framework.test import APIClient

from access.runtime import do_create_runtime_token
from audit.models import AuditEvent, EventKind
from mcp_api.jsonrpc import INVALID_PARAMS
from mcp_api.tools.monitor import MAX_VARIABLES_PER_CALL
from projects.models import Project
from tests.mcp_api.helpers import (
    Response,
    allow_project,
    initialize_message,
    post,
    send,
    stateless_headers,
    stateless_rpc,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

SLUG = "line-3"


@pytest.fixture
def line(cast) -> Project:
    return Project.objects.create(slug=SLUG, name="Line 3", path="line-3.xml", fingerprint="0" * 64)


@pytest.fixture
def connector(cast, line) -> str:
    return do_create_runtime_token(line, "gateway-3", created_by=cast.operator.user).raw


def post_snapshot(raw: str, taken_at: datetime, values: list[dict[str, Any]]) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.post(
        f"/api/projects/{SLUG}/runtime-snapshots", {"taken_at": taken_at.isoformat(), "values": values}, format="json"
    )
    assert response.status_code == 201, response.content


async def call(raw_token: str, arguments: dict[str, Any]) -> Response:
    return await send(
        "POST",
        "/mcp",
        headers=stateless_headers(raw_token, "tools/call", name="monitor.snapshot"),
        body=stateless_rpc("tools/call", {"name": "monitor.snapshot", "arguments": {"project": SLUG, **arguments}}),
    )


async def snapshot_of(raw_token: str, variables: list[str]) -> dict[str, Any]:
    handle = await database_sync_to_async(allow_project)(raw_token, SLUG)
    response = await call(raw_token, {"session_handle": handle, "variables": variables})
    assert response.status == 200, response.body
    result = response.json()["result"]
    assert result["isError"] is False, result["structuredContent"]
    return result["structuredContent"]


async def test_the_values_a_connector_posted_round_trip_with_forced(cast, connector):
    taken_at = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    sent = [
        {"variable": "Main.Speed", "value": 1450, "forced": False},
        {"variable": "Main.Run", "value": True, "forced": True},
        {"variable": "Main.Ratio", "value": 0.25, "forced": False},
        {"variable": "Main.Mode", "value": "AUTO", "forced": False},
    ]
    await database_sync_to_async(post_snapshot)(connector, taken_at, sent)

    answer = await snapshot_of(cast.operator.raw_token, ["Main.Mode", "Main.Speed", "Main.Run", "Main.Ratio"])

    got = [{key: value[key] for key in ("variable", "value", "forced")} for value in answer["values"]]
    assert got == [sent[3], sent[0], sent[1], sent[2]]
    assert {value["observed_at"] for value in answer["values"]} == {taken_at.isoformat()}
    assert answer["unknown"] == []
    assert answer["project"] == SLUG


async def test_each_value_says_how_old_its_reading_is(cast, connector):
    now = timezone.now()
    await database_sync_to_async(post_snapshot)(
        connector, now - timedelta(minutes=10), [{"variable": "Main.Speed", "value": 1, "forced": False}]
    )
    await database_sync_to_async(post_snapshot)(
        connector, now - timedelta(seconds=2), [{"variable": "Main.Run", "value": True, "forced": False}]
    )

    answer = await snapshot_of(cast.operator.raw_token, ["Main.Speed", "Main.Run"])

    ages = {value["variable"]: value["age_seconds"] for value in answer["values"]}
    assert 600 <= ages["Main.Speed"] < 600 + 60
    assert 2 <= ages["Main.Run"] < 60


async def test_a_newer_snapshot_is_what_the_tool_reads(cast, connector):
    now = timezone.now()
    await database_sync_to_async(post_snapshot)(
        connector, now - timedelta(seconds=30), [{"variable": "Main.Speed", "value": 1450, "forced": False}]
    )
    await database_sync_to_async(post_snapshot)(
        connector, now - timedelta(seconds=1), [{"variable": "Main.Speed", "value": 0, "forced": True}]
    )

    [value] = (await snapshot_of(cast.operator.raw_token, ["Main.Speed"]))["values"]

    assert (value["value"], value["forced"]) == (0, True)


async def test_variables_no_connector_reported_are_named_as_unknown(cast, connector):
    await database_sync_to_async(post_snapshot)(
        connector, timezone.now(), [{"variable": "Main.Speed", "value": 1, "forced": False}]
    )

    answer = await snapshot_of(cast.operator.raw_token, ["Main.Speed", "Main.Nothing", "Main.Speed"])

    assert [value["variable"] for value in answer["values"]] == ["Main.Speed"]
    assert answer["unknown"] == ["Main.Nothing"]


async def test_without_a_grant_the_call_raises_an_access_request_and_reads_nothing(cast, connector):
    await database_sync_to_async(post_snapshot)(
        connector, timezone.now(), [{"variable": "Main.Speed", "value": 1450, "forced": False}]
    )

    response = await call(cast.operator.raw_token, {"variables": ["Main.Speed"]})

    result = response.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    assert "1450" not in response.body.decode()


async def test_a_principal_that_may_not_view_the_project_is_told_there_is_none(cast, line):
    response = await call(cast.caretaker.raw_token, {"variables": ["Main.Speed"]})

    assert response.json()["result"]["structuredContent"]["error"] == "FORGE_ERR_NOT_FOUND"


@pytest.mark.parametrize(
    "variables",
    [[], [f"V{i}" for i in range(MAX_VARIABLES_PER_CALL + 1)], [""], ["x" * 201]],
    ids=["none", "too-many", "empty-name", "name-too-long"],
)
async def test_the_variables_asked_for_are_bounded(cast, line, variables):
    handle = await database_sync_to_async(allow_project)(cast.operator.raw_token, SLUG)

    response = await call(cast.operator.raw_token, {"session_handle": handle, "variables": variables})

    assert response.json()["error"]["code"] == INVALID_PARAMS
    assert "variables" in response.json()["error"]["message"]


async def test_a_call_is_audited_as_a_read_of_the_project(cast, connector):
    await snapshot_of(cast.operator.raw_token, ["Main.Speed"])

    rows = await database_sync_to_async(
        lambda: list(AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool="monitor.snapshot"))
    )()
    assert [(row.project, row.outcome) for row in rows] == [(SLUG, "ok")]


async def test_a_runtime_token_opens_no_mcp_session(connector):
    response = await post(connector, initialize_message())

    assert response.status == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    refused = await database_sync_to_async(
        lambda: list(AuditEvent.objects.filter(kind=EventKind.AUTH_REFUSED).values_list("outcome", flat=True))
    )()
    assert refused == ["bad_token"]


def test_the_age_is_whole_seconds_and_never_negative(line):
    from access.models import RuntimeValue
    from access.runtime import latest_values

    now = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)
    RuntimeValue.objects.create(
        project=line, variable="Late", value=1, forced=False, observed_at=now - timedelta(seconds=2.9)
    )
    RuntimeValue.objects.create(
        project=line, variable="Ahead", value=1, forced=False, observed_at=now + timedelta(seconds=30)
    )

    ages = {
        value["variable"]: value["age_seconds"] for value in latest_values(line, ["Late", "Ahead"], now=now)["values"]
    }

    assert ages == {"Late": 2, "Ahead": 0}
