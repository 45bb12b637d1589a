"""The console's dashboard in chromium: logging in through the form, the MCP switch button, a client's
session showing up in the sessions table, and a configuration copied with its button."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from mcp_api.revisions import LATEST_HANDSHAKE
from tests.browser.conftest import CLIENT_LABEL, CLIENT_OWNER, ConsoleServer, csp_violations, screenshot_path

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

SCREENSHOT_NAME = "dashboard.png"


def log_in(page: Page, console: ConsoleServer) -> None:
    page.goto(console.console_url)
    expect(page).to_have_url(re.compile(r"/console/login/"))
    page.get_by_label("Username").fill(console.operator)
    page.get_by_label("Password").fill(console.password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(console.console_url)


def open_client_session(console: ConsoleServer, client_name: str) -> str:
    """What an MCP client does first: initialize, then notifications/initialized; returns the session id."""
    headers = {
        "Authorization": f"Bearer {console.server.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": client_name, "version": "0.9.1"},
        },
    }
    with httpx.Client(headers=headers, timeout=10.0) as http:
        answered = http.post(console.server.mcp_url, json=initialize)
        assert answered.status_code == 200, answered.text
        session_id = answered.headers["mcp-session-id"]
        initialized = http.post(
            console.server.mcp_url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={"Mcp-Session-Id": session_id, "MCP-Protocol-Version": LATEST_HANDSHAKE},
        )
        assert initialized.status_code == 202, initialized.text
    return session_id


def test_an_operator_logs_in_and_switches_mcp_on_with_the_dashboard_button(page: Page, console_server: ConsoleServer):
    log_in(page, console_server)
    expect(page.locator("#mcp-switch .state")).to_contain_text("MCP is off")

    page.get_by_role("button", name="Switch MCP on").click()

    expect(page.locator("ul.messagelist")).to_contain_text("MCP switched on")
    expect(page.locator("#mcp-switch .state")).to_contain_text("MCP is on")
    expect(page.locator("#mcp-switch")).to_contain_text(f"Turned on by {console_server.operator}")
    expect(page.get_by_role("button", name="Switch MCP off")).to_be_visible()
    assert console_server.server.manage("mcp_switch", "status").strip() == "MCP is on."


def test_a_client_session_opened_over_http_appears_in_the_sessions_table_after_a_reload(
    page: Page, console_server: ConsoleServer, tmp_path: Path
):
    console_server.server.manage("mcp_switch", "on")
    log_in(page, console_server)
    expect(page.locator("#open-session-count")).to_have_text("0")

    session_id = open_client_session(console_server, "Claude Desktop")
    page.reload()

    expect(page.locator("#open-session-count")).to_have_text("1")
    rows = page.locator("#open-sessions tbody tr")
    expect(rows).to_have_count(1)
    cells = rows.first.locator("td")
    expect(cells.nth(0)).to_have_text(f"{CLIENT_LABEL} (Claude Desktop 0.9.1)")
    expect(cells.nth(1)).to_have_text(CLIENT_OWNER)
    expect(cells.nth(2)).to_have_text(LATEST_HANDSHAKE)
    expect(cells.nth(3)).to_have_text("streamable-http")
    expect(cells.nth(6).locator("a")).to_have_attribute("href", f"/console/access/mcpsession/{session_id}/change/")
    page.screenshot(path=screenshot_path(SCREENSHOT_NAME, tmp_path), full_page=True)


def test_the_copy_button_puts_a_client_configuration_on_the_clipboard(page: Page, console_server: ConsoleServer):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console_server.server.base)
    log_in(page, console_server)
    # Caught up with the live feed: the dashboard is not swapped for a fresh copy (a "Copy" label) after this.
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")

    page.locator("#configuration-claude_desktop").get_by_role("button", name="Copy").click()

    expect(page.locator("#configuration-claude_desktop button")).to_have_text("Copied")
    copied = json.loads(page.evaluate("navigator.clipboard.readText()"))
    assert copied["mcpServers"]["forge"] == {
        "command": "npx",
        "args": ["mcp-remote", console_server.server.mcp_url, "--header", "Authorization: Bearer <your token>"],
    }


def test_the_dashboard_runs_under_its_content_security_policy_with_nothing_refused(
    page: Page, console_server: ConsoleServer
):
    violations = csp_violations(page)
    log_in(page, console_server)

    response = page.reload()

    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    # The live feed (console.js, a static file) connected, and the Copy button works (console.js).
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")
    page.locator("#configuration-cursor").get_by_role("button", name="Copy").click()
    expect(page.locator("#configuration-cursor button")).not_to_have_text("Copy")
    assert violations == []
