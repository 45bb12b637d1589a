"""Identities in chromium: an operator makes a client token on the console's form, sees it once with a
Copy button and a ready configuration, and the client it was made for connects with it; the token is never
shown again. Revoking one from its row asks first, then the client is refused. An operator lets a client
principal see a project on the principals screen. A runtime connector token made on its screen posts the
snapshot of the curl shown with it, until it is revoked from its row."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import httpx
import pytest

from mcp_api.revisions import LATEST_HANDSHAKE
from tests.browser.conftest import CLIENT_LABEL, CLIENT_OWNER, ConsoleServer
from tests.browser.test_dashboard import log_in
from tests.projects.conftest import LATIN1, fixture_path

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

LABEL = "cursor-on-the-laptop"


def initialize_status(console: ConsoleServer, token: str) -> int:
    answer = httpx.post(
        console.server.mcp_url,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LATEST_HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        timeout=10.0,
    )
    return answer.status_code


def test_a_client_token_made_in_the_console_is_shown_once_copied_and_works(page: Page, console_server: ConsoleServer):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(page, console_server)
    page.goto(f"{console_server.console_url}access/clienttoken/")
    page.get_by_role("link", name=re.compile("Add client token", re.I)).click()
    page.get_by_label("Label").fill(LABEL)
    page.get_by_label("Owner principal").fill(CLIENT_OWNER)
    page.get_by_role("button", name="Create token").click()

    raw = page.locator("#raw-token").inner_text()
    page.locator("#token-created button.copy").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    expect(page.locator("#configuration-text-claude_code")).to_contain_text(f"Bearer {raw}")
    page.get_by_role("link", name=re.compile("Back to the client tokens")).click()
    row = page.locator("#result_list tbody tr").filter(has_text=LABEL)
    expect(row).to_contain_text(raw[:12])
    listed = page.content()
    row.get_by_role("link", name=LABEL).click()
    shown_again = page.content()

    assert raw.startswith("fmcp_") and copied == raw
    assert raw not in listed and raw not in shown_again
    assert initialize_status(console_server, raw) == 200


def test_an_operator_lets_a_principal_see_a_project(page: Page, console_server: ConsoleServer):
    console_server.server.manage("import_project", str(fixture_path(LATIN1)), "--slug", "tower")
    log_in(page, console_server)
    page.goto(f"{console_server.console_url}access/clientprincipal/")
    page.get_by_role("link", name=CLIENT_OWNER).click()

    page.get_by_label(re.compile("tower")).check()
    page.get_by_role("button", name=f"Set the projects {CLIENT_OWNER} may see").click()

    expect(page.locator(".messagelist")).to_contain_text(f"Changed what {CLIENT_OWNER} may see on 1 project(s).")
    expect(page.locator("#visible-tower")).to_be_checked()


def test_revoking_a_token_from_its_row_asks_first_and_the_client_is_refused(page: Page, console_server: ConsoleServer):
    log_in(page, console_server)
    page.goto(f"{console_server.console_url}access/clienttoken/")
    row = page.locator("#result_list tbody tr").filter(has_text=CLIENT_LABEL)

    row.get_by_role("link", name="Revoke…").click()
    expect(page.locator("#confirm-decision")).to_contain_text("this cannot be undone")
    before = initialize_status(console_server, console_server.server.token)
    page.locator("#confirm").click()

    expect(page.locator(".messagelist")).to_contain_text(f"Revoked {CLIENT_LABEL}")
    expect(row).to_contain_text("revoked")
    expect(row.get_by_role("link", name="Revoke…")).to_have_count(0)
    assert (before, initialize_status(console_server, console_server.server.token)) == (200, 401)


def post_snapshot(console: ConsoleServer, slug: str, token: str, body: dict) -> int:
    answer = httpx.post(
        f"{console.server.base}/api/projects/{slug}/runtime-snapshots",
        headers={"Authorization": f"Bearer {token}"},
        json=body,
        timeout=10.0,
    )
    return answer.status_code


def test_a_runtime_token_made_in_the_console_posts_the_shown_snapshot_until_it_is_revoked(
    page: Page, console_server: ConsoleServer
):
    console_server.server.manage("import_project", str(fixture_path(LATIN1)), "--slug", "tower")
    log_in(page, console_server)
    page.goto(f"{console_server.console_url}access/runtimetoken/")
    page.get_by_role("link", name=re.compile("Add runtime connector token", re.I)).click()
    page.get_by_label("Label").fill("tower-gateway")
    tower = page.locator("#id_project option", has_text="(tower)").get_attribute("value")
    page.get_by_label("Project").select_option(value=tower)
    page.get_by_role("button", name="Create token").click()

    raw = page.locator("#raw-token").inner_text()
    curl = page.locator("#configuration-text-runtime_curl").inner_text()
    body = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    stored = post_snapshot(console_server, "tower", raw, body)
    page.get_by_role("link", name=re.compile("Back to the runtime connector tokens")).click()
    row = page.locator("#result_list tbody tr").filter(has_text="tower-gateway")
    expect(row).to_contain_text("tower")
    row.get_by_role("link", name="Revoke…").click()
    page.locator("#confirm").click()

    expect(page.locator(".messagelist")).to_contain_text("Revoked tower-gateway")
    expect(row).to_contain_text("revoked")
    assert raw.startswith("frt_") and f"Bearer {raw}" in curl
    assert (stored, post_snapshot(console_server, "tower", raw, body)) == (201, 401)
