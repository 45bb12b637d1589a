"""Resources, prompts and completions through the MCP endpoint in-process: what each method answers, the
consent gates in front of a project's content (refused without a grant, not found when not visible), bounds
and paging, the audit row of every call, and `notifications/resources/updated` on the session's stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async

from access.grants import do_decide_access, raise_request
from access.models import AccessRequest, McpSession
from access.services import do_switch_mcp
from audit.models import AuditEvent, EventKind
from mcp_api.consent import MCP_OFF, RESOURCE_NOT_FOUND, SESSION_HANDLE_META_KEY
from mcp_api.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, REFUSED
from mcp_api.models import ResourceSubscription
from mcp_api.resources import MAX_SUBSCRIPTIONS_PER_SESSION, PAGE_SIZE
from projects import drafts
from projects.models import Project
from projects.services import do_import_project, project_path
from tests.mcp_api.helpers import (
    Response,
    allow_project,
    envelope,
    initialize_message,
    mcp_headers,
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

SLUG = "steps"
ACCEPTED = f"forge://projects/{SLUG}/accepted.xml"
DRAFT = f"forge://projects/{SLUG}/draft.xml"
FLOW_TOTAL_BODY = f"forge://projects/{SLUG}/pous/FlowTotal/body.st"
TEMPLATE_OF_BODY = "forge://projects/{slug}/pous/{pou}/body.st"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def steps(transactional_db) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug=SLUG, acting_user="tests")


def _allow(session_id: str, slug: str) -> None:
    session = McpSession.objects.select_related("token").get(pk=session_id)
    request = raise_request(session.token, session, Project.objects.get(slug=slug))
    do_decide_access(request.pk, allow=True, user=session.token.owner)


allow = database_sync_to_async(_allow)


async def ask(token: str, session_id: str, method: str, params: dict[str, Any] | None = None) -> Response:
    return await post(token, rpc(method, params or {}), session_id=session_id)


async def result_of(token: str, session_id: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await ask(token, session_id, method, params)
    assert response.status == 200 and "result" in response.json(), response.body
    return response.json()["result"]


async def error_of(token: str, session_id: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await ask(token, session_id, method, params)
    assert response.status == 200 and "error" in response.json(), response.body
    return response.json()["error"]


@pytest.fixture
async def granted(cast, steps) -> str:
    """An initialized session of the operator's token, allowed on the project."""
    session_id = await open_session(cast.operator.raw_token)
    await allow(session_id, SLUG)
    return session_id


@database_sync_to_async
def audit_rows(method: str) -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool=method).values_list("outcome", "project"))


@database_sync_to_async
def subscriptions() -> list[tuple[str, str]]:
    return list(ResourceSubscription.objects.values_list("session_id", "uri"))


# --- capabilities ------------------------------------------------------------------------------------


async def test_initialize_declares_resources_with_subscribe_prompts_and_completions(cast):
    response = await post(cast.operator.raw_token, initialize_message("2025-06-18"))

    assert response.json()["result"]["capabilities"] == {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": False},
        "prompts": {"listChanged": False},
        "completions": {},
        "logging": {},
    }


async def test_initialize_at_2024_11_05_declares_no_completions_capability(cast):
    response = await post(cast.operator.raw_token, initialize_message("2024-11-05"))

    assert "completions" not in response.json()["result"]["capabilities"]


async def test_server_discover_declares_resources_without_subscribe(cast):
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(cast.operator.raw_token, "server/discover"),
        body=stateless_rpc("server/discover"),
    )

    assert response.json()["result"]["capabilities"]["resources"] == {"listChanged": False}


async def test_resources_subscribe_is_not_offered_at_2026_07_28(cast, steps):
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(cast.operator.raw_token, "resources/subscribe"),
        body=stateless_rpc("resources/subscribe", {"uri": ACCEPTED}),
    )

    assert (response.status, response.error_code) == (404, METHOD_NOT_FOUND)


# --- resources/list and templates ----------------------------------------------------------------------


