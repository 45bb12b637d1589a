"""The working-draft review in chromium: an SDK client builds a change group (begin, stage, submit) while
an operator watches it appear on the drafts screen without a reload, opens its review, reads the diff and
the group's rationale, and clicks Accept all: the project file then holds the change, and the client,
still connected, reads the acceptance from draft.events.

The server is started once for the module. The SDK client is async and Playwright's sync API owns the
test's thread, so the client runs on an anyio portal: an event loop in a thread of its own, whose tasks
are cancelled if the test fails before they end.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from projects.plcopen import documents
from tests.browser.conftest import OPERATOR, WAIT_MS, ConsoleServer, screenshot_path
from tests.browser.test_dashboard import log_in
from tests.live import LiveServer, manage, prepare, run_server, scratch_database, streamable_client
from tests.projects.conftest import MAIN, fixture_path

if TYPE_CHECKING:
    from mcp.client import Client
    from playwright.sync_api import Page

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = type(sync_api.expect)()  # this module's own, waiting up to WAIT_MS rather than Playwright's 5 s
expect.set_options(timeout=WAIT_MS)

pytestmark = pytest.mark.live

BOUND = 20
"""Seconds: the bound on waiting for the live list, and for each step of the client."""
CALL_BOUND = 60
"""Seconds: the client's whole conversation (access, the group, the operator's review, its events) at most."""
PROJECT_FILE = fixture_path(MAIN)
SLUG = "browser-drafts"
TITLE = "Count finished shifts"
RATIONALE = "The night report needs the number of finished shifts; LineMain increments it at each shift end."
ADD = {"op": "add_variable", "scope": "pou/LineMain", "section": "localVars", "name": "ShiftCount", "type": "INT"}


@pytest.fixture(scope="module")
def drafts_console(tmp_path_factory) -> Iterator[ConsoleServer]:
    """A server with the main fixture project imported, a client token of `live` and a console operator."""
    data_dir = tmp_path_factory.mktemp("drafts-console")
    password = f"{OPERATOR}-password-123"
    password_file = data_dir / "operator-password"
    password_file.write_text(password + "\n")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database)
        manage(env, "create_operator", OPERATOR, "--password-file", str(password_file))
        manage(env, "import_project", str(PROJECT_FILE), "--slug", SLUG)
        with run_server(env, token, data_dir) as server:
            yield ConsoleServer(server=server, operator=OPERATOR, password=password)


@pytest.fixture
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal("asyncio") as running:
        try:
            yield running
        finally:
            running.call(running.stop, True)  # a call still waiting (the test failed first) is cancelled


def project_file(server: LiveServer) -> Path:
    return server.data_dir / "projects" / f"{SLUG}.xml"


async def answer(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(BOUND):
        result = await client.call_tool(tool, arguments)
    assert result.is_error is False, (tool, result.structured_content)
    return result.structured_content


async def granted(client: Client, server: LiveServer) -> dict[str, Any]:
    """Ask for the project (allowed from the shell, as a deployment would); what every modifying call carries."""
    asked = await answer(client, "session.request_access", {"project": SLUG})
    if asked["state"] == "pending":
        await anyio.to_thread.run_sync(lambda: server.manage("access_requests", "allow", "--pending", "--as", "live"))
    generation = (await answer(client, "session.status", {}))["context_generation"]
    return {"project": SLUG, "expected_context_generation": generation}


async def submit_group(
    client: Client, expected: dict[str, Any], name: str, operations: list[dict[str, Any]] | None = None
) -> tuple[dict[str, Any], int]:
    """Begin a group, stage one variable `name` (or `operations`) and submit it: the group's arguments and the
    revision after."""
    revision = (await answer(client, "draft.status", {"project": SLUG}))["working_revision"]
    begun = await answer(
        client,
        "change_group.begin",
        {**expected, "title": TITLE, "rationale": RATIONALE, "expected_working_revision": revision},
    )
    group = {**expected, "group_id": begun["group_id"]}
    staged = await answer(
        client,
        "change_group.stage",
        {
            **group,
            "operations": operations or [{**ADD, "name": name}],
            "expected_working_revision": begun["working_revision"],
        },
    )
    done = await answer(
        client, "change_group.submit", {**group, "expected_working_revision": staged["working_revision"]}
    )
    return group, done["working_revision"]


def build_group_then_read_events(
    portal: BlockingPortal, server: LiveServer, submitted: threading.Event, decided: threading.Event
) -> Future[dict[str, Any]]:
    """In the background, the client begins a change group, stages a variable and submits it (then sets
    `submitted`); once `decided` is set, it answers what draft.events says happened after its submission."""

    async def conversation() -> dict[str, Any]:
        with anyio.fail_after(CALL_BOUND):
            async with streamable_client(server, mode="legacy") as client:
                _group, revision = await submit_group(client, await granted(client, server), "ShiftCount")
                submitted.set()
                await anyio.to_thread.run_sync(decided.wait, BOUND)
                return await answer(client, "draft.events", {"project": SLUG, "after_revision": revision})

    return portal.start_task_soon(conversation)


def submit_then_stage_more(
    portal: BlockingPortal, server: LiveServer, submitted: threading.Event, more: threading.Event
) -> Future[int]:
    """In the background, the client submits a group with `Reviewed`; once `more` is set, it stages
    `Unreviewed` into the same group and answers the working revision after it."""

    async def conversation() -> int:
        with anyio.fail_after(CALL_BOUND):
            async with streamable_client(server, mode="legacy") as client:
                group, revision = await submit_group(client, await granted(client, server), "Reviewed")
                submitted.set()
                await anyio.to_thread.run_sync(more.wait, BOUND)
                staged = await answer(
                    client,
                    "change_group.stage",
                    {**group, "operations": [{**ADD, "name": "Unreviewed"}], "expected_working_revision": revision},
                )
                return staged["working_revision"]

    return portal.start_task_soon(conversation)


def test_an_operator_sees_a_draft_appear_reviews_its_diff_and_rationale_and_accepts_it(
    page: Page, drafts_console: ConsoleServer, portal: BlockingPortal, tmp_path: Path
):
    server = drafts_console.server
    before = project_file(server).read_bytes()
    log_in(page, drafts_console)
    page.goto(f"{server.base}/console/drafts/")
    expect(page.locator("#no-drafts")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")  # the live feed is connected
    submitted, decided = threading.Event(), threading.Event()

    events = build_group_then_read_events(portal, server, submitted, decided)
    row = page.locator(f"#draft-{SLUG}")
    expect(row).to_be_visible(timeout=BOUND * 1000)  # the list follows /console/events
    assert submitted.wait(BOUND), "the client did not submit its change group"
    expect(row.locator("td.number").nth(1)).to_have_text("1")  # one operation
    row.get_by_role("link", name=SLUG).click()

    expect(page).to_have_url(re.compile(rf"/console/drafts/{SLUG}/$"))
    added = page.locator("#draft-diff pre.diff .added").filter(has_text='<variable name="ShiftCount">')
    expect(added).to_have_count(1)
    expect(page.locator("#added")).to_have_text("pou/LineMain/var/ShiftCount")
    group = page.locator("#draft-groups .group")
    expect(group).to_have_count(1)
    expect(group.locator("h3")).to_contain_text(TITLE)
    expect(group.locator("h3 .state-badge")).to_have_text("submitted")
    expect(group.locator(".rationale")).to_have_text(RATIONALE)
    expect(group).to_contain_text("by live through live-e2e, 1 operation")
    accepted_before = int(page.locator("#accepted-revision").inner_text())
    page.screenshot(path=screenshot_path("drafts.png", tmp_path), full_page=True)
    page.get_by_role("button", name="Accept all").click()

    message = page.locator("ul.messagelist")
    expect(message).to_contain_text(f"Accepted the working draft of {SLUG}: contract ")
    expect(message).to_contain_text(
        f"is verified, and the project is at accepted revision {accepted_before + 1} (1 group, 1 operation)."
    )
    contract_link = message.get_by_role("link")
    expect(contract_link).to_have_attribute(
        "href", re.compile(r"^/console/confirmations/contract/[0-9a-f-]{36}/change/$")
    )
    expect(page.locator("#draft-groups")).to_contain_text("The draft has no live change groups.")
    after = project_file(server).read_bytes()
    assert after != before and b'<variable name="ShiftCount">' in after
    assert documents.validate(documents.load(after)) == []
    decided.set()
    (accepted,) = [event for event in events.result(timeout=BOUND)["events"] if event["kind"] == "accepted"]
    assert accepted["actor"] == OPERATOR

    contract_link.click()
    expect(page.locator("#content-main")).to_contain_text("accept working draft of browser-drafts")


def test_a_draft_that_moves_while_its_review_is_open_is_announced_and_cannot_be_accepted_unseen(
    page: Page, drafts_console: ConsoleServer, portal: BlockingPortal
):
    server = drafts_console.server
    before = project_file(server).read_bytes()
    submitted, more = threading.Event(), threading.Event()
    moved = submit_then_stage_more(portal, server, submitted, more)
    assert submitted.wait(BOUND), "the client did not submit its change group"
    log_in(page, drafts_console)
    page.goto(f"{server.base}/console/drafts/{SLUG}/")
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")  # the page follows the feed
    reviewed = page.locator("#working-revision").inner_text()
    expect(page.locator("#draft-moved")).to_be_hidden()

    more.set()
    now = moved.result(timeout=BOUND)
    expect(page.locator("#draft-moved")).to_be_visible(timeout=BOUND * 1000)
    expect(page.locator("#draft-moved .revision")).to_have_text(f"working revision {now}")
    expect(page.locator("#draft-diff")).not_to_contain_text("Unreviewed")  # what was read stays on the page
    page.get_by_role("button", name="Accept all").click()

    expect(page.locator("ul.messagelist")).to_contain_text(
        f"The working draft of {SLUG} moved from revision {reviewed}, which you reviewed, to {now}; nothing was done."
    )
    assert project_file(server).read_bytes() == before
    expect(page.locator("#draft-diff pre.diff .added").filter(has_text="Unreviewed")).to_have_count(1)
    # Discard asks first (a data-confirm that console.js honours, no inline handler); dismissed, it does nothing.
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Discard").click()
    assert asked == ["Discard every change group of this draft? The project file is not touched."]
    expect(page.locator("#draft-groups .group")).to_have_count(1)
    page.get_by_role("button", name="Accept all").click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Accepted the working draft of {SLUG}")
    after = project_file(server).read_bytes()
    assert b'<variable name="Reviewed">' in after and b'<variable name="Unreviewed">' in after


NEW_BODY = "Litres := Pulses / 10;\nSpill := Litres > 100;"
SPILL = [
    {"op": "add_variable", "scope": "pou/FlowTotal", "section": "localVars", "name": "Spill", "type": "BOOL"},
    {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": NEW_BODY},
]


def test_the_review_shows_a_pous_st_body_as_a_diff_with_line_numbers_and_the_xml_one_click_away(
    page: Page, drafts_console: ConsoleServer, portal: BlockingPortal, tmp_path: Path
):
    server = drafts_console.server
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)

    async def submit() -> None:
        with anyio.fail_after(CALL_BOUND):
            async with streamable_client(server, mode="legacy") as client:
                await submit_group(client, await granted(client, server), "Spill", SPILL)

    portal.call(submit)
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, drafts_console)
    page.goto(f"{server.base}/console/drafts/{SLUG}/")

    unit = page.locator("#cv-pouflowtotal")
    expect(unit.locator("h3")).to_have_text("changed POU FlowTotal (functionBlock) pou/FlowTotal")
    added = unit.locator("table.cv-lines tr.cv-added")
    expect(added).to_have_count(2)
    expect(added.first.locator("td")).to_have_text(["", "1", "Litres := Pulses / 10;"])
    expect(added.nth(1).locator("td")).to_have_text(["", "2", "Spill := Litres > 100;"])
    removed = unit.locator("table.cv-lines tr.cv-removed")
    expect(removed).to_have_count(8)
    expect(removed.nth(1).locator("td")).to_have_text(["2", "", "IF Clear THEN"])
    expect(unit.locator("table.cv-vars tr.cv-added td")).to_have_text(
        ["added", "Spill", "localVars", "BOOL", *[""] * 5]
    )
    raw = page.locator("#raw-diff pre.diff")
    expect(raw).to_be_hidden()
    page.locator("#raw-diff summary").click()
    expect(raw).to_be_visible()
    expect(raw.locator(".added").filter(has_text='<variable name="Spill">')).to_have_count(1)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366  # nothing runs off to the side
    page.screenshot(path=screenshot_path("draft-change-view.png", tmp_path), full_page=True)
    page.emulate_media(color_scheme="dark")  # the admin's theme follows the system's until one is chosen
    expect(added.first.locator("td.cv-code")).to_have_css("background-color", "rgb(18, 54, 31)")
    expect(removed.first.locator("td.cv-code")).to_have_css("color", "rgb(255, 215, 213)")
    page.screenshot(path=screenshot_path("draft-change-view-dark.png", tmp_path), full_page=True)

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Discard").click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Discarded the working draft of {SLUG}")
    assert errors == []
