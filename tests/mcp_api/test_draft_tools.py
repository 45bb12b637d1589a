"""The working-draft tools through the MCP endpoint in-process (stateless calls with session handles):
draft.* and change_group.*, each happy path and each refusal, the working_draft view of the read tools,
a check that leaves no trace, stale revisions and stale contexts refused before anything is stored, and
the audit row of every call."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db.models import F

from access.grants import do_decide_access, raise_request
from access.models import ClientToken, McpSession
from access.services import mint_handle, token_digest
from audit.models import AuditEvent, EventKind
from mcp_api.jsonrpc import INVALID_PARAMS
from projects import drafts
from projects.models import ChangeGroup, DraftEvent, GroupState, Project, StagedOperation, WorkingDraft
from projects.plcopen import documents
from projects.services import do_import_project
from tests.mcp_api.helpers import (
    CLIENT_INFO,
    STATELESS,
    Response,
    allow_project,
    open_session,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

SLUG = "steps"
UNDECLARED_BODY = {
    "op": "set_pou_body",
    "id": "pou/FlowTotal",
    "language": "ST",
    "text": "LastPulse := Pulse;\nPulses := Nowhere;",
}
NEW_FB = {"op": "add_pou", "name": "Conveyor", "pou_type": "functionBlock", "body": ""}


def add(name: str, scope: str = "pou/LineMain") -> dict[str, Any]:
    return {"op": "add_variable", "scope": scope, "section": "localVars", "name": name, "type": "INT"}


# --- fixtures and calls ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def steps(transactional_db) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug=SLUG, acting_user="tests")


def _second_handle(raw_token: str, slug: str) -> str:
    """Another stateless session of the same client token, allowed on the project by its operator."""
    token = ClientToken.objects.select_related("owner").get(digest=token_digest(raw_token))
    handle = mint_handle(token, STATELESS, CLIENT_INFO)
    request = raise_request(token, handle, Project.objects.get(slug=slug))
    do_decide_access(request.pk, allow=True, user=token.owner)
    return handle.id


class Client:
    """One stateless MCP client session: its token and the handle of its allowed grant on the project."""

    def __init__(self, token: str, handle: str) -> None:
        self.token = token
        self.handle = handle

    async def call(self, tool: str, arguments: dict[str, Any]) -> Response:
        arguments = {"project": SLUG, "session_handle": self.handle, **arguments}
        return await send(
            "POST",
            "/mcp",
            headers=stateless_headers(self.token, "tools/call", name=tool),
            body=stateless_rpc("tools/call", {"name": tool, "arguments": arguments}),
        )

    async def answer(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.call(tool, arguments or {})
        assert response.status == 200, response.body
        result = response.json()["result"]
        assert result["isError"] is False, result["structuredContent"]
        return result["structuredContent"]

    async def refusal(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        response = await self.call(tool, arguments)
        assert response.status == 200, response.body
        result = response.json()["result"]
        assert result["isError"] is True, result["structuredContent"]
        return result["structuredContent"]

    async def generation(self) -> int:
        """The context generation as a stateless client learns it: session.status with its handle."""
        response = await send(
            "POST",
            "/mcp",
            headers=stateless_headers(self.token, "tools/call", name="session.status"),
            body=stateless_rpc("tools/call", {"name": "session.status", "arguments": {"session_handle": self.handle}}),
        )
        return response.json()["result"]["structuredContent"]["context_generation"]

    async def expected(self) -> dict[str, int]:
        """The revision and context generation this client last saw, as it passes them back."""
        status = await self.answer("draft.status")
        return {
            "expected_working_revision": status["working_revision"],
            "expected_context_generation": await self.generation(),
        }

    async def begin(self, title: str = "Counters") -> str:
        begun = await self.answer("change_group.begin", {"title": title, "rationale": "why", **await self.expected()})
        return begun["group_id"]

    async def stage(self, group_id: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.answer(
            "change_group.stage", {"group_id": group_id, "operations": ops, **await self.expected()}
        )


@pytest.fixture
async def client(cast, steps) -> Client:
    token = cast.operator.raw_token
    return Client(token, await database_sync_to_async(allow_project)(token, SLUG))


@pytest.fixture
async def other_client(cast, steps, client) -> Client:
    """A second session of an allowed client on the same project."""
    token = cast.operator.raw_token
    return Client(token, await database_sync_to_async(_second_handle)(token, SLUG))


async def _generation(client: Client) -> dict[str, int]:
    return {"expected_context_generation": await client.generation()}


@database_sync_to_async
def stored() -> tuple[int, int, int, int]:
    """What the database holds of the draft: its revision, its groups, staged operations and events."""
    draft = WorkingDraft.objects.filter(project__slug=SLUG).first()
    if draft is None:
        return (0, 0, 0, 0)
    return (
        draft.working_revision,
        ChangeGroup.objects.filter(draft=draft).count(),
        StagedOperation.objects.filter(draft=draft).count(),
        DraftEvent.objects.filter(draft=draft).count(),
    )


@database_sync_to_async
def group_row(group_id: str) -> ChangeGroup:
    return ChangeGroup.objects.select_related("principal").get(pk=group_id)


@database_sync_to_async
def tool_calls(tool: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool=tool).order_by("seq"))


@database_sync_to_async
def bump_context(handle: str) -> None:
    """What an access decision does to the session (mcp_api.consent._decide): its context moves on."""
    McpSession.objects.filter(pk=handle).update(context_generation=F("context_generation") + 1)


# --- draft.status, draft.describe, draft.events ---------------------------------------------------------


async def test_draft_status_of_an_untouched_project_is_an_empty_draft_at_revision_zero(client):
    status = await client.answer("draft.status")

    assert status == {
        "project": SLUG,
        "accepted_revision": 1,
        "working_revision": 0,
        "changed": False,
        "conflicts": 0,
        "groups": [],
    }


async def test_draft_status_lists_every_group_and_marks_the_callers_own(client, other_client):
    mine = await client.begin("Mine")
    theirs = await other_client.begin("Theirs")

    status = await client.answer("draft.status")

    assert [(g["group_id"], g["title"], g["yours"]) for g in status["groups"]] == [
        (mine, "Mine", True),
        (theirs, "Theirs", False),
    ]
    assert {(g["author"], g["client_label"], g["state"]) for g in status["groups"]} == {
        ("olivia", "olivia-client", "building")
    }
    assert status["working_revision"] == 2


async def test_draft_describe_names_what_the_draft_adds_changes_and_removes(client):
    group_id = await client.begin()
    await client.stage(
        group_id,
        [
            add("Extra1"),
            {"op": "update_variable", "id": "pou/LineMain/var/Dosed", "type": "DINT"},
            {"op": "remove_variable", "id": "pou/LineMain/var/Progress"},
        ],
    )

    described = await client.answer("draft.describe")

    assert described["added"] == ["pou/LineMain/var/Extra1"]
    assert described["removed"] == ["pou/LineMain/var/Progress"]
    assert {"element_id": "pou/LineMain/var/Dosed", "fields": {"type": {"accepted": "INT", "draft": "DINT"}}} in (
        described["changed"]
    )
    assert (described["project"], described["working_revision"], described["truncated"]) == (SLUG, 2, False)


async def test_draft_events_after_a_revision_tell_a_stale_client_what_others_did(client, other_client):
    seen = (await client.expected())["expected_working_revision"]
    theirs = await other_client.begin("Theirs")
    await other_client.stage(theirs, [add("Theirs")])

    events = await client.answer("draft.events", {"after_revision": seen})

    assert [(e["revision"], e["kind"], e["group_id"]) for e in events["events"]] == [
        (1, "begin", theirs),
        (2, "stage", theirs),
    ]
    assert events["working_revision"] == 2


async def test_a_describe_limit_over_the_maximum_is_invalid_params(client):
    response = await client.call("draft.describe", {"limit": drafts.DESCRIBE_LIMIT + 1})

    assert response.error_code == INVALID_PARAMS


# --- begin, stage, describe, submit, close -----------------------------------------------------------------


async def test_begin_answers_a_group_owned_by_the_calling_session(cast, client):
    begun = await client.answer(
        "change_group.begin",
        {"title": "Counters", "rationale": "Shift report", "expected_working_revision": 0, **await _generation(client)},
    )

    group = await group_row(begun["group_id"])
    assert begun["working_revision"] == 1
    assert (group.session_id, group.principal.get_username(), group.client_label) == (
        client.handle,
        "olivia",
        "olivia-client",
    )
    assert (group.title, group.rationale, group.state) == ("Counters", "Shift report", GroupState.BUILDING)


async def test_a_group_built_over_several_stage_calls_holds_every_batch_in_order(client):
    group_id = await client.begin()

    first = await client.stage(group_id, [add("Extra1")])
    second = await client.stage(group_id, [add("Extra2"), add("Extra3")])
    described = await client.answer("change_group.describe", {"group_id": group_id})

    assert (first["changed_ids"], first["working_revision"]) == (["pou/LineMain/var/Extra1"], 2)
    assert (second["changed_ids"], second["working_revision"]) == (
        ["pou/LineMain/var/Extra2", "pou/LineMain/var/Extra3"],
        3,
    )
    assert [op["operation"]["name"] for op in described["operations"]] == ["Extra1", "Extra2", "Extra3"]
    assert described["working_revision"] == 3
    assert await stored() == (3, 1, 3, 3)


async def test_stage_answers_the_findings_its_batch_leaves(client):
    group_id = await client.begin()

    staged = await client.stage(group_id, [UNDECLARED_BODY])

    assert [(f["code"], f["element_id"]) for f in staged["findings"] if f["severity"] == "problem"] == [
        ("undeclared_identifier", "pou/FlowTotal")
    ]


async def test_change_group_describe_pages_its_operations_with_a_cursor(client):
    group_id = await client.begin()
    await client.stage(group_id, [add(f"Extra{index}") for index in range(5)])

    first = await client.answer("change_group.describe", {"group_id": group_id, "limit": 2})
    second = await client.answer(
        "change_group.describe", {"group_id": group_id, "limit": 2, "cursor": first["next_cursor"]}
    )
    forged = await client.call("change_group.describe", {"group_id": group_id, "cursor": "not-a-cursor"})

    assert [op["operation"]["name"] for op in first["operations"] + second["operations"]] == [
        "Extra0",
        "Extra1",
        "Extra2",
        "Extra3",
    ]
    assert (first["operations_total"], second["next_cursor"] is not None) == (5, True)
    assert forged.error_code == INVALID_PARAMS


async def test_a_batch_past_the_staged_cap_is_refused_naming_the_cap(client, settings):
    settings.FORGE_MAX_STAGED_PER_GROUP = 2
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])

    refused = await client.refusal(
        "change_group.stage",
        {
            "group_id": group_id,
            "operations": [add("Extra2"), add("Extra3")],
            "expected_working_revision": 2,
            **await _generation(client),
        },
    )

    assert (refused["error"], refused["setting"], refused["limit"]) == (
        "FORGE_ERR_LIMIT_REACHED",
        "FORGE_MAX_STAGED_PER_GROUP",
        2,
    )
    assert "FORGE_MAX_STAGED_PER_GROUP" in refused["message"]
    assert (await stored())[2] == 1


async def test_change_group_describe_shows_any_sessions_group_with_its_findings(client, other_client):
    group_id = await other_client.begin("Theirs")
    await other_client.stage(group_id, [UNDECLARED_BODY])

    described = await client.answer("change_group.describe", {"group_id": group_id})

    assert (described["title"], described["rationale"], described["author"]) == ("Theirs", "why", "olivia")
    assert [f["code"] for f in described["findings"] if f["severity"] == "problem"] == ["undeclared_identifier"]


async def test_change_group_describe_of_an_unknown_group_is_not_found(client):
    content = await client.refusal("change_group.describe", {"group_id": str(uuid.uuid4())})

    assert content["error"] == "FORGE_ERR_NOT_FOUND"


async def test_submit_is_refused_while_problem_findings_stand_and_names_each_one(client):
    group_id = await client.begin()
    await client.stage(group_id, [UNDECLARED_BODY])
    before = await stored()

    content = await client.refusal("change_group.submit", {"group_id": group_id, **await client.expected()})

    assert content["error"] == "FORGE_ERR_FINDINGS_BLOCK_SUBMIT"
    assert [(f["code"], f["element_id"], f["severity"]) for f in content["findings"]] == [
        ("undeclared_identifier", "pou/FlowTotal", "problem")
    ]
    assert "acknowledge_findings" in content["message"]
    assert await stored() == before
    assert (await group_row(group_id)).state == GroupState.BUILDING


async def test_submit_with_acknowledgement_records_the_findings_for_the_reviewer(client):
    group_id = await client.begin()
    await client.stage(group_id, [UNDECLARED_BODY])

    submitted = await client.answer(
        "change_group.submit", {"group_id": group_id, "acknowledge_findings": True, **await client.expected()}
    )

    group = await group_row(group_id)
    assert submitted["state"] == group.state == GroupState.SUBMITTED
    assert [f["code"] for f in submitted["acknowledged_findings"]] == ["undeclared_identifier"]
    assert group.acknowledged_findings == submitted["acknowledged_findings"]


async def test_close_keeps_the_groups_operations_in_the_draft(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])

    closed = await client.answer("change_group.close", {"group_id": group_id, **await client.expected()})

    assert (closed["state"], closed["working_revision"]) == ("closed", 3)
    assert (await client.answer("draft.describe"))["added"] == ["pou/LineMain/var/Extra1"]
    assert (await group_row(group_id)).state == GroupState.CLOSED


async def test_a_closed_group_refuses_further_stages_as_an_invalid_operation(client):
    group_id = await client.begin()
    await client.answer("change_group.close", {"group_id": group_id, **await client.expected()})

    content = await client.refusal(
        "change_group.stage", {"group_id": group_id, "operations": [add("Late")], **await client.expected()}
    )

    assert content["error"] == "FORGE_ERR_INVALID_OPERATION"
    assert content["group_id"] == group_id


# --- check -------------------------------------------------------------------------------------------------


async def test_check_answers_what_a_batch_would_change_and_leaves_no_trace(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])
    before = await stored()

    checked = await client.answer("change_group.check", {"operations": [add("Extra2"), UNDECLARED_BODY]})

    assert checked["changed_ids"] == ["pou/LineMain/var/Extra2", "pou/FlowTotal"]
    assert checked["working_revision"] == before[0]
    assert "undeclared_identifier" in {f["code"] for f in checked["findings"]}
    assert await stored() == before
    assert (await client.answer("draft.describe"))["added"] == ["pou/LineMain/var/Extra1"]


async def test_check_before_any_group_creates_no_group_and_moves_no_revision(client):
    await client.answer("change_group.check", {"operations": [add("Extra1")]})

    assert await stored() == (0, 0, 0, 0)


async def test_check_of_a_batch_that_does_not_apply_names_the_refused_index(client):
    content = await client.refusal("change_group.check", {"operations": [add("Extra1"), add("Dosed")]})

    assert (content["error"], content["index"]) == ("FORGE_ERR_INVALID_OPERATION", 1)
    assert "Nothing was stored" in content["message"]
    assert await stored() == (0, 0, 0, 0)


# --- atomic batches -------------------------------------------------------------------------------------


async def test_a_batch_with_a_refused_operation_stores_nothing_and_names_its_index(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])
    before = await stored()

    content = await client.refusal(
        "change_group.stage",
        {"group_id": group_id, "operations": [add("Extra2"), add("Extra3"), add("extra1")], **await client.expected()},
    )

    assert (content["error"], content["index"]) == ("FORGE_ERR_INVALID_OPERATION", 2)
    assert "operation 2" in content["message"]
    assert await stored() == before
    assert (await client.answer("draft.describe"))["added"] == ["pou/LineMain/var/Extra1"]


async def test_a_batch_with_an_operation_outside_the_vocabulary_is_invalid_params_naming_its_index(client):
    group_id = await client.begin()
    before = await stored()

    response = await client.call(
        "change_group.stage",
        {
            "group_id": group_id,
            "operations": [add("Extra1"), {"op": "force_variable", "id": "pou/LineMain/var/Dosed"}],
            **await client.expected(),
        },
    )

    assert response.error_code == INVALID_PARAMS
    assert "operations.1" in response.json()["error"]["message"]
    assert await stored() == before


async def test_an_empty_batch_is_invalid_params(client):
    group_id = await client.begin()

    response = await client.call(
        "change_group.stage", {"group_id": group_id, "operations": [], **await client.expected()}
    )

    assert response.error_code == INVALID_PARAMS


# --- unstage --------------------------------------------------------------------------------------------


async def test_unstage_withdraws_the_last_operations_and_status_shows_the_new_revision(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Keep")])
    await client.stage(group_id, [add("Drop")])

    withdrawn = await client.answer(
        "change_group.unstage", {"group_id": group_id, "count": 1, **await client.expected()}
    )

    assert withdrawn == {"group_id": group_id, "withdrawn": 1, "working_revision": 4}
    assert (await client.answer("draft.status"))["working_revision"] == 4
    assert (await client.answer("draft.describe"))["added"] == ["pou/LineMain/var/Keep"]
    assert await stored() == (4, 1, 1, 4)


async def test_unstage_is_refused_when_another_groups_later_operations_depend_on_it(client, other_client):
    pou_group = await client.begin("Conveyor")
    await client.stage(pou_group, [NEW_FB])
    variable_group = await other_client.begin("Conveyor limit")
    await other_client.stage(variable_group, [add("Limit", scope="pou/Conveyor")])
    before = await stored()

    content = await client.refusal("change_group.unstage", {"group_id": pou_group, **await client.expected()})

    assert content["error"] == "FORGE_ERR_INVALID_OPERATION"
    assert content["dependent_positions"] == [2]
    assert await stored() == before


# --- the working_draft view of the read tools ------------------------------------------------------------


async def test_reads_in_the_working_draft_view_show_staged_elements_and_the_accepted_view_does_not(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])
    element = {"element_id": "pou/LineMain/var/Extra1"}

    in_draft = await client.answer("project.get_element", {**element, "view": "working_draft"})
    in_accepted = await client.refusal("project.get_element", element)
    draft_variables = await client.answer("project.list_variables", {"scope": "pou/LineMain", "view": "working_draft"})
    accepted_variables = await client.answer("project.list_variables", {"scope": "pou/LineMain"})

    assert (in_draft["view"], in_draft["working_revision"], in_draft["type"]) == ("working_draft", 2, "INT")
    assert in_accepted["error"] == "FORGE_ERR_NOT_FOUND"
    assert "pou/LineMain/var/Extra1" in [item["id"] for item in draft_variables["items"]]
    assert "pou/LineMain/var/Extra1" not in [item["id"] for item in accepted_variables["items"]]
    assert (accepted_variables["view"], "working_revision" in accepted_variables) == ("accepted", False)


async def test_export_in_the_working_draft_view_is_the_draft_document(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])

    chunks = [await client.answer("project.export", {"view": "working_draft"})]
    while "next_offset" in chunks[-1]:
        chunks.append(
            await client.answer("project.export", {"view": "working_draft", "offset": chunks[-1]["next_offset"]})
        )
    accepted = await client.answer("project.export", {"offset": 0})

    exported = "".join(chunk["xml"] for chunk in chunks).encode("utf-8")
    draft_bytes = await database_sync_to_async(_draft_bytes)()
    assert exported == draft_bytes
    assert b'name="Extra1"' in exported
    assert 'name="Extra1"' not in accepted["xml"]


def _draft_bytes() -> bytes:
    return documents.serialize(drafts.current(Project.objects.get(slug=SLUG)).document)


# --- stale revisions, stale contexts, ownership ------------------------------------------------------------


MODIFYING = {
    "change_group.begin": {"title": "Late"},
    "change_group.stage": {"operations": [add("Late")]},
    "change_group.unstage": {"count": 1},
    "change_group.submit": {"acknowledge_findings": True},
    "change_group.close": {},
}


def arguments_for(tool: str, group_id: str) -> dict[str, Any]:
    return {**MODIFYING[tool], **({} if tool == "change_group.begin" else {"group_id": group_id})}


async def _staged_group(client: Client) -> str:
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])
    return group_id


@pytest.mark.parametrize(
    "group_id", ["", "not-a-uuid", "x" * 64, "{12345678-1234"], ids=["empty", "word", "long", "brace"]
)
@pytest.mark.parametrize("tool", [t for t in MODIFYING if t != "change_group.begin"])
async def test_a_group_id_that_is_not_a_uuid_is_not_found_and_stores_nothing(client, tool, group_id):
    await _staged_group(client)
    before = await stored()

    changed = await client.refusal(tool, {**arguments_for(tool, group_id), **await client.expected()})
    described = await client.refusal("change_group.describe", {"group_id": group_id})

    assert (changed["error"], described["error"]) == ("FORGE_ERR_NOT_FOUND", "FORGE_ERR_NOT_FOUND")
    assert await stored() == before


@pytest.mark.parametrize("tool", MODIFYING)
async def test_a_stale_working_revision_is_refused_with_the_current_one_before_anything_is_stored(client, tool):
    group_id = await _staged_group(client)
    expected = await client.expected()
    before = await stored()

    content = await client.refusal(
        tool,
        {
            **arguments_for(tool, group_id),
            **expected,
            "expected_working_revision": expected["expected_working_revision"] - 1,
        },
    )

    assert content["error"] == "FORGE_ERR_STALE_REVISION"
    assert content["current_working_revision"] == before[0]
    assert "draft.events" in content["message"]
    assert await stored() == before


@pytest.mark.parametrize("tool", MODIFYING)
async def test_a_stale_context_generation_is_refused_with_the_current_one_before_anything_is_stored(client, tool):
    group_id = await _staged_group(client)
    expected = await client.expected()
    await bump_context(client.handle)
    before = await stored()

    content = await client.refusal(tool, {**arguments_for(tool, group_id), **expected})

    assert content["error"] == "FORGE_ERR_STALE_CONTEXT"
    assert content["current_context_generation"] == expected["expected_context_generation"] + 1
    assert "session.status" in content["message"]
    assert await stored() == before


async def test_the_current_context_generation_after_a_stale_one_is_accepted(client):
    group_id = await _staged_group(client)
    await bump_context(client.handle)

    staged = await client.stage(group_id, [add("Extra2")])

    assert staged["changed_ids"] == ["pou/LineMain/var/Extra2"]


@pytest.mark.parametrize("tool", [t for t in MODIFYING if t != "change_group.begin"])
async def test_a_session_may_not_change_a_group_another_session_began(client, other_client, tool):
    group_id = await _staged_group(other_client)
    before = await stored()

    content = await client.refusal(tool, {**arguments_for(tool, group_id), **await client.expected()})

    assert content["error"] == "FORGE_ERR_NOT_GROUP_OWNER"
    assert content["group_id"] == group_id
    assert "change_group.begin" in content["message"]
    assert await stored() == before


async def test_of_two_sessions_staging_from_the_same_revision_the_second_is_told_the_current_one(client, other_client):
    mine = await client.begin("Mine")
    theirs = await other_client.begin("Theirs")
    seen = await client.expected()

    won = await client.answer("change_group.stage", {"group_id": mine, "operations": [add("Mine")], **seen})
    lost = await other_client.refusal(
        "change_group.stage",
        {"group_id": theirs, "operations": [add("Theirs")], **seen, **await _generation(other_client)},
    )

    assert won["working_revision"] == seen["expected_working_revision"] + 1
    assert (lost["error"], lost["current_working_revision"]) == ("FORGE_ERR_STALE_REVISION", won["working_revision"])
    assert (await client.answer("draft.describe"))["added"] == ["pou/LineMain/var/Mine"]


async def test_a_modifying_call_without_the_expected_values_is_invalid_params(client):
    response = await client.call("change_group.begin", {"title": "No revision"})

    assert response.error_code == INVALID_PARAMS
    assert await stored() == (0, 0, 0, 0)


# --- the audit row of every call -------------------------------------------------------------------------


async def test_every_draft_tool_call_is_audited_with_the_project_and_its_outcome(client):
    group_id = await client.begin()
    await client.stage(group_id, [add("Extra1")])
    await client.answer("change_group.check", {"operations": [add("Extra2")]})
    await client.answer("change_group.describe", {"group_id": group_id})
    await client.answer("change_group.unstage", {"group_id": group_id, **await client.expected()})
    await client.stage(group_id, [add("Extra1")])
    await client.answer("change_group.submit", {"group_id": group_id, **await client.expected()})
    await client.answer("change_group.close", {"group_id": group_id, **await client.expected()})
    await client.answer("draft.describe")
    await client.answer("draft.events")

    for tool in (
        "draft.status",
        "draft.describe",
        "draft.events",
        "change_group.begin",
        "change_group.check",
        "change_group.stage",
        "change_group.unstage",
        "change_group.describe",
        "change_group.submit",
        "change_group.close",
    ):
        events = await tool_calls(tool)
        assert events, tool
        assert {(e.project, e.outcome, e.called_by, e.client_label) for e in events} == {
            (SLUG, "ok", "olivia", "olivia-client")
        }, tool
    [stage, *_] = await tool_calls("change_group.stage")
    assert stage.arguments["group_id"] == group_id
    assert stage.arguments["operations"][0]["name"] == "Extra1"
    assert stage.arguments["session_handle"] == client.handle


async def test_a_refused_draft_call_is_audited_with_its_code(client, other_client):
    group_id = await _staged_group(other_client)
    await client.refusal("change_group.close", {"group_id": group_id, **await client.expected()})
    await client.refusal(
        "change_group.begin", {"title": "Stale", "expected_working_revision": 0, "expected_context_generation": 0}
    )

    [*_, close] = await tool_calls("change_group.close")
    [*_, begin] = await tool_calls("change_group.begin")
    assert (close.outcome, close.project) == ("FORGE_ERR_NOT_GROUP_OWNER", SLUG)
    assert (begin.outcome, begin.project) == ("FORGE_ERR_STALE_CONTEXT", SLUG)


async def test_a_draft_call_with_invalid_params_is_audited_as_such(client):
    await client.call("change_group.begin", {"title": "No revision"})

    [event] = await tool_calls("change_group.begin")
    assert (event.project, event.outcome) == (SLUG, "invalid_params")


async def test_a_draft_call_with_an_unknown_session_handle_is_not_found_and_stores_nothing(cast, steps):
    stranger = Client(cast.operator.raw_token, "not-a-handle")

    content = await stranger.refusal(
        "change_group.begin", {"title": "X", "expected_working_revision": 0, "expected_context_generation": 0}
    )

    assert content["error"] == "FORGE_ERR_NOT_FOUND"
    assert await stored() == (0, 0, 0, 0)


def _pending_handle(raw_token: str, slug: str) -> str:
    """A new stateless session whose access request no operator has decided yet."""
    token = ClientToken.objects.get(digest=token_digest(raw_token))
    handle = mint_handle(token, STATELESS, CLIENT_INFO)
    raise_request(token, handle, Project.objects.get(slug=slug))
    return handle.id


async def test_a_draft_call_before_an_operator_allowed_the_session_is_pending_and_stores_nothing(cast, steps):
    token = cast.operator.raw_token
    waiting = Client(token, await database_sync_to_async(_pending_handle)(token, SLUG))

    content = await waiting.refusal(
        "change_group.begin", {"title": "X", "expected_working_revision": 0, "expected_context_generation": 0}
    )
    status = await waiting.refusal("draft.status", {})

    assert content["error"] == status["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    assert await stored() == (0, 0, 0, 0)


async def test_session_status_with_a_handle_reports_that_sessions_generation_and_grants(client):
    stored = await database_sync_to_async(McpSession.objects.get)(pk=client.handle)
    assert await client.generation() == stored.context_generation > 0
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(client.token, "tools/call", name="session.status"),
        body=stateless_rpc("tools/call", {"name": "session.status", "arguments": {"session_handle": client.handle}}),
    )
    status = response.json()["result"]["structuredContent"]
    assert status["session_handle"] == client.handle
    assert {"project": SLUG, "state": "allowed"} in status["access"]


async def test_session_status_with_an_unknown_handle_is_not_found(client):
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(client.token, "tools/call", name="session.status"),
        body=stateless_rpc("tools/call", {"name": "session.status", "arguments": {"session_handle": "nope"}}),
    )
    assert response.json()["result"]["structuredContent"]["error"] == "FORGE_ERR_NOT_FOUND"


async def _status_with_handle(token: str, handle: str) -> dict[str, Any]:
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "tools/call", name="session.status"),
        body=stateless_rpc("tools/call", {"name": "session.status", "arguments": {"session_handle": handle}}),
    )
    assert response.status == 200, response.body
    return response.json()["result"]["structuredContent"]


async def test_session_status_with_a_handle_is_audited_under_that_handle(client):
    # session.status once looked the handle up itself, and its audit row named no session: the registry's
    # one lookup (admit) puts the handle's session on the call, so the row names it as for any tool.
    await _status_with_handle(client.token, client.handle)

    rows = await tool_calls("session.status")
    assert rows[-1].session == client.handle


async def test_session_status_refuses_a_streamable_session_id_passed_as_a_handle(client):
    session_id = await open_session(client.token)

    status = await _status_with_handle(client.token, session_id)

    assert status["error"] == "FORGE_ERR_NOT_FOUND"


async def test_session_status_refuses_another_principals_handle(client, cast):
    status = await _status_with_handle(cast.caretaker.raw_token, client.handle)

    assert status["error"] == "FORGE_ERR_NOT_FOUND"


async def test_a_stateless_calls_audit_row_names_its_session_handle(client):
    await client.answer("draft.status")
    row = await database_sync_to_async(
        lambda: AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool="draft.status").order_by("-seq").first()
    )()
    assert row.session == client.handle
