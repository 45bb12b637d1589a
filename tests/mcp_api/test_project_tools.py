"""The project read tools through the MCP endpoint in-process: the frame every answer carries, refusals
and invalid params, cursors and offsets that visit everything exactly once, findings, export, placement,
and the audit row of every call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async

from audit.models import AuditEvent, EventKind
from mcp_api.jsonrpc import INVALID_PARAMS
from projects import document_reads
from projects.models import Project
from projects.plcopen import documents, paging, tc6
from projects.services import do_import_project
from tests.mcp_api.helpers import Response, allow_project, send, stateless_headers, stateless_rpc
from tests.projects.conftest import CRLF, MAIN, SMALL, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

STEPS = MAIN
CRLF_FIXTURE = CRLF  # 79 KB with CRLF line endings: three export chunks

READ_TOOLS: dict[str, dict[str, Any]] = {
    "project.overview": {},
    "project.find": {"text": "pulse"},
    "project.get_element": {"element_id": "pou/FlowTotal"},
    "project.list_variables": {"scope": "pou/LineMain"},
    "project.check": {},
    "project.export": {},
    "project.suggest_placement": {"topic": "dosed volume in percent"},
}
PAGED_TOOLS = {
    "project.find": {},
    "project.list_variables": {},
    "project.check": {},
    "project.suggest_placement": {"topic": "pulse"},
}
CURSOR_TOOLS = {
    "project.find": {},
    "project.list_variables": {},
    "project.get_element": {"element_id": "pou/FlowTotal"},
}


# --- hand-made projects ----------------------------------------------------------------------------


def handmade(pous: str, name: str = "Handmade") -> bytes:
    """A small TC6 2.01 project; every one built here is schema-valid (registration checks it)."""
    return tc6.project_skeleton(
        name=name, product="Forge tests", created="2024-01-01T00:00:00", pous=f"{pous}\n"
    ).encode()


def st_program(name: str, variables: str, code: str) -> str:
    return (
        f'<pou name="{name}" pouType="program"><interface>{variables}</interface>'
        f"<body><ST><xhtml:p><![CDATA[{code}]]></xhtml:p></ST></body></pou>"
    )


def int_var(name: str) -> str:
    return f'<variable name="{name}"><type><INT/></type></variable>'


LONG_BODY = "".join(f"Counter := Counter + {n}; (* step {n:05d} of a long body *)\n" for n in range(600))
LONG_PROJECT = handmade(st_program("LongLogic", f"<localVars>{int_var('Counter')}</localVars>", LONG_BODY))
DUPLICATE_PROJECT = handmade(
    st_program(
        "Main",
        f"<localVars>{int_var('Counter')}</localVars><inputVars>{int_var('COUNTER')}</inputVars>",
        "Counter := Counter + 1;",
    )
)


# --- fixtures and calls ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


def register(data: bytes, slug: str) -> Project:
    return do_import_project(data, slug=slug, acting_user="tests")


@pytest.fixture
def steps(transactional_db) -> Project:
    return register(fixture_bytes(STEPS), "steps")


async def call(token: str, tool: str, arguments: dict[str, Any]) -> Response:
    """One tools/call at 2026-07-28: a single POST with the session handle of an allowed grant."""
    if tool != "project.list" and isinstance(arguments.get("project"), str) and "session_handle" not in arguments:
        handle = await database_sync_to_async(allow_project)(token, arguments["project"].strip().lower())
        arguments = {**arguments, "session_handle": handle}
    return await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "tools/call", name=tool),
        body=stateless_rpc("tools/call", {"name": tool, "arguments": arguments}),
    )


async def answer(token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a call that must succeed."""
    response = await call(token, tool, arguments)
    assert response.status == 200, response.body
    result = response.json()["result"]
    assert result["isError"] is False, result["structuredContent"]
    return result["structuredContent"]


