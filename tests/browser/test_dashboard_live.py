"""The dashboard follows the console's live feed: an open dashboard shows a new access request, a working draft
submitted for review and the switch turned from a shell without a reload, within the 2 s issue 17 asks for,
and its buttons still work after."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import OPERATOR, ConsoleServer
from tests.browser.test_access_requests import PROJECT_FILE, SLUG, McpClient
from tests.browser.test_dashboard import log_in
from tests.browser.test_drafts import PROJECT_FILE as DRAFTS_PROJECT_FILE
from tests.browser.test_drafts import SLUG as DRAFTS_SLUG
from tests.browser.test_layout import allowed_client, console, propose_a_write, submit_a_group

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

__all__ = ["console"]  # an override deployment with a project (test_layout's), a fixture

LIVE_MS = 2_000
"""How soon an open dashboard must show a change (issue 17): the bound on each wait below."""


def open_dashboard(page: Page, console: ConsoleServer) -> None:
    log_in(page, console)
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")  # the live feed is connected


def test_a_new_access_request_appears_on_an_open_dashboard_without_a_reload(page: Page, console_server: ConsoleServer):
    server = console_server.server
    server.manage("mcp_switch", "on")
    server.manage("import_project", str(PROJECT_FILE), "--slug", SLUG)
    client = McpClient(console_server, server.new_token("dashboard-client", user=OPERATOR))
    open_dashboard(page, console_server)
    expect(page.locator("#pending-request-count")).to_have_text("0")
    expect(page.locator("#open-session-count")).to_have_text("1")

    refused = client.call("project.overview", {"project": SLUG})

    assert refused["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    expect(page.locator("#pending-request-count")).to_have_text("1", timeout=LIVE_MS)
    expect(page.locator("#waiting-items")).to_contain_text("1 access request")


def test_a_change_group_submitted_for_review_is_counted_on_an_open_dashboard_without_a_reload(
    page: Page, console_server: ConsoleServer
):
    server = console_server.server
    server.manage("mcp_switch", "on")
    server.manage("import_project", str(DRAFTS_PROJECT_FILE), "--slug", DRAFTS_SLUG)
    client = McpClient(console_server, server.new_token("drafting-client", user=OPERATOR))
    open_dashboard(page, console_server)
    expect(page.locator("#draft-count")).to_have_text("0")

    submit_a_group(console_server, client, decider=OPERATOR)

    expect(page.locator("#draft-count")).to_have_text("1", timeout=LIVE_MS)


def test_a_direct_write_waiting_for_a_decision_is_counted_on_an_open_dashboard_without_a_reload(
    page: Page, console: ConsoleServer
):
    client = allowed_client(console)
    open_dashboard(page, console)
    expect(page.locator("#pending-confirmation-count")).to_have_text("0")

    propose_a_write(client, "DashboardCount")

    expect(page.locator("#pending-confirmation-count")).to_have_text("1", timeout=LIVE_MS)


def test_the_switch_turned_off_from_a_shell_shows_on_an_open_dashboard_without_a_reload(
    page: Page, console_server: ConsoleServer
):
    server = console_server.server
    server.manage("mcp_switch", "on")
    open_dashboard(page, console_server)
    expect(page.locator("#mcp-switch .state")).to_contain_text("MCP is on")

    server.manage("mcp_switch", "off")

    expect(page.locator("#mcp-switch .state")).to_contain_text("MCP is off", timeout=LIVE_MS)
    expect(page.get_by_role("button", name="Switch MCP on")).to_be_visible()


def test_a_copy_button_still_copies_after_the_dashboard_was_swapped_for_a_fresh_copy(
    page: Page, console_server: ConsoleServer
):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console_server.server.base)
    open_dashboard(page, console_server)
    page.evaluate("document.querySelector('#forge-dashboard').dataset.before = 'swap'")

    console_server.server.manage("mcp_switch", "on")
    expect(page.locator("#mcp-switch .state")).to_contain_text("MCP is on", timeout=LIVE_MS)
    expect(page.locator("#forge-dashboard")).not_to_have_attribute("data-before", "swap")
    page.locator("#configuration-cursor").get_by_role("button", name="Copy").click()

    expect(page.locator("#configuration-cursor button")).to_have_text("Copied")
    assert '"Authorization": "Bearer <your token>"' in page.evaluate("navigator.clipboard.readText()")