async def test_resources_list_names_the_guidelines_and_each_visible_projects_files(cast, steps):
    session_id = await open_session(cast.operator.raw_token)

    listing = await result_of(cast.operator.raw_token, session_id, "resources/list")

    assert [r["uri"] for r in listing["resources"]] == ["forge://guidelines", ACCEPTED, DRAFT]
    assert "nextCursor" not in listing


async def test_resources_list_names_no_project_the_principal_may_not_view(cast, steps):
    session_id = await open_session(cast.caretaker.raw_token)

    listing = await result_of(cast.caretaker.raw_token, session_id, "resources/list")

    assert [r["uri"] for r in listing["resources"]] == ["forge://guidelines"]


async def test_resources_list_names_no_project_while_mcp_is_off(cast, steps):
    session_id = await open_session(cast.operator.raw_token)
    await database_sync_to_async(do_switch_mcp)(False, acting_user="tests")

    listing = await result_of(cast.operator.raw_token, session_id, "resources/list")

    assert [r["uri"] for r in listing["resources"]] == ["forge://guidelines"]


async def test_resources_list_pages_visit_every_resource_exactly_once(cast):
    await database_sync_to_async(
        lambda: Project.objects.bulk_create(
            Project(slug=f"p{n:03d}", name=f"P {n}", path=f"p{n}.xml", fingerprint="0" * 64) for n in range(40)
        )
    )()
    session_id = await open_session(cast.operator.raw_token)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        listing = await result_of(
            cast.operator.raw_token, session_id, "resources/list", {"cursor": cursor} if cursor else {}
        )
        assert len(listing["resources"]) <= PAGE_SIZE
        seen += [r["uri"] for r in listing["resources"]]
        pages += 1
        cursor = listing.get("nextCursor")
        if cursor is None:
            break

    expected = ["forge://guidelines"] + [
        f"forge://projects/p{n:03d}/{file}" for n in range(40) for file in ("accepted.xml", "draft.xml")
    ]
    assert (seen, pages) == (expected, 2)


async def test_resources_list_with_a_cursor_it_did_not_give_is_invalid_params(cast):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(cast.operator.raw_token, session_id, "resources/list", {"cursor": "not-a-cursor"})

    assert error["code"] == INVALID_PARAMS and "resources/list" in error["message"]


async def test_resource_templates_list_the_accepted_file_the_draft_and_a_pous_body(cast):
    session_id = await open_session(cast.operator.raw_token)

    listing = await result_of(cast.operator.raw_token, session_id, "resources/templates/list")

    assert [t["uriTemplate"] for t in listing["resourceTemplates"]] == [
        "forge://projects/{slug}/accepted.xml",
        "forge://projects/{slug}/draft.xml",
        "forge://projects/{slug}/pous/{pou}/body.st",
    ]


# --- resources/read --------------------------------------------------------------------------------------


async def test_reading_the_accepted_file_returns_the_file_as_it_is_on_disk_and_is_audited(cast, steps, granted):
    read = await result_of(cast.operator.raw_token, granted, "resources/read", {"uri": ACCEPTED})

    on_disk = await database_sync_to_async(lambda: project_path(steps).read_bytes().decode())()
    assert read["contents"] == [{"uri": ACCEPTED, "mimeType": "application/xml", "text": on_disk}]
    assert await audit_rows("resources/read") == [("ok", SLUG)]


async def test_reading_the_draft_returns_the_working_drafts_xml(cast, steps, granted):
    read = await result_of(cast.operator.raw_token, granted, "resources/read", {"uri": DRAFT})

    assert read["contents"][0]["text"].lstrip().startswith("<?xml")
    assert 'name="FlowTotal"' in read["contents"][0]["text"]


async def test_reading_a_pous_body_returns_its_structured_text(cast, steps, granted):
    read = await result_of(cast.operator.raw_token, granted, "resources/read", {"uri": FLOW_TOTAL_BODY})

    text = read["contents"][0]["text"]
    assert read["contents"][0]["mimeType"] == "text/plain"
    assert text.startswith("(* The flow meter gives") and text.rstrip().endswith("Litres := Pulses / PulsesPerLitre;")


