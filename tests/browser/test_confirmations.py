"""Pending confirmations in chromium: an SDK client's streaming write waits while an operator watches the
confirmation appear without a reload, reads its preview, and approves it (the client gets the result and
the file holds the change) or denies it (the client is told, with the operator's reason).

The server is an override deployment (direct write tools on), started once for the module. The SDK
client is async and Playwright's sync API owns the test's thread, so the client runs on an anyio portal:
an event loop in a thread of its own, whose tasks are cancelled if the test fails before they end.
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

from caretaker.fingerprint import memorable_id
from projects.plcopen import documents
from tests.browser.conftest import OPERATOR, WAIT_MS, ConsoleServer, screenshot_path
from tests.browser.test_dashboard import log_in
from tests.live import LiveServer, manage, prepare, run_server, scratch_database, streamable_client
from tests.projects.conftest import MAIN, fixture_path

if TYPE_CHECKING:
    from playwright.sync_api import Page

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = type(sync_api.expect)()  # this module's own, waiting up to WAIT_MS rather than Playwright's 5 s
expect.set_options(timeout=WAIT_MS)

pytestmark = pytest.mark.live

BOUND = 20
"""Seconds: the bound on waiting for the live list, the client's progress and the client's answer."""
CALL_BOUND = 60
"""Seconds: the client's whole call (access, proposal, the operator's reading and decision) at most."""
PROJECT_FILE = fixture_path(MAIN)
SLUG = "browser-writes"
ADD = {"project": SLUG, "scope": "pou/LineMain", "section": "localVars", "type": "INT"}
TOOL = "project.write.add_variable"
PENDING_LIST = "/console/confirmations/pendingconfirmation/?state__exact=pending"
CONTRACTS = "/console/confirmations/contract/"


@pytest.fixture(scope="module")
def override_console(tmp_path_factory) -> Iterator[ConsoleServer]:
    """An override deployment with the project imported, a client token of `live` and a console operator."""
    data_dir = tmp_path_factory.mktemp("override-console")
    password = f"{OPERATOR}-password-123"
    password_file = data_dir / "operator-password"
    password_file.write_text(password + "\n")
    settings = {"FORGE_OVERRIDE_SECURITIES": "1", "FORGE_CONFIRM_PROGRESS_SECONDS": "0.2"}
    with scratch_database() as database:
        env, token = prepare(data_dir, **database, **settings)
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


def propose_and_wait(
    portal: BlockingPortal, server: LiveServer, name: str, waiting: threading.Event
) -> Future[dict[str, Any]]:
    """Start the client's streaming write of variable `name` in the background: it asks for the project
    (allowed from the shell, as a deployment would), calls the write tool with a progress callback, and
    answers the call's structured content once an operator decided. `waiting` is set at the first
    progress, when the call is known to be waiting for the decision."""

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        waiting.set()

    async def call() -> dict[str, Any]:
        with anyio.fail_after(CALL_BOUND):
            async with streamable_client(server, mode="legacy") as client:
                asked = (await client.call_tool("project.overview", {"project": SLUG})).structured_content
                if asked.get("error") == "FORGE_ERR_PROJECT_ACCESS_PENDING":
                    await anyio.to_thread.run_sync(
                        lambda: server.manage("access_requests", "allow", "--pending", "--as", "live")
                    )
                answer = await client.call_tool(TOOL, {**ADD, "name": name}, progress_callback=on_progress)
                return answer.structured_content

    return portal.start_task_soon(call)


def watch_pending_list(page: Page, console: ConsoleServer) -> None:
    log_in(page, console)
    page.goto(f"{console.server.base}{PENDING_LIST}")
    expect(page.locator("#content-main")).to_contain_text("0 pending confirmations")
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")  # the live feed is connected


def new_confirmation(page: Page) -> tuple[str, str]:
    """Wait for the one pending confirmation to appear in the list (no reload); its (id, memorable ID)."""
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1, timeout=BOUND * 1000)  # the page follows /console/events
    row = rows.first
    expect(row).to_contain_text(TOOL)
    expect(row).to_contain_text(SLUG)
    href = row.locator("a").first.get_attribute("href") or ""
    found = re.fullmatch(r"/console/confirmations/pendingconfirmation/([0-9a-f-]{36})/change/(?:\?.*)?", href)
    assert found, href
    return found.group(1), row.locator(".memorable-id").inner_text()


def test_an_operator_sees_a_write_appear_live_reads_its_diff_and_approves_it_while_the_client_waits(
    page: Page, override_console: ConsoleServer, portal: BlockingPortal, tmp_path: Path
):
    server = override_console.server
    before = project_file(server).read_bytes()
    watch_pending_list(page, override_console)
    waiting = threading.Event()

    answer = propose_and_wait(portal, server, "FromConsole", waiting)
    confirmation_id, memorable = new_confirmation(page)
    page.locator("#result_list tbody tr a").first.click()

    expect(page).to_have_url(re.compile(rf"/console/confirmations/pendingconfirmation/{confirmation_id}/change/"))
    expect(page.locator("#confirmation-state")).to_have_text("pending")
    expect(page.locator("#confirmation-memorable-id")).to_have_text(memorable)
    variable = page.locator("#cv-poulinemain table.cv-vars tr.cv-added td")
    expect(variable).to_have_text(["added", "FromConsole", "localVars", "INT", *[""] * 5])
    raw = page.locator("#raw-diff pre.diff")
    expect(raw).to_be_hidden()
    page.locator("#preview-diff").click()  # the XML diff, one click away
    expect(page.locator("#preview-diff")).to_have_text("What changes in the file: the XML diff")
    expect(raw.locator(".added").filter(has_text='name="FromConsole"')).to_have_count(1)
    expect(raw).to_be_visible()
    assert waiting.wait(BOUND), "the client's call sent no progress while it waited for the decision"
    page.screenshot(path=screenshot_path("confirmation.png", tmp_path), full_page=True)
    page.get_by_role("button", name="Approve and carry out").click()
    result = answer.result(timeout=BOUND)

    contract = result["result"]["contract_memorable_id"]
    expect(page.locator("ul.messagelist")).to_contain_text(
        f"Approved {memorable} and carried out: contract {contract} is verified."
    )
    expect(page.locator("#confirmation-state")).to_have_text("executed")
    assert memorable == memorable_id(confirmation_id)
    assert (result["state"], result["pending_id"], result["memorable_id"]) == ("executed", confirmation_id, memorable)
    assert result["result"]["changed_ids"] == ["pou/LineMain/var/FromConsole"]
    after = project_file(server).read_bytes()
    assert after != before and b'name="FromConsole"' in after
    assert documents.validate(documents.load(after)) == []

    page.goto(f"{server.base}{CONTRACTS}")
    expect(page.locator("#result_list tbody tr").filter(has_text=contract)).to_contain_text("Verified")
    page.screenshot(path=screenshot_path("contracts.png", tmp_path), full_page=True)


def test_an_operator_denies_a_write_through_its_short_link_and_the_waiting_client_is_told(
    page: Page, override_console: ConsoleServer, portal: BlockingPortal
):
    server = override_console.server
    before = project_file(server).read_bytes()
    watch_pending_list(page, override_console)
    waiting = threading.Event()

    answer = propose_and_wait(portal, server, "DeniedInConsole", waiting)
    confirmation_id, memorable = new_confirmation(page)
    page.goto(f"{server.base}/console/confirmations/{confirmation_id}/")

    expect(page).to_have_url(f"{server.base}/console/confirmations/pendingconfirmation/{confirmation_id}/change/")
    assert waiting.wait(BOUND), "the client's call sent no progress while it waited for the decision"
    page.get_by_label("Reason, if you deny (the client is told)").fill("Not during the night shift")
    page.get_by_role("button", name="Deny").click()
    result = answer.result(timeout=BOUND)

    expect(page.locator("ul.messagelist")).to_contain_text(f"Denied {memorable}: nothing was written")
    expect(page.locator("#confirmation-state")).to_have_text("denied")
    assert result["error"] == "FORGE_ERR_CONFIRMATION_DENIED", result
    assert (result["pending_id"], result["operator_note"]) == (confirmation_id, "Not during the night shift")
    assert project_file(server).read_bytes() == before
