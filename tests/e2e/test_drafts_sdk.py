"""The working draft end to end: the official `mcp` SDK client against a live server of its own (this
module restarts it), the main fixture project registered with `manage.py import_project`, access allowed
by an operator from a shell, acceptance through the operator REST API, and the file on disk checked
afterwards.

The tests share one project and its draft (each reads the revision it starts from and stages what it
checks): groups built and submitted, two sessions staging at once, a non-owner refused, refusals that
store nothing, acceptance, an external edit turned into a conflict, and last a restart of the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client

from tests.live import LiveServer, manage, prepare, run_server, scratch_database, stop_process, streamable_client
from tests.projects.conftest import MAIN, fixture_path

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30  # seconds for one whole conversation on loopback
PROJECT_FILE = fixture_path(MAIN)
SLUG = "sdk-drafts"


def add(name: str, scope: str = "pou/LineMain") -> dict[str, Any]:
    return {"op": "add_variable", "scope": scope, "section": "localVars", "name": name, "type": "INT"}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A migrated data dir with the main fixture imported and an operator token; the server is started apart."""
    data_dir = tmp_path_factory.mktemp("drafts")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database)
        manage(env, "import_project", str(PROJECT_FILE), "--slug", SLUG)
        operator_token = manage(env, "create_operator_token", "live").strip().splitlines()[-1]
        yield env, token, data_dir, operator_token


@pytest.fixture(scope="module")
def server(deployment):
    env, token, data_dir, operator_token = deployment
    with run_server(env, token, data_dir) as live:
        live.operator_token = operator_token  # type: ignore[attr-defined]
        yield live


def project_file(server: LiveServer) -> Path:
    return server.data_dir / "projects" / f"{SLUG}.xml"


