"""Resources, prompts and completions end to end: the official `mcp` SDK client against a live server of its
own (this module starts it), the main fixture project registered with `manage.py import_project`.

Before an operator allows the session, a read, a prompt and a completion inside the project are refused with
the read tools' code; afterwards resources are listed and read, a prompt is got, arguments are completed,
and a subscribed session hears `notifications/resources/updated` when an operator accepts a change to the
draft over the operator REST API (in the server's process, announced through the channel layer)."""

from __future__ import annotations

import warnings
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import PromptReference, ResourceTemplateReference

from tests.e2e.test_drafts_sdk import SLUG as DRAFTS_SLUG
from tests.e2e.test_drafts_sdk import expected, operator_api
from tests.live import LiveServer, manage, prepare, run_server, scratch_database, streamable_client
from tests.projects.conftest import MAIN, fixture_path

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30  # seconds for one whole conversation on loopback
# The project of the drafts' end-to-end test, whose helpers this one uses; on a server of this module's own.
SLUG = DRAFTS_SLUG
ACCEPTED = f"forge://projects/{SLUG}/accepted.xml"
DRAFT = f"forge://projects/{SLUG}/draft.xml"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("resources")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database)
        manage(env, "import_project", str(fixture_path(MAIN)), "--slug", SLUG)
        operator_token = manage(env, "create_operator_token", "live").strip().splitlines()[-1]
        with run_server(env, token, data_dir) as live:
            live.operator_token = operator_token  # type: ignore[attr-defined]
            yield live


async def answer(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert result.is_error is False, result.structured_content
    return result.structured_content


async def refused(call: Any) -> str:
    """The FORGE_ERR code of a method call the server refuses with a JSON-RPC error."""
    with pytest.raises(MCPError) as refusal:
        await call
    return refusal.value.data["error"]


def updates_watcher(uri: str):
    """An event set when the client is told the resource changed, and the message handler that sets it."""
    updated = anyio.Event()

    async def on_message(message) -> None:
        params = getattr(message, "params", None)
        if getattr(message, "method", "") == "notifications/resources/updated" and getattr(params, "uri", "") == uri:
            updated.set()

    return updated, on_message


async def accept_one_change(server: LiveServer, client: Client) -> None:
    """Stage one variable in a change group, and an operator accepts the draft over the operator REST API."""
    group = await answer(
        client, "change_group.begin", {"title": "For subscribers", "rationale": "e2e", **await expected(client)}
    )
    operation = {"op": "add_variable", "scope": "pou/LineMain", "section": "localVars", "name": "Heard", "type": "INT"}
    staged = await answer(
        client,
        "change_group.stage",
        {"group_id": group["group_id"], "operations": [operation], **await expected(client)},
    )
    reviewed = await anyio.to_thread.run_sync(lambda: operator_api(server, "GET", f"/api/drafts/{SLUG}"))
    accepted = await anyio.to_thread.run_sync(
        lambda: operator_api(
            server,
            "POST",
            f"/api/drafts/{SLUG}/accept",
            {"working_revision": staged["working_revision"], "draft_digest": reviewed.json()["draft_digest"]},
        )
    )
    assert accepted.status_code == 200, accepted.text


async def test_the_sdk_client_is_refused_everything_in_the_project_until_an_operator_allows_it_then_reads_gets_and_completes(
    server,
):
    body_template = ResourceTemplateReference(type="ref/resource", uri="forge://projects/{slug}/pous/{pou}/body.st")
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            before = [
                await refused(client.read_resource(ACCEPTED)),
                await refused(client.get_prompt("fix_findings", {"project": SLUG})),
                await refused(client.complete(body_template, {"name": "pou", "value": "F"}, {"slug": SLUG})),
            ]
            await anyio.to_thread.run_sync(
                lambda: server.manage("access_requests", "allow", "--pending", "--as", "live")
            )

            listed = [r.uri for r in (await client.list_resources()).resources]
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            accepted = (await client.read_resource(ACCEPTED)).contents[0]
            body = (await client.read_resource(f"forge://projects/{SLUG}/pous/FlowTotal/body.st")).contents[0]
            prompt = await client.get_prompt("restructure_pou", {"project": SLUG, "pou": "FlowTotal"})
            projects = await client.complete(
                PromptReference(type="ref/prompt", name="restructure_pou"), {"name": "project", "value": SLUG[:3]}
            )
            pous = await client.complete(body_template, {"name": "pou", "value": "F"}, {"slug": SLUG})

    assert before == ["FORGE_ERR_PROJECT_ACCESS_PENDING"] * 3
    assert listed == ["forge://guidelines", ACCEPTED, DRAFT]
    assert templates[2] == "forge://projects/{slug}/pous/{pou}/body.st"
    assert accepted.text == fixture_path(MAIN).read_text()
    assert body.text.startswith("(* The flow meter gives")
    assert f"Restructure POU FlowTotal of project {SLUG}" in prompt.messages[0].content.text
    assert projects.completion.values == [SLUG]
    assert pous.completion.values == ["FillPercent", "FlowTotal"]


async def test_a_subscribed_sdk_client_hears_that_the_accepted_file_changed_when_an_operator_accepts_the_draft(server):
    updated, on_message = updates_watcher(ACCEPTED)
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy", message_handler=on_message) as client:
            await answer(client, "session.request_access", {"project": SLUG})
            await anyio.to_thread.run_sync(
                lambda: server.manage("access_requests", "allow", "--pending", "--as", "live")
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated only from 2026-07-28 on; this session is 2025-11-25
                await client.subscribe_resource(ACCEPTED)
            await accept_one_change(server, client)
            await updated.wait()
            after = (await client.read_resource(ACCEPTED, cache_mode="bypass")).contents[0]

    assert 'name="Heard"' in after.text
