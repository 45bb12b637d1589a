"""Direct writes end to end: the official SDK client against a live override deployment, an operator
deciding through the operator REST API, the file on disk checked afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client

from projects.plcopen import documents
from tests.live import LiveServer, manage, prepare, run_server, scaleout_configured, scratch_database, streamable_client
from tests.projects.conftest import MAIN, fixture_path

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30
PROJECT_FILE = fixture_path(MAIN)
SLUG = "writes-steps"
ADD = {"project": SLUG, "scope": "pou/LineMain", "section": "localVars", "type": "INT"}


@pytest.fixture(scope="module")
def override_server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("override")
    settings = {"FORGE_OVERRIDE_SECURITIES": "1", "FORGE_CONFIRM_PROGRESS_SECONDS": "0.2"}
    with scratch_database() as database:
        env, token = prepare(data_dir, **database, **settings)
        manage(env, "import_project", str(PROJECT_FILE), "--slug", SLUG)
        operator_token = manage(env, "create_operator_token", "live").strip().splitlines()[-1]
        with run_server(env, token, data_dir) as server:
            server.operator_token = operator_token  # type: ignore[attr-defined]
            yield server


def project_file(server: LiveServer) -> Path:
    return server.data_dir / "projects" / f"{SLUG}.xml"


def operator_api(server: LiveServer, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.operator_token}"}  # type: ignore[attr-defined]
    return httpx.request(method, f"{server.base}{path}", json=body, headers=headers, timeout=30)


async def structured(client: Client, tool: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
    return (await client.call_tool(tool, arguments, **options)).structured_content


async def granted(client: Client, server: LiveServer) -> None:
    """Ask for the project and have an operator allow it, as a deployment would."""
    first = await structured(client, "project.overview", {"project": SLUG})
    if first.get("error") == "FORGE_ERR_PROJECT_ACCESS_PENDING":
        await anyio.to_thread.run_sync(lambda: server.manage("access_requests", "allow", "--pending", "--as", "live"))


async def test_write_then_operator_approves_over_rest_then_editor_confirm_returns_the_result(override_server):
    server = override_server
    before = project_file(server).read_bytes()
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await granted(client, server)
            proposed = await structured(client, "project.write.add_variable", {**ADD, "name": "ViaRest"})
            pending = await structured(client, "editor.confirm", {"pending_id": proposed["pending_id"]})
            approved = await anyio.to_thread.run_sync(
                lambda: operator_api(server, "POST", f"/api/confirmations/{proposed['pending_id']}/approve", {})
            )
            outcome = await structured(client, "editor.confirm", {"pending_id": proposed["pending_id"]})
            tools = [tool.name for tool in (await client.list_tools()).tools]

    assert "project.write.add_variable" in tools
    assert proposed["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert proposed["memorable_id"].count("-") == 3
    assert pending["state"] == "pending"
    assert approved.status_code == 200, approved.text
    assert outcome["state"] == "executed", outcome
    assert outcome["result"]["changed_ids"] == ["pou/LineMain/var/ViaRest"]
    after = project_file(server).read_bytes()
    assert after != before and b'name="ViaRest"' in after
    assert documents.validate(documents.load(after)) == []
    events = operator_api(server, "GET", "/api/audit/events?kind=contract_transition&limit=200").json()
    transitions = [e for e in events["events"] if e["arguments"].get("contract") == outcome["result"]["contract"]]
    assert [e["outcome"] for e in transitions] == ["PREPARING", "PREPARED", "EXECUTING", "VERIFIED"]


async def test_a_streaming_write_waits_for_the_approval_and_returns_the_result(override_server):
    server = override_server
    progress: list[float] = []
    approved = anyio.Event()

    async def approve_on_first_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if len(progress) == 1:
            listing = await anyio.to_thread.run_sync(
                lambda: operator_api(server, "GET", "/api/confirmations?state=pending").json()
            )
            for item in listing["confirmations"]:
                await anyio.to_thread.run_sync(
                    lambda pid=item["id"]: operator_api(server, "POST", f"/api/confirmations/{pid}/approve", {})
                )
            approved.set()

    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await granted(client, server)
            result = await structured(
                client,
                "project.write.add_variable",
                {**ADD, "name": "WhileWaiting"},
                progress_callback=approve_on_first_progress,
            )

    assert approved.is_set() and progress
    assert result["state"] == "executed", result
    assert b'name="WhileWaiting"' in project_file(server).read_bytes()


async def test_a_denied_write_is_reported_denied_and_writes_nothing(override_server):
    server = override_server
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await granted(client, server)
            before = project_file(server).read_bytes()
            proposed = await structured(client, "project.write.add_variable", {**ADD, "name": "Denied"})
            denied = await anyio.to_thread.run_sync(
                lambda: operator_api(server, "POST", f"/api/confirmations/{proposed['pending_id']}/deny", {})
            )
            outcome = await structured(client, "editor.confirm", {"pending_id": proposed["pending_id"]})

    assert denied.status_code == 200, denied.text
    assert outcome["error"] == "FORGE_ERR_CONFIRMATION_DENIED"
    assert project_file(server).read_bytes() == before


@pytest.fixture(scope="module")
def second_override_server(override_server, tmp_path_factory):
    """Another process of the same deployment: shared database, channel layer, secrets and projects."""
    data_dir = tmp_path_factory.mktemp("override-second")
    env = {
        **override_server.env,
        "FORGE_DATA_DIR": str(data_dir),
        "FORGE_SECRETS_DIR": str(override_server.data_dir / "secrets"),
        "FORGE_PROJECTS_ROOT": str(override_server.data_dir / "projects"),
    }
    with run_server(env, override_server.token, data_dir) as server:
        server.operator_token = override_server.operator_token  # type: ignore[attr-defined]
        yield server


@pytest.mark.scaleout
@pytest.mark.skipif(
    not scaleout_configured(), reason="needs a shared PostgreSQL and Redis: set DATABASE_URL and REDIS_URL"
)
async def test_an_approval_on_one_process_reaches_a_call_waiting_on_another(override_server, second_override_server):
    approver, holder = override_server, second_override_server

    async def approve_on_the_other_process(value: float, total: float | None, message: str | None) -> None:
        if value == 1:
            listing = await anyio.to_thread.run_sync(
                lambda: operator_api(approver, "GET", "/api/confirmations?state=pending").json()
            )
            for item in listing["confirmations"]:
                await anyio.to_thread.run_sync(
                    lambda pid=item["id"]: operator_api(approver, "POST", f"/api/confirmations/{pid}/approve", {})
                )

    with anyio.fail_after(BOUND):
        async with streamable_client(holder, mode="legacy") as client:
            await granted(client, holder)
            result = await structured(
                client,
                "project.write.add_variable",
                {**ADD, "name": "AcrossProcesses"},
                progress_callback=approve_on_the_other_process,
            )

    assert result["state"] == "executed", result
    assert b'name="AcrossProcesses"' in project_file(approver).read_bytes()