async def test_reading_a_graphical_pous_body_is_refused_with_where_to_read_it(cast, steps, granted):
    error = await error_of(
        cast.operator.raw_token, granted, "resources/read", {"uri": f"forge://projects/{SLUG}/pous/LineMain/body.st"}
    )

    assert error["code"] == RESOURCE_NOT_FOUND and "project.get_element" in error["message"]


async def test_reading_the_guidelines_names_the_iec_naming_rules(cast):
    session_id = await open_session(cast.caretaker.raw_token)

    read = await result_of(cast.caretaker.raw_token, session_id, "resources/read", {"uri": "forge://guidelines"})

    assert "IEC 61131-3" in read["contents"][0]["text"] and "change_group.begin" in read["contents"][0]["text"]


async def test_reading_without_a_grant_is_refused_as_the_read_tools_refuse_and_raises_the_request(cast, steps):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(cast.operator.raw_token, session_id, "resources/read", {"uri": ACCEPTED})

    assert (error["code"], error["data"]["error"]) == (REFUSED, "FORGE_ERR_PROJECT_ACCESS_PENDING")
    assert await database_sync_to_async(AccessRequest.objects.filter(session_id=session_id).count)() == 1
    assert await audit_rows("resources/read") == [("FORGE_ERR_PROJECT_ACCESS_PENDING", SLUG)]


async def test_reading_a_project_the_principal_may_not_view_is_the_same_as_one_that_does_not_exist(cast, steps):
    session_id = await open_session(cast.caretaker.raw_token)

    hidden = await error_of(cast.caretaker.raw_token, session_id, "resources/read", {"uri": ACCEPTED})
    missing = await error_of(
        cast.caretaker.raw_token, session_id, "resources/read", {"uri": "forge://projects/nothing/accepted.xml"}
    )

    assert hidden["code"] == missing["code"] == RESOURCE_NOT_FOUND
    assert hidden["message"].replace(SLUG, "X") == missing["message"].replace("nothing", "X")


async def test_reading_an_address_this_server_does_not_serve_is_resource_not_found(cast):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(cast.operator.raw_token, session_id, "resources/read", {"uri": "file:///etc/passwd"})

    assert error["code"] == RESOURCE_NOT_FOUND and "resources/list" in error["message"]
    assert await audit_rows("resources/read") == [("not_found", "")]


async def test_reading_while_mcp_is_off_is_refused_with_the_switchs_code(cast, steps, granted, settings):
    await database_sync_to_async(do_switch_mcp)(False, acting_user="tests")

    error = await error_of(cast.operator.raw_token, granted, "resources/read", {"uri": ACCEPTED})

    assert error["data"]["error"] == "FORGE_ERR_MCP_DISABLED"
    # The module's one refusal was not raised: a raised exception would keep this request's frames alive.
    assert MCP_OFF.__traceback__ is None


async def stateless_read(token: str, uri: str, handle: str | None) -> Response:
    meta = envelope(**({SESSION_HANDLE_META_KEY: handle} if handle else {}))
    return await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "resources/read", name=uri),
        body=stateless_rpc("resources/read", {"uri": uri}, meta=meta),
    )


async def test_a_stateless_client_reads_with_the_session_handle_in_meta(cast, steps):
    handle = await database_sync_to_async(allow_project)(cast.operator.raw_token, SLUG)

    response = await stateless_read(cast.operator.raw_token, FLOW_TOTAL_BODY, handle)

    assert response.status == 200, response.body
    assert response.json()["result"]["contents"][0]["text"].startswith("(* The flow meter gives")


async def test_a_stateless_read_without_a_session_handle_is_refused_with_what_to_do(cast, steps):
    response = await stateless_read(cast.operator.raw_token, ACCEPTED, None)

    error = response.json()["error"]
    assert (error["code"], error["data"]["error"]) == (REFUSED, "FORGE_ERR_PROJECT_ACCESS_PENDING")
    assert "session.request_access" in error["message"]


async def test_a_stateless_read_of_an_unknown_address_is_invalid_params_as_2026_07_28_asks(cast):
    response = await stateless_read(cast.operator.raw_token, "forge://nothing", None)

    assert (response.status, response.error_code) == (400, INVALID_PARAMS)


