"""An operator watches the access-request screen: a client's request appears without a reload, the
operator allows it (with the bulk action, or the row's own button), and the client's next read succeeds;
denying from a row asks first, on a page of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest

from mcp_api.revisions import LATEST_HANDSHAKE
from tests.browser.conftest import OPERATOR, ConsoleServer
from tests.browser.test_dashboard import log_in
from tests.projects.conftest import LATIN1, fixture_path

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

PROJECT_FILE = fixture_path(LATIN1)
SLUG = "browser-tower"


class McpClient:
    """Just enough of an MCP client over raw HTTP: one session, tools/call."""

    def __init__(self, console: ConsoleServer, token: str) -> None:
        self.url = console.server.mcp_url
        self.http = httpx.Client(
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            timeout=10.0,
        )
        answer = self.http.post(
            self.url,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": LATEST_HANDSHAKE,
                    "capabilities": {},
                    "clientInfo": {"name": "browser-test", "version": "1"},
                },
            },
        )
        self.http.headers.update(
            {"Mcp-Session-Id": answer.headers["mcp-session-id"], "MCP-Protocol-Version": LATEST_HANDSHAKE}
        )

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = self.http.post(
            self.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}},
        )
        return answer.json()["result"]["structuredContent"]


def test_a_new_access_request_appears_live_and_once_allowed_the_client_reads(page: Page, console_server: ConsoleServer):
    server = console_server.server
    server.manage("mcp_switch", "on")
    server.manage("import_project", str(PROJECT_FILE), "--slug", SLUG)
    token = server.new_token("browser-client", user=OPERATOR)
    log_in(page, console_server)
    page.goto(f"{server.base}/console/access/accessrequest/")
    expect(page.locator("#content-main")).to_contain_text("0 access requests")
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")  # the live feed is connected

    client = McpClient(console_server, token)
    refused = client.call("project.overview", {"project": SLUG})

    row = page.locator("#result_list tbody tr").filter(has_text=SLUG)
    expect(row).to_contain_text("Pending", timeout=10_000)  # no reload: the page follows /console/events
    row.locator("input[type=checkbox]").check()
    page.locator("select[name=action]").select_option("allow")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".messagelist")).to_contain_text("Decided 1 request(s).")
    allowed = client.call("project.overview", {"project": SLUG})

    assert refused["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    assert (allowed["project"], allowed["view"]) == (SLUG, "accepted")


def request_appears(page: Page, console_server: ConsoleServer) -> tuple[McpClient, Any]:
    """MCP on, a project, the list open and live, and a client whose first read raised a request: its row."""
    server = console_server.server
    server.manage("mcp_switch", "on")
    server.manage("import_project", str(PROJECT_FILE), "--slug", SLUG)
    log_in(page, console_server)
    page.goto(f"{server.base}/console/access/accessrequest/")
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")
    client = McpClient(console_server, server.new_token("browser-client", user=OPERATOR))
    assert client.call("project.overview", {"project": SLUG})["error"] == "FORGE_ERR_PROJECT_ACCESS_PENDING"
    row = page.locator("#result_list tbody tr").filter(has_text=SLUG)
    expect(row).to_contain_text("Pending")
    return client, row


def test_an_operator_allows_a_request_with_the_button_on_its_row(page: Page, console_server: ConsoleServer):
    client, row = request_appears(page, console_server)

    row.get_by_role("button", name="Allow").click()

    expect(page.locator(".messagelist")).to_contain_text(f"Allowed browser-client on {SLUG}.")
    expect(row).to_contain_text("Allowed")
    expect(row.get_by_role("link", name="Revoke…")).to_be_visible()
    allowed = client.call("project.overview", {"project": SLUG})
    assert (allowed["project"], allowed["view"]) == (SLUG, "accepted")


def test_denying_from_a_row_asks_first_and_the_client_stays_refused(page: Page, console_server: ConsoleServer):
    client, row = request_appears(page, console_server)

    row.get_by_role("link", name="Deny…").click()
    expect(page.locator("#confirm-decision")).to_contain_text(f"Deny this session access to {SLUG}?")
    page.locator("#confirm").click()

    expect(page.locator(".messagelist")).to_contain_text(f"Denied browser-client on {SLUG}.")
    expect(page.locator("#result_list tbody tr").filter(has_text=SLUG)).to_contain_text("Denied")
    assert client.call("project.overview", {"project": SLUG})["error"] == "FORGE_ERR_PROJECT_ACCESS_DENIED"