def operator_api(server: LiveServer, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.operator_token}"}  # type: ignore[attr-defined]
    return httpx.request(method, f"{server.base}{path}", json=body, headers=headers, timeout=30)


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a call, success or refusal."""
    return (await client.call_tool(tool, arguments)).structured_content


async def answer(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert result.is_error is False, result.structured_content
    return result.structured_content


async def allowed(server: LiveServer, *clients: Client) -> None:
    """Each session asks for the project, and an operator allows every pending request from a shell."""
    pending = False
    for client in clients:
        first = await call(client, "draft.status", {"project": SLUG})
        pending = pending or first.get("error") == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    if pending:
        await anyio.to_thread.run_sync(lambda: server.manage("access_requests", "allow", "--pending", "--as", "live"))


async def expected(client: Client) -> dict[str, Any]:
    """The project, and the working revision and context generation this session sees now."""
    status = await answer(client, "draft.status", {"project": SLUG})
    session = await answer(client, "session.status", {})
    return {
        "project": SLUG,
        "expected_working_revision": status["working_revision"],
        "expected_context_generation": session["context_generation"],
    }


async def begin(client: Client, title: str) -> str:
    begun = await answer(client, "change_group.begin", {"title": title, "rationale": "e2e", **await expected(client)})
    return begun["group_id"]


async def export(client: Client, view: str = "working_draft") -> bytes:
    chunks = [await answer(client, "project.export", {"project": SLUG, "view": view})]
    while "next_offset" in chunks[-1]:
        chunks.append(
            await answer(client, "project.export", {"project": SLUG, "view": view, "offset": chunks[-1]["next_offset"]})
        )
    return "".join(chunk["xml"] for chunk in chunks).encode("utf-8")


async def test_a_group_built_over_several_stage_calls_is_submitted_with_its_findings_acknowledged(server):
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await allowed(server, client)
            group_id = await begin(client, "Shift counters")
            first = await answer(
                client,
                "change_group.stage",
                {"group_id": group_id, "operations": [add("Shift1")], **await expected(client)},
            )
            checked = await answer(client, "change_group.check", {"project": SLUG, "operations": [add("Shift2")]})
            after_check = await expected(client)
            second = await answer(
                client,
                "change_group.stage",
                {
                    "group_id": group_id,
                    "operations": [
                        add("Shift2"),
                        {
                            "op": "set_pou_body",
                            "id": "pou/FlowTotal",
                            "language": "ST",
                            "text": "LastPulse := Pulse;\nPulses := Shifts;",
                        },
                    ],
                    **after_check,
                },
            )
            blocked = await call(client, "change_group.submit", {"group_id": group_id, **await expected(client)})
            submitted = await answer(
                client,
                "change_group.submit",
                {"group_id": group_id, "acknowledge_findings": True, **await expected(client)},
            )
            described = await answer(client, "change_group.describe", {"project": SLUG, "group_id": group_id})
            in_draft = await answer(
                client,
                "project.get_element",
                {"project": SLUG, "element_id": "pou/LineMain/var/Shift2", "view": "working_draft"},
            )

    assert first["changed_ids"] == ["pou/LineMain/var/Shift1"]
    assert checked["working_revision"] == after_check["expected_working_revision"] == first["working_revision"]
    assert second["changed_ids"] == ["pou/LineMain/var/Shift2", "pou/FlowTotal"]
    assert blocked["error"] == "FORGE_ERR_FINDINGS_BLOCK_SUBMIT"
    assert [f["code"] for f in blocked["findings"]] == ["undeclared_identifier"]
    assert submitted["state"] == described["state"] == "submitted"
    assert [f["code"] for f in described["acknowledged_findings"]] == ["undeclared_identifier"]
    assert [op["operation"].get("name", op["operation"].get("id")) for op in described["operations"]] == [
        "Shift1",
        "Shift2",
        "pou/FlowTotal",
    ]
    assert in_draft["view"] == "working_draft"
    assert b'name="Shift1"' not in project_file(server).read_bytes()


async def test_two_sessions_staging_at_once_from_the_same_revision_one_wins_and_the_other_is_told_the_current_one(
    server,
):
    with anyio.fail_after(BOUND):
        async with (
            streamable_client(server, mode="legacy") as first,
            streamable_client(server, mode="legacy") as second,
        ):
            await allowed(server, first, second)
            groups = [await begin(first, "First"), await begin(second, "Second")]
            seen = [await expected(first), await expected(second)]
            outcomes: list[dict[str, Any]] = [{}, {}]

            async def stage(index: int, client: Client) -> None:
                arguments = {"group_id": groups[index], "operations": [add(f"Race{index}")], **seen[index]}
                outcomes[index] = await call(client, "change_group.stage", arguments)

            async with anyio.create_task_group() as group:
                group.start_soon(stage, 0, first)
                group.start_soon(stage, 1, second)
            status = await answer(first, "draft.status", {"project": SLUG})
            described = await answer(first, "draft.describe", {"project": SLUG})

    assert seen[0]["expected_working_revision"] == seen[1]["expected_working_revision"]
    [won] = [outcome for outcome in outcomes if "error" not in outcome]
    [lost] = [outcome for outcome in outcomes if "error" in outcome]
    assert won["working_revision"] == seen[0]["expected_working_revision"] + 1 == status["working_revision"]
    assert (lost["error"], lost["current_working_revision"]) == ("FORGE_ERR_STALE_REVISION", won["working_revision"])
    raced = [element for element in described["added"] if "/var/Race" in element]
    assert raced == won["changed_ids"]


async def test_a_session_may_read_but_not_change_a_group_another_session_began(server):
    with anyio.fail_after(BOUND):
        async with (
            streamable_client(server, mode="legacy") as owner,
            streamable_client(server, mode="legacy") as other,
        ):
            await allowed(server, owner, other)
            group_id = await begin(owner, "Owned")
            await answer(
                owner,
                "change_group.stage",
                {"group_id": group_id, "operations": [add("Owned1")], **await expected(owner)},
            )
            before = await expected(other)
            refused = await call(
                other, "change_group.stage", {"group_id": group_id, "operations": [add("Intruder")], **before}
            )
            closed = await call(other, "change_group.close", {"group_id": group_id, **before})
            described = await answer(other, "change_group.describe", {"project": SLUG, "group_id": group_id})
            after = await expected(other)

    assert refused["error"] == closed["error"] == "FORGE_ERR_NOT_GROUP_OWNER"
    assert refused["group_id"] == group_id
    assert [op["operation"]["name"] for op in described["operations"]] == ["Owned1"]
    assert described["state"] == "building"
    assert after == before


async def test_a_refused_batch_a_stale_revision_and_a_stale_context_store_nothing(server):
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await allowed(server, client)
            group_id = await begin(client, "Refusals")
            current = await expected(client)
            batch = {"group_id": group_id, "operations": [add("Fine"), add("Dosed")]}
            refused = await call(client, "change_group.stage", {**batch, **current})
            stale_revision = await call(
                client,
                "change_group.stage",
                {**batch, **current, "expected_working_revision": current["expected_working_revision"] - 1},
            )
            stale_context = await call(
                client,
                "change_group.stage",
                {**batch, **current, "expected_context_generation": current["expected_context_generation"] + 1},
            )
            after = await expected(client)
            described = await answer(client, "change_group.describe", {"project": SLUG, "group_id": group_id})

    assert (refused["error"], refused["index"]) == ("FORGE_ERR_INVALID_OPERATION", 1)
    assert stale_revision["error"] == "FORGE_ERR_STALE_REVISION"
    assert stale_revision["current_working_revision"] == current["expected_working_revision"]
    assert stale_context["error"] == "FORGE_ERR_STALE_CONTEXT"
    assert stale_context["current_context_generation"] == current["expected_context_generation"]
    assert after == current
    assert described["operations"] == []


async def test_an_operator_accepting_over_rest_writes_exactly_the_draft_the_client_exported(server):
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await allowed(server, client)
            group_id = await begin(client, "To accept")
            await answer(
                client,
                "change_group.stage",
                {"group_id": group_id, "operations": [add("Accepted1")], **await expected(client)},
            )
            draft = await export(client)
            status = await answer(client, "draft.status", {"project": SLUG})
            reviewed = await anyio.to_thread.run_sync(lambda: operator_api(server, "GET", f"/api/drafts/{SLUG}"))
            accepted = await anyio.to_thread.run_sync(
                lambda: operator_api(
                    server,
                    "POST",
                    f"/api/drafts/{SLUG}/accept",
                    {"working_revision": status["working_revision"], "draft_digest": reviewed.json()["draft_digest"]},
                )
            )
            after = await answer(client, "draft.status", {"project": SLUG})
            exported = await export(client, view="accepted")

    assert accepted.status_code == 200, accepted.text
    assert project_file(server).read_bytes() == draft == exported
    assert b'name="Accepted1"' in draft
    assert accepted.json()["accepted_revision"] == after["accepted_revision"] == status["accepted_revision"] + 1
    assert (after["groups"], after["changed"]) == ([], False)


async def test_unstage_withdraws_the_last_operations_and_an_operator_discards_the_draft_over_rest(server):
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await allowed(server, client)
            before = project_file(server).read_bytes()
            group_id = await begin(client, "To withdraw and discard")
            await answer(
                client,
                "change_group.stage",
                {"group_id": group_id, "operations": [add("Kept1"), add("Withdrawn1")], **await expected(client)},
            )
            await answer(client, "change_group.unstage", {"group_id": group_id, "count": 1, **await expected(client)})
            described = await answer(client, "change_group.describe", {"project": SLUG, "group_id": group_id})
            draft = await export(client)
            status = await answer(client, "draft.status", {"project": SLUG})
            discarded = await anyio.to_thread.run_sync(
                lambda: operator_api(
                    server, "POST", f"/api/drafts/{SLUG}/discard", {"working_revision": status["working_revision"]}
                )
            )
            after = await answer(client, "draft.status", {"project": SLUG})

    assert [op["operation"]["name"] for op in described["operations"]] == ["Kept1"]
    assert b'name="Kept1"' in draft and b'name="Withdrawn1"' not in draft
    assert discarded.status_code == 200, discarded.text
    assert (after["groups"], after["changed"]) == ([], False)
    assert project_file(server).read_bytes() == before


async def test_an_external_edit_of_the_file_turns_an_operation_that_no_longer_applies_into_a_conflict(server):
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await allowed(server, client)
            group_id = await begin(client, "Counter limit")
            await answer(
                client,
                "change_group.stage",
                {"group_id": group_id, "operations": [add("Limit", scope="pou/CapTorque")], **await expected(client)},
            )
            before = await answer(client, "draft.status", {"project": SLUG})
            path = project_file(server)
            edited = path.read_bytes().replace(b'<pou name="CapTorque"', b'<pou name="CapTorque2"', 1)
            assert edited != path.read_bytes()
            path.write_bytes(edited)
            status = await answer(client, "draft.status", {"project": SLUG})
            described = await answer(client, "change_group.describe", {"project": SLUG, "group_id": group_id})
            events = await answer(
                client, "draft.events", {"project": SLUG, "after_revision": before["working_revision"]}
            )

    assert status["accepted_revision"] == before["accepted_revision"] + 1
    assert status["working_revision"] == before["working_revision"] + 1
    assert status["conflicts"] == 1
    [conflict] = [f for f in described["findings"] if f["code"] == "conflict"]
    assert (conflict["severity"], conflict["element_id"]) == ("problem", "pou/CapTorque/var/Limit")
    assert described["operations"][0]["conflict"]
    assert [e["kind"] for e in events["events"]] == ["replayed"]


async def test_a_restart_keeps_the_draft_with_the_same_group_ids_revision_and_bytes(server, deployment):
    env, token, data_dir, _ = deployment
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            await allowed(server, client)
            group_id = await begin(client, "Before restart")
            await answer(
                client,
                "change_group.stage",
                {"group_id": group_id, "operations": [add("Survivor")], **await expected(client)},
            )
            before = await answer(client, "draft.status", {"project": SLUG})
            before_bytes = await export(client)

    await anyio.to_thread.run_sync(stop_process, server.process)
    with run_server(env, token, data_dir) as restarted:
        with anyio.fail_after(BOUND):
            async with streamable_client(restarted, mode="legacy") as client:
                await allowed(restarted, client)
                after = await answer(client, "draft.status", {"project": SLUG})
                after_bytes = await export(client)
                described = await answer(client, "change_group.describe", {"project": SLUG, "group_id": group_id})

    assert after["working_revision"] == before["working_revision"]
    assert [g["group_id"] for g in after["groups"]] == [g["group_id"] for g in before["groups"]]
    assert group_id in [g["group_id"] for g in after["groups"]]
    assert after_bytes == before_bytes
    assert b'name="Survivor"' in after_bytes
    assert [op["operation"]["name"] for op in described["operations"]] == ["Survivor"]