# --- subscriptions ------------------------------------------------------------------------------------------


async def test_subscribing_stores_the_subscription_once_and_unsubscribing_removes_it(cast, steps, granted):
    for _ in range(2):
        assert await result_of(cast.operator.raw_token, granted, "resources/subscribe", {"uri": ACCEPTED}) == {}
    assert await subscriptions() == [(granted, ACCEPTED)]

    assert await result_of(cast.operator.raw_token, granted, "resources/unsubscribe", {"uri": ACCEPTED}) == {}

    assert await subscriptions() == []
    assert [outcome for outcome, _ in await audit_rows("resources/subscribe")] == ["ok", "ok"]


async def test_subscribing_without_a_grant_is_refused_and_stores_nothing(cast, steps):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(cast.operator.raw_token, session_id, "resources/subscribe", {"uri": DRAFT})

    assert error["data"]["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    assert await subscriptions() == []
    assert await audit_rows("resources/subscribe") == [("FORGE_ERR_PROJECT_ACCESS_PENDING", SLUG)]
    assert await database_sync_to_async(AccessRequest.objects.filter(session_id=session_id).count)() == 1


async def test_a_session_holds_a_bounded_number_of_subscriptions(cast, steps, granted):
    await database_sync_to_async(
        lambda: ResourceSubscription.objects.bulk_create(
            ResourceSubscription(session_id=granted, project=steps, uri=f"forge://projects/{SLUG}/pous/P{n}/body.st")
            for n in range(MAX_SUBSCRIPTIONS_PER_SESSION)
        )
    )()

    error = await error_of(cast.operator.raw_token, granted, "resources/subscribe", {"uri": ACCEPTED})

    assert error["data"]["error"] == "FORGE_ERR_LIMIT_REACHED"
    assert len(await subscriptions()) == MAX_SUBSCRIPTIONS_PER_SESSION


async def test_a_change_to_a_subscribed_file_is_announced_on_the_sessions_stream(cast, steps, granted):
    token = cast.operator.raw_token
    await result_of(token, granted, "resources/subscribe", {"uri": ACCEPTED})
    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=granted)) as stream:
        await stream.first_chunk()
        # Another tool edits the file: the next read records the new accepted revision.
        path = await database_sync_to_async(lambda: project_path(steps))()
        path.write_bytes(path.read_bytes() + b"<!-- edited elsewhere -->\n")
        await result_of(token, granted, "tools/call", {"name": "project.overview", "arguments": {"project": SLUG}})

        event = await stream.next_event()

    assert event.json() == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": ACCEPTED},
    }


def begin_a_group(project: Project, owner: Any) -> None:
    """Another session begins a change group: the working draft moves to its next revision."""
    drafts.do_begin_group(
        project,
        session_id="another-session",
        principal=owner,
        client_label="another",
        title="Elsewhere",
        rationale="tests",
        expected_revision=drafts.status(project)["working_revision"],
    )


async def test_a_change_to_the_draft_is_announced_to_its_subscribers(cast, steps, granted):
    token = cast.operator.raw_token
    await result_of(token, granted, "resources/subscribe", {"uri": DRAFT})
    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=granted)) as stream:
        await stream.first_chunk()
        await database_sync_to_async(begin_a_group)(steps, cast.caretaker.user)

        event = await stream.next_event()

    assert event.json()["params"] == {"uri": DRAFT}


# --- prompts ------------------------------------------------------------------------------------------------


async def test_prompts_list_offers_the_three_jobs_with_their_arguments(cast):
    session_id = await open_session(cast.caretaker.raw_token)

    listing = await result_of(cast.caretaker.raw_token, session_id, "prompts/list")

    assert {p["name"]: [a["name"] for a in p["arguments"]] for p in listing["prompts"]} == {
        "add_io_variables": ["project", "pou", "signals"],
        "restructure_pou": ["project", "pou", "goal", "task"],
        "fix_findings": ["project", "pou", "variable"],
    }