async def refusal(token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a call the tool refuses (isError)."""
    response = await call(token, tool, arguments)
    assert response.status == 200, response.body
    result = response.json()["result"]
    assert result["isError"] is True, result["structuredContent"]
    return result["structuredContent"]


@database_sync_to_async
def tool_calls(tool: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool=tool))


# --- the frame and shape of every answer -----------------------------------------------------------


async def test_project_list_names_every_registered_project_by_slug_and_name(cast, steps):
    await database_sync_to_async(register)(fixture_bytes(SMALL), "press")

    listing = await answer(cast.operator.raw_token, "project.list", {})

    assert listing == {
        "projects": [{"project": "press", "name": "Press IO"}, {"project": "steps", "name": "Dosing Line"}]
    }


@pytest.mark.parametrize("tool", READ_TOOLS)
async def test_every_read_tool_frames_its_answer_with_view_project_and_accepted_revision(cast, steps, tool):
    content = await answer(cast.operator.raw_token, tool, {"project": "steps", **READ_TOOLS[tool]})

    assert (content["view"], content["project"], content["accepted_revision"]) == ("accepted", "steps", 1)


async def test_overview_counts_what_the_project_holds(cast, steps):
    content = await answer(cast.operator.raw_token, "project.overview", {"project": "steps"})

    assert content["name"] == "Dosing Line"
    assert content["counts"]["pous"] == 7
    assert content["counts"]["pous_by_type"] == {"function": 1, "functionBlock": 5, "program": 1}
    assert content["counts"]["configurations"] == 1
    assert content["counts"]["variables"] == 42


async def test_find_answers_element_summaries_and_no_cursor_on_the_last_page(cast, steps):
    content = await answer(cast.operator.raw_token, "project.find", {"project": "steps", "kind": "pou"})

    assert [item["id"] for item in content["items"]] == [
        "pou/FillPercent",
        "pou/LineMain",
        "pou/FlowTotal",
        "pou/LabelGate",
        "pou/RinseCycle",
        "pou/CapTorque",
        "pou/ReliefValve",
    ]
    assert content["items"][0] == {"id": "pou/FillPercent", "kind": "pou", "name": "FillPercent", "type": "function"}
    assert content["next_cursor"] is None


async def test_get_element_of_a_pou_answers_its_interface_and_st_body(cast, steps):
    content = await answer(
        cast.operator.raw_token, "project.get_element", {"project": "steps", "element_id": "pou/FlowTotal"}
    )

    assert (content["id"], content["kind"], content["pou_type"]) == ("pou/FlowTotal", "pou", "functionBlock")
    assert [section["section"] for section in content["interface"]["sections"]] == [
        "inputVars",
        "localVars",
        "outputVars",
        "externalVars",
    ]
    body = content["body"]
    assert (body["language"], body["offset"], body["total_chars"], body["truncated"]) == ("ST", 0, 230, False)
    assert body["text"].startswith("(* The flow meter gives PulsesPerLitre pulses per litre; count rising edges. *)\n")
    assert body["text"].endswith("LastPulse := Pulse;\nLitres := Pulses / PulsesPerLitre;")
    assert body["next_cursor"] is None


async def test_list_variables_of_a_scope_answers_only_that_scopes_variables(cast, steps):
    content = await answer(
        cast.operator.raw_token, "project.list_variables", {"project": "steps", "scope": "pou/LineMain"}
    )

    assert len(content["items"]) == 13
    assert {item["scope"] for item in content["items"]} == {"pou/LineMain"}
    assert content["items"][0] == {
        "id": "pou/LineMain/var/Halt",
        "kind": "variable",
        "name": "Halt",
        "scope": "pou/LineMain",
        "section": "inputVars",
        "type": "BOOL",
        "initial_value": None,
        "address": None,
        "documentation": "Stops every station and clears its tally.",
        "retain": False,
        "constant": False,
    }
    assert content["next_cursor"] is None


async def test_check_of_a_clean_fixture_answers_no_findings_and_no_next_offset(cast, steps):
    content = await answer(cast.operator.raw_token, "project.check", {"project": "steps"})

    assert content["counts"] == {"problem": 0, "advisory": 0}
    assert content["findings"] == []
    assert "next_offset" not in content


# --- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", READ_TOOLS)
async def test_a_read_of_an_unknown_project_is_refused_as_not_found(cast, steps, tool):
    content = await refusal(cast.operator.raw_token, tool, {"project": "nowhere", **READ_TOOLS[tool]})

    assert content["error"] == "FORGE_ERR_NOT_FOUND"
    assert "project.list" in content["message"]


async def test_get_element_of_an_unknown_element_id_is_refused_as_not_found(cast, steps):
    content = await refusal(
        cast.operator.raw_token, "project.get_element", {"project": "steps", "element_id": "pou/Nowhere"}
    )

    assert content["error"] == "FORGE_ERR_NOT_FOUND"
    assert "pou/Nowhere" in content["message"]


async def test_list_variables_of_an_unknown_scope_is_refused_as_not_found(cast, steps):
    content = await refusal(
        cast.operator.raw_token, "project.list_variables", {"project": "steps", "scope": "pou/Nowhere"}
    )

    assert content["error"] == "FORGE_ERR_NOT_FOUND"


@pytest.mark.parametrize("tool", PAGED_TOOLS)
async def test_a_limit_over_200_is_invalid_params(cast, steps, tool):
    response = await call(cast.operator.raw_token, tool, {"project": "steps", **PAGED_TOOLS[tool], "limit": 201})

    assert response.error_code == INVALID_PARAMS


async def test_a_body_limit_over_32000_is_invalid_params(cast, steps):
    response = await call(
        cast.operator.raw_token,
        "project.get_element",
        {"project": "steps", "element_id": "pou/FlowTotal", "body_limit": 32001},
    )

    assert response.error_code == INVALID_PARAMS


@pytest.mark.parametrize("tool", CURSOR_TOOLS)
async def test_a_cursor_the_server_did_not_issue_is_invalid_params(cast, steps, tool):
    response = await call(cast.operator.raw_token, tool, {"project": "steps", **CURSOR_TOOLS[tool], "cursor": "!!bad"})

    assert response.error_code == INVALID_PARAMS
    assert "cursor" in response.json()["error"]["message"]


async def test_a_find_cursor_reused_for_a_different_query_is_invalid_params(cast, steps):
    token = cast.operator.raw_token
    first = await answer(token, "project.find", {"project": "steps", "limit": 2})

    response = await call(token, "project.find", {"project": "steps", "text": "pulse", "cursor": first["next_cursor"]})

    assert response.error_code == INVALID_PARAMS
    assert "different query" in response.json()["error"]["message"]


async def test_a_find_cursor_given_to_list_variables_is_invalid_params(cast, steps):
    token = cast.operator.raw_token
    first = await answer(token, "project.find", {"project": "steps", "limit": 2})

    response = await call(token, "project.list_variables", {"project": "steps", "cursor": first["next_cursor"]})

    assert response.error_code == INVALID_PARAMS


# --- cursors and offsets ---------------------------------------------------------------------------


async def follow(token: str, tool: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """Every page of a cursor-paged read, from the first to the one without next_cursor."""
    pages = [await answer(token, tool, arguments)]
    while pages[-1]["next_cursor"] is not None:
        assert len(pages) < 100, "the cursor never ends"
        pages.append(await answer(token, tool, {**arguments, "cursor": pages[-1]["next_cursor"]}))
    return pages


async def test_find_pages_with_next_cursor_visit_every_element_exactly_once(cast, steps):
    token = cast.operator.raw_token
    whole = await answer(token, "project.find", {"project": "steps", "limit": 200})

    pages = await follow(token, "project.find", {"project": "steps", "limit": 7})

    visited = [item["id"] for page in pages for item in page["items"]]
    assert whole["next_cursor"] is None
    assert visited == [item["id"] for item in whole["items"]]
    assert len(visited) == len(set(visited)) == 53
    assert [len(page["items"]) for page in pages] == [7] * 7 + [4]


async def test_list_variables_pages_with_next_cursor_visit_every_variable_exactly_once(cast, steps):
    token = cast.operator.raw_token

    pages = await follow(token, "project.list_variables", {"project": "steps", "limit": 10})

    visited = [item["id"] for page in pages for item in page["items"]]
    assert len(visited) == len(set(visited)) == 42


@pytest.fixture
def long_logic(transactional_db) -> Project:
    return register(LONG_PROJECT, "long")


async def test_get_element_of_a_long_st_body_continues_with_next_cursor_to_the_whole_body(cast, long_logic):
    token = cast.operator.raw_token
    arguments = {"project": "long", "element_id": "pou/LongLogic"}
    bodies = [(await answer(token, "project.get_element", arguments))["body"]]
    while bodies[-1]["next_cursor"] is not None:
        assert len(bodies) < 20, "the body never ends"
        reply = await answer(token, "project.get_element", {**arguments, "cursor": bodies[-1]["next_cursor"]})
        bodies.append(reply["body"])

    assert len(LONG_BODY) > 3 * paging.DEFAULT_BODY_LIMIT
    assert [body["offset"] for body in bodies] == list(range(0, len(LONG_BODY), paging.DEFAULT_BODY_LIMIT))
    assert all(len(body["text"]) == paging.DEFAULT_BODY_LIMIT for body in bodies[:-1])
    assert [body["truncated"] for body in bodies] == [True] * (len(bodies) - 1) + [False]
    assert "".join(body["text"] for body in bodies) == LONG_BODY
    assert {body["total_chars"] for body in bodies} == {len(LONG_BODY)}


async def test_a_body_cursor_of_one_element_is_invalid_params_for_another(cast, long_logic):
    token = cast.operator.raw_token
    first = await answer(token, "project.get_element", {"project": "long", "element_id": "pou/LongLogic"})

    response = await call(
        token,
        "project.get_element",
        {"project": "long", "element_id": "pou/LongLogic/var/Counter", "cursor": first["body"]["next_cursor"]},
    )

    assert response.error_code == INVALID_PARAMS


@pytest.fixture
def crlf_fixture(transactional_db) -> Project:
    return register(fixture_bytes(CRLF_FIXTURE), "batch")


async def test_export_chunks_followed_by_next_offset_concatenate_to_the_exact_file(cast, crlf_fixture):
    token = cast.operator.raw_token
    chunks = [await answer(token, "project.export", {"project": "batch"})]
    while "next_offset" in chunks[-1]:
        assert len(chunks) < 20, "the export never ends"
        chunks.append(await answer(token, "project.export", {"project": "batch", "offset": chunks[-1]["next_offset"]}))

    assert len(chunks) == 3
    assert [chunk["offset"] for chunk in chunks] == [0, 32_000, 64_000]
    assert "".join(chunk["xml"] for chunk in chunks).encode("utf-8") == fixture_bytes(CRLF_FIXTURE)
    assert {chunk["length"] for chunk in chunks} == {len(fixture_bytes(CRLF_FIXTURE).decode("utf-8"))}


async def test_a_project_read_in_chunks_is_serialized_once(cast, crlf_fixture, monkeypatch):
    document_reads._texts.clear()  # as a new process starts
    made = []
    serialize = documents.serialize
    monkeypatch.setattr(documents, "serialize", lambda document: made.append(document) or serialize(document))
    token, offset = cast.operator.raw_token, 0
    while offset is not None:
        chunk = await answer(token, "project.export", {"project": "batch", "offset": offset})
        offset = chunk.get("next_offset")

    assert len(made) == 1


async def test_export_of_a_small_project_is_one_chunk_without_next_offset(cast):
    await database_sync_to_async(register)(fixture_bytes(SMALL), "press")

    content = await answer(cast.operator.raw_token, "project.export", {"project": "press"})

    assert "next_offset" not in content
    assert content["xml"].encode("utf-8") == fixture_bytes(SMALL)


async def test_export_of_an_iso_8859_1_project_is_its_decoded_text(cast):
    raw = fixture_bytes("signal_tower.xml")
    await database_sync_to_async(register)(raw, "tower")

    content = await answer(cast.operator.raw_token, "project.export", {"project": "tower"})

    assert "next_offset" not in content
    assert content["xml"] == raw.decode("iso-8859-1")
    assert "Signalsäule" in content["xml"]


# --- findings and placement ------------------------------------------------------------------------


@pytest.fixture
def duplicate(transactional_db) -> Project:
    return register(DUPLICATE_PROJECT, "duplicate")


async def test_check_finds_a_duplicate_variable_name_as_a_problem(cast, duplicate):
    content = await answer(cast.operator.raw_token, "project.check", {"project": "duplicate"})

    [finding] = [finding for finding in content["findings"] if finding["code"] == "duplicate_name"]
    assert (finding["element_id"], finding["severity"]) == ("pou/Main/var/COUNTER", "problem")
    assert "case-insensitive" in finding["message"]
    assert content["counts"] == {"problem": 1, "advisory": 1}


async def test_check_lists_problems_before_advisories_whatever_their_element_ids(cast, duplicate):
    content = await answer(cast.operator.raw_token, "project.check", {"project": "duplicate"})

    # The advisory is on pou/Main, which sorts before pou/Main/var/COUNTER: severity must come first.
    assert [(f["code"], f["element_id"]) for f in content["findings"]] == [
        ("duplicate_name", "pou/Main/var/COUNTER"),
        ("program_not_instantiated", "pou/Main"),
    ]


async def test_check_pages_with_next_offset_visit_every_finding_once(cast, duplicate):
    token = cast.operator.raw_token
    whole = await answer(token, "project.check", {"project": "duplicate", "limit": 200})
    pages = [await answer(token, "project.check", {"project": "duplicate", "limit": 1})]
    while "next_offset" in pages[-1]:
        assert len(pages) < 50, "the offsets never end"
        pages.append(
            await answer(
                token, "project.check", {"project": "duplicate", "limit": 1, "offset": pages[-1]["next_offset"]}
            )
        )

    assert len(whole["findings"]) == len(pages) == 2
    assert [finding for page in pages for finding in page["findings"]] == whole["findings"]


async def test_suggest_placement_ranks_the_pou_whose_name_matches_the_topic_first(cast, steps):
    content = await answer(
        cast.operator.raw_token, "project.suggest_placement", {"project": "steps", "topic": "dosed volume in percent"}
    )

    first = content["suggestions"][0]
    assert (first["id"], first["kind"], first["pou_type"]) == ("pou/FillPercent", "pou", "function")
    assert first["score"] > content["suggestions"][1]["score"]


async def test_suggest_placement_names_the_task_instance_a_program_runs_in(cast, steps):
    content = await answer(
        cast.operator.raw_token, "project.suggest_placement", {"project": "steps", "topic": "line main"}
    )

    [first, *_] = content["suggestions"]
    assert first["id"] == "pou/LineMain"
    assert first["runs_in"] == ["config/Plant/resource/Cpu1/task/Cycle/instance/Line"]


async def test_suggest_placement_of_a_topic_without_a_word_is_invalid_params(cast, steps):
    response = await call(cast.operator.raw_token, "project.suggest_placement", {"project": "steps", "topic": "a b"})

    assert response.error_code == INVALID_PARAMS


# --- the audit row of every call -------------------------------------------------------------------


@pytest.mark.parametrize("tool", READ_TOOLS)
async def test_every_read_tool_call_is_audited_with_the_project_slug(cast, steps, tool):
    await answer(cast.operator.raw_token, tool, {"project": "steps", **READ_TOOLS[tool]})

    [event] = await tool_calls(tool)
    assert (event.project, event.outcome, event.called_by) == ("steps", "ok", "olivia")


async def test_a_refused_read_of_an_unknown_project_is_audited_with_the_asked_slug_and_the_code(cast, steps):
    await refusal(cast.operator.raw_token, "project.overview", {"project": "nowhere"})

    [event] = await tool_calls("project.overview")
    assert (event.project, event.outcome) == ("nowhere", "FORGE_ERR_NOT_FOUND")


async def test_a_read_with_invalid_params_is_audited_with_the_project_slug(cast, steps):
    await call(cast.operator.raw_token, "project.find", {"project": "steps", "limit": 201})

    [event] = await tool_calls("project.find")
    assert (event.project, event.outcome) == ("steps", "invalid_params")


# --- slugs -----------------------------------------------------------------------------------------


async def test_a_project_named_in_capitals_is_read_and_audited_under_its_slug(cast, steps):
    content = await answer(cast.operator.raw_token, "project.overview", {"project": " Steps "})

    [event] = await tool_calls("project.overview")
    assert content["project"] == "steps"
    assert event.project == "steps"


async def test_a_project_registered_with_capitals_in_its_slug_is_read_by_the_slug_project_list_gives(cast):
    await database_sync_to_async(register)(fixture_bytes(STEPS), "Line3")
    token = cast.operator.raw_token
    [listed] = (await answer(token, "project.list", {}))["projects"]

    content = await answer(token, "project.overview", {"project": listed["project"]})

    assert content["project"] == listed["project"]


# --- the file changed by another tool --------------------------------------------------------------


async def test_a_read_after_another_tool_changed_the_file_answers_the_next_accepted_revision(cast, steps, root):
    path = root / "steps.xml"
    path.write_bytes(path.read_bytes().replace(b'name="Dosing Line"', b'name="Dosing Line, edited"', 1))

    content = await answer(cast.operator.raw_token, "project.overview", {"project": "steps"})

    assert (content["accepted_revision"], content["name"]) == (2, "Dosing Line, edited")


async def test_a_read_after_another_tool_broke_the_file_is_a_tool_error_not_invalid_params(cast, steps, root):
    (root / "steps.xml").write_bytes(b"<project>half a file")

    response = await call(cast.operator.raw_token, "project.overview", {"project": "steps"})

    assert response.error_code is None, response.json()
    assert response.json()["result"]["isError"] is True
    assert response.json()["result"]["structuredContent"]["error"].startswith("FORGE_ERR_")


async def test_a_read_after_the_file_was_removed_is_a_tool_error_not_an_internal_error(cast, steps, root):
    (root / "steps.xml").unlink()

    response = await call(cast.operator.raw_token, "project.overview", {"project": "steps"})

    assert response.error_code is None, response.json()
    assert response.json()["result"]["isError"] is True
    assert response.json()["result"]["structuredContent"]["error"].startswith("FORGE_ERR_")
