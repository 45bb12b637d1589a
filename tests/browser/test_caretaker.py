"""The caretaker's screens in chromium: a caretaker switches the caretaker on by typing the sentence, creates the
team CA, adds a peer and mints its one-time code; the member's client asks for a certificate with it over MCP
(team.request_cert); the caretaker approves the request on its confirmation page by typing the key's memorable
ID, sees the peer active with its key art, and revokes it by typing that ID again.

The server is an override deployment (FORGE_OVERRIDE_SECURITIES=1, the first of the four conditions) whose
operator also holds the caretaker's permission. Screenshots: caretaker-*.png (docs/images with
FORGE_SCREENSHOTS=docs/images).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from caretaker.models import ACCEPTANCE_SENTENCE
from caretaker.randomart import key_art
from tests.browser.conftest import OPERATOR, WAIT_MS, ConsoleServer, screenshot_path
from tests.browser.test_dashboard import log_in
from tests.live import manage, prepare, run_server, scratch_database

if TYPE_CHECKING:
    from playwright.sync_api import Page

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = type(sync_api.expect)()  # this module's own, waiting up to WAIT_MS rather than Playwright's 5 s
expect.set_options(timeout=WAIT_MS)

pytestmark = pytest.mark.live

PEER = "alice@team"
GRANT_CARETAKER = (
    "from django.contrib.auth.models import Permission, User; "
    f"User.objects.get(username='{OPERATOR}').user_permissions.add("
    "Permission.objects.get(codename='act_as_caretaker'))"
)
REVISION = "2025-11-25"


@pytest.fixture
def caretaker_console(tmp_path_factory) -> Iterator[ConsoleServer]:
    """An override deployment, MCP on, a client token of `live`, and an operator who may act as caretaker."""
    data_dir = tmp_path_factory.mktemp("caretaker-console")
    password = f"{OPERATOR}-password-123"
    password_file = data_dir / "operator-password"
    password_file.write_text(password + "\n")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database, FORGE_OVERRIDE_SECURITIES="1")
        manage(env, "create_operator", OPERATOR, "--password-file", str(password_file))
        manage(env, "shell", "-c", GRANT_CARETAKER)
        with run_server(env, token, data_dir) as server:
            yield ConsoleServer(server=server, operator=OPERATOR, password=password)


def csr_pem(key: ed25519.Ed25519PrivateKey) -> str:
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "alice-laptop")]))
        .sign(key, None)
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()


def rpc_answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, sent as JSON or as the one event of an event stream."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[len("data:") :].strip() for line in response.text.splitlines() if line.startswith("data:")]
        answers = [json.loads(item) for item in data if item]
        return next(answer for answer in answers if "id" in answer)
    return response.json()


def request_certificate(console: ConsoleServer, code: str, csr: str) -> dict[str, Any]:
    """What a member's client does: open a session and call team.request_cert; the structured refusal
    (FORGE_ERR_CONFIRMATION_REQUIRED) with the pending confirmation's id."""
    headers = {
        "Authorization": f"Bearer {console.server.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "alice", "version": "1"}},
    }
    with httpx.Client(headers=headers, timeout=30.0) as http:
        opened = http.post(console.server.mcp_url, json=initialize)
        assert opened.status_code == 200, opened.text
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": REVISION}
        http.post(
            console.server.mcp_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
        )
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "team.request_cert", "arguments": {"enrollment_code": code, "csr": csr}},
        }
        result = rpc_answer(http.post(console.server.mcp_url, json=call, headers=session))["result"]
    assert result["isError"] is True, result
    structured = result.get("structuredContent") or json.loads(result["content"][0]["text"])
    assert structured["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", structured
    return structured


def test_a_caretaker_activates_issues_on_the_typed_memorable_id_and_revokes(
    page: Page, caretaker_console: ConsoleServer, tmp_path: Path
):
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, caretaker_console)
    page.goto(f"{caretaker_console.server.base}/console/caretaker/")
    expect(page.locator("#condition-override")).to_contain_text("FORGE_OVERRIDE_SECURITIES=1")
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")  # the page follows the feed

    # The sentence, typed exactly; then the CA: the last condition.
    page.locator("#sentence").fill(ACCEPTANCE_SENTENCE)
    page.locator("#activate").click()
    expect(page.locator("#condition-acceptance")).to_contain_text(f"accepted by {OPERATOR}")
    page.locator("#key-type").select_option("ed25519")
    page.locator("#create-ca").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Team CA created")
    expect(page.locator("#caretaker-state")).to_contain_text("is the team's active caretaker")
    expect(page.locator("#ca-randomart")).to_contain_text("[SHA256]")
    page.screenshot(path=screenshot_path("caretaker-activated.png", tmp_path), full_page=True)

    # A peer, and its one-time code, shown once.
    page.locator("#peer-name").fill(PEER)
    page.locator("#peer-endpoint").fill("https://alice-ws.factory:7531")
    page.locator("#add-peer-button").click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Peer {PEER} added")
    page.locator(f'tr[data-peer="{PEER}"] button.mint-code').click()
    code = page.locator("#raw-code").inner_text().strip()
    assert re.fullmatch(r"fenr_\S+", code), code
    page.screenshot(path=screenshot_path("caretaker-code.png", tmp_path), full_page=True)

    # The member's client asks; the request shows up on the (live) caretaker screen.
    key = ed25519.Ed25519PrivateKey.generate()
    csr = csr_pem(key)
    typed = key_art(csr.encode()).memorable_id
    page.goto(f"{caretaker_console.server.base}/console/caretaker/")
    expect(page.locator("#no-team-requests")).to_be_visible()
    asked = request_certificate(caretaker_console, code, csr)
    assert asked["memorable_id"] == typed
    request_link = page.locator("#team-requests a.team-request")
    expect(request_link).to_have_count(1)
    request_link.click()

    # The confirmation page shows the key's art; approving takes the key's memorable ID.
    expect(page.locator("#key-art-memorable-id")).to_have_text(typed)
    expect(page.locator("#key-art-randomart")).to_contain_text("[SHA256]")
    page.screenshot(path=screenshot_path("caretaker-approve.png", tmp_path), full_page=True)
    page.locator("#typed-id").fill(typed)
    page.locator("#approve").click()
    expect(page.locator("#confirmation-state")).to_have_text("executed")

    page.goto(f"{caretaker_console.server.base}/console/caretaker/")
    row = page.locator(f'tr[data-peer="{PEER}"]')
    expect(row.locator(".peer-state")).to_have_text("active")
    expect(row.locator(".peer-memorable-id")).to_have_text(typed)
    expect(page.locator("#roster-signature")).to_contain_text("OK")
    expect(page.locator("#roster-sequence")).to_have_text("1")
    page.screenshot(path=screenshot_path("caretaker-peers.png", tmp_path), full_page=True)

    # Revoking takes the key's memorable ID too.
    row.locator('input[name="reason"]').fill("laptop lost")
    row.locator('input[name="typed_id"]').fill(typed)
    row.locator("button.revoke-button").click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Revoked the certificate of {PEER}")
    expect(page.locator(f'tr[data-peer="{PEER}"] .peer-state')).to_have_text("revoked")
    expect(page.locator("#roster-sequence")).to_have_text("2")
    page.screenshot(path=screenshot_path("caretaker-revoked.png", tmp_path), full_page=True)

    crl = httpx.get(f"{caretaker_console.server.base}/crl.pem", timeout=10.0)
    assert crl.status_code == 200
    assert len(list(x509.load_pem_x509_crl(crl.content))) == 1