async def test_getting_a_prompt_returns_guidance_naming_the_project_and_pou_and_is_audited(cast, steps, granted):
    got = await result_of(
        cast.operator.raw_token,
        granted,
        "prompts/get",
        {"name": "add_io_variables", "arguments": {"project": SLUG, "pou": "FlowTotal", "signals": "a reset button"}},
    )

    text = got["messages"][0]["content"]["text"]
    assert got["messages"][0]["role"] == "user"
    assert "POU FlowTotal of project steps" in text and "a reset button" in text and "change_group.submit" in text
    assert await audit_rows("prompts/get") == [("ok", SLUG)]


async def test_getting_a_prompt_without_a_grant_is_refused(cast, steps):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(
        cast.operator.raw_token, session_id, "prompts/get", {"name": "fix_findings", "arguments": {"project": SLUG}}
    )

    assert (error["code"], error["data"]["error"]) == (REFUSED, "FORGE_ERR_PROJECT_ACCESS_PENDING")


async def test_getting_a_prompt_without_a_required_argument_is_invalid_params_naming_it(cast, steps, granted):
    error = await error_of(
        cast.operator.raw_token, granted, "prompts/get", {"name": "restructure_pou", "arguments": {"project": SLUG}}
    )

    assert error["code"] == INVALID_PARAMS and "missing pou" in error["message"]


async def test_getting_an_unknown_prompt_is_invalid_params(cast, granted):
    error = await error_of(cast.operator.raw_token, granted, "prompts/get", {"name": "make_coffee"})

    assert error["code"] == INVALID_PARAMS and "prompts/list" in error["message"]


# --- completions --------------------------------------------------------------------------------------------


def prompt_ref(name: str = "add_io_variables") -> dict[str, str]:
    return {"type": "ref/prompt", "name": name}


async def completion(
    token: str, session_id: str, ref: dict[str, str], argument: str, value: str, **known: str
) -> dict[str, Any]:
    """The completion of one argument, the arguments already chosen given as context."""
    params = {"ref": ref, "argument": {"name": argument, "value": value}, "context": {"arguments": known}}
    return (await result_of(token, session_id, "completion/complete", params))["completion"]


async def test_completing_a_project_offers_only_projects_the_principal_may_view(cast, steps):
    await database_sync_to_async(
        lambda: Project.objects.create(slug="stamp", name="Stamp", path="stamp.xml", fingerprint="0" * 64)
    )()
    operator = await open_session(cast.operator.raw_token)
    caretaker = await open_session(cast.caretaker.raw_token)
    params = {"ref": prompt_ref(), "argument": {"name": "project", "value": "st"}}

    seen = await result_of(cast.operator.raw_token, operator, "completion/complete", params)
    unseen = await result_of(cast.caretaker.raw_token, caretaker, "completion/complete", params)

    assert seen["completion"] == {"values": ["stamp", "steps"], "total": 2, "hasMore": False}
    assert unseen["completion"] == {"values": [], "total": 0, "hasMore": False}


async def test_completing_a_project_is_bounded_to_100_values(cast):
    await database_sync_to_async(
        lambda: Project.objects.bulk_create(
            Project(slug=f"p{n:03d}", name=f"P {n}", path=f"p{n}.xml", fingerprint="0" * 64) for n in range(130)
        )
    )()
    session_id = await open_session(cast.operator.raw_token)

    got = await result_of(
        cast.operator.raw_token,
        session_id,
        "completion/complete",
        {"ref": prompt_ref(), "argument": {"name": "project", "value": "p"}},
    )

    assert len(got["completion"]["values"]) == 100 and got["completion"]["hasMore"] is True


async def test_completing_a_templates_pou_offers_the_projects_pou_names_by_prefix(cast, steps, granted):
    got = await completion(
        cast.operator.raw_token, granted, {"type": "ref/resource", "uri": TEMPLATE_OF_BODY}, "pou", "f", slug=SLUG
    )

    assert got == {"values": ["FillPercent", "FlowTotal"], "total": 2, "hasMore": False}


async def test_completing_a_task_offers_the_projects_tasks(cast, steps, granted):
    got = await completion(cast.operator.raw_token, granted, prompt_ref("restructure_pou"), "task", "c", project=SLUG)

    assert got["values"] == ["Cycle"]


async def test_completing_a_variable_of_a_pou_offers_only_that_pous_variables(cast, steps, granted):
    got = await completion(
        cast.operator.raw_token, granted, prompt_ref("fix_findings"), "variable", "pul", project=SLUG, pou="FlowTotal"
    )

    assert got["values"] == ["Pulse", "Pulses", "PulsesPerLitre"]


async def test_completing_a_pou_without_a_grant_is_refused(cast, steps):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(
        cast.operator.raw_token,
        session_id,
        "completion/complete",
        {"ref": prompt_ref(), "argument": {"name": "pou", "value": ""}, "context": {"arguments": {"project": SLUG}}},
    )

    assert error["data"]["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    assert await audit_rows("completion/complete") == [("FORGE_ERR_PROJECT_ACCESS_PENDING", SLUG)]


async def test_completing_with_an_unknown_reference_is_invalid_params(cast):
    session_id = await open_session(cast.operator.raw_token)

    error = await error_of(
        cast.operator.raw_token,
        session_id,
        "completion/complete",
        {"ref": {"type": "ref/resource", "uri": "forge://elsewhere/{x}"}, "argument": {"name": "x", "value": ""}},
    )

    assert error["code"] == INVALID_PARAMS


# --- hostile parameters -------------------------------------------------------------------------------------

HOSTILE = [
    ("resources/read", {"uri": ["forge://guidelines"]}),
    ("resources/read", {"uri": "forge://projects/st%00eps/accepted.xml"}),
    ("resources/read", {"uri": f"forge://projects/{SLUG}/pous/Flow%00Total/body.st"}),
    ("resources/read", {"uri": f"forge://projects/{SLUG}/pous/a%2F..%2Fb/body.st"}),
    ("resources/read", {"uri": "forge://projects/" + "x" * 5000 + "/accepted.xml"}),
    ("resources/subscribe", {"uri": None}),
    ("resources/list", {"cursor": {"offset": 1}}),
    ("resources/templates/list", {"cursor": "zz"}),
    ("prompts/list", {"cursor": "zz"}),
    ("prompts/get", {"name": {"a": 1}, "arguments": [1, 2]}),
    ("prompts/get", {"name": "fix_findings", "arguments": {"project": SLUG, "pou": 7}}),
    ("completion/complete", {"ref": "ref/prompt", "argument": {"name": "project", "value": ""}}),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": None}, "argument": {"name": "pou"}}),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "fix_findings"}, "argument": {"name": "pou", "value": "x" * 201}},
    ),
    (
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "fix_findings"},
            "argument": {"name": "pou", "value": ""},
            "context": {"arguments": {"project": "st%00eps", "pou": ["x"]}},
        },
    ),
]


@pytest.mark.parametrize(("method", "params"), HOSTILE)
async def test_hostile_parameters_are_refused_by_the_client_error_codes_never_an_internal_error(
    cast, steps, granted, method, params
):
    response = await ask(cast.operator.raw_token, granted, method, params)

    assert response.status == 200, response.body
    assert response.json()["error"]["code"] in (INVALID_PARAMS, RESOURCE_NOT_FOUND, REFUSED)


async def test_a_project_whose_file_is_gone_is_not_found_for_a_read_and_a_completion(cast, steps, granted):
    await database_sync_to_async(lambda: project_path(steps).unlink())()

    read = await error_of(cast.operator.raw_token, granted, "resources/read", {"uri": ACCEPTED})
    completed = await error_of(
        cast.operator.raw_token,
        granted,
        "completion/complete",
        {"ref": prompt_ref(), "argument": {"name": "pou", "value": ""}, "context": {"arguments": {"project": SLUG}}},
    )

    assert read["code"] == RESOURCE_NOT_FOUND and read["data"]["error"] == "FORGE_ERR_NOT_FOUND"
    assert completed["data"]["error"] == "FORGE_ERR_NOT_FOUND"
