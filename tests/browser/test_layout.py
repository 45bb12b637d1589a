"""Every console screen an operator uses, in chromium at 1366x768 and 1920x1080, in the admin's light theme,
its dark theme as the system asks for it, and its dark theme picked with the theme toggle: each page loads
without a console error, has no horizontal overflow, keeps its text readable against what is behind it (the
console's own colours follow the theme), shows the side menu with the working drafts and the caretaker's
screen in it, and keyboard focus is visible. Set FORGE_SCREENSHOTS to keep a picture of each page."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import OPERATOR, WAIT_MS, ConsoleServer, screenshot_path
from tests.browser.test_access_requests import McpClient
from tests.browser.test_caretaker import GRANT_CARETAKER
from tests.browser.test_confirmations import ADD as WRITE
from tests.browser.test_confirmations import TOOL as WRITE_TOOL
from tests.browser.test_dashboard import log_in
from tests.browser.test_drafts import ADD, PROJECT_FILE, RATIONALE, SLUG, TITLE
from tests.live import manage, prepare, run_server, scratch_database

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

VIEWPORTS = [(1366, 768), (1920, 1080)]
# (name, the system's colour scheme, what the admin's theme toggle holds)
THEMES = [("light", "light", "auto"), ("dark-system", "dark", "auto"), ("dark-toggle", "light", "dark")]
SCREENS = [
    "/console/",
    "/console/audit/",
    "/console/access/accessrequest/",
    "/console/access/clienttoken/",
    "/console/access/mcpsession/",
    "/console/audit/auditevent/",
    "/console/projects/project/",
    "/console/drafts/",
    f"/console/drafts/{SLUG}/",
    "/console/confirmations/pendingconfirmation/",
    "/console/confirmations/contract/",
    "/console/caretaker/",
]
MIN_CONTRAST = 3.0
"""WCAG's least contrast for any text (large text, 3:1); the admin's own text stays well above it."""

# The text of each visible element whose own text has less contrast than MIN_CONTRAST with the colour behind
# it (the nearest background that is not transparent), with both colours.
LOW_CONTRAST = """(minimum) => {
  const rgba = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
  const luminance = ([r, g, b]) => {
    const channel = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  };
  const behind = (element) => {
    for (let node = element; node; node = node.parentElement) {
      const color = rgba(getComputedStyle(node).backgroundColor);
      if (color.length === 3 || (color.length === 4 && color[3] > 0.5)) return color;
    }
    return rgba(getComputedStyle(document.documentElement).backgroundColor);
  };
  const found = [];
  for (const element of document.querySelectorAll("#content *, #nav-sidebar *")) {
    const own = [...element.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const style = getComputedStyle(element);
    if (!own || style.visibility === "hidden" || !element.getClientRects().length) continue;
    const [fore, back] = [luminance(rgba(style.color)), luminance(behind(element))];
    const ratio = (Math.max(fore, back) + 0.05) / (Math.min(fore, back) + 0.05);
    if (ratio < minimum) found.push(`${element.textContent.trim().slice(0, 40)} (${style.color} on ${behind(element)}, ${ratio.toFixed(2)})`);
  }
  return found;
}"""

UNLABELLED = """() => [...document.querySelectorAll("#content input, #content select, #content textarea")]
  .filter((field) => !["hidden", "submit", "button"].includes(field.type) && field.getClientRects().length)
  .filter((field) => !(field.labels && field.labels.length) && !field.getAttribute("aria-label")
    && !field.getAttribute("aria-labelledby") && !field.title)
  .map((field) => field.outerHTML.slice(0, 120))"""


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> Iterator[ConsoleServer]:
    """An override deployment with MCP on, a project, a pending access request, and an operator who may also
    act as caretaker, started once for the module."""
    data_dir = tmp_path_factory.mktemp("layout-console")
    password = f"{OPERATOR}-password-123"
    (data_dir / "operator-password").write_text(password + "\n")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database, FORGE_OVERRIDE_SECURITIES="1")
        manage(env, "create_operator", OPERATOR, "--password-file", str(data_dir / "operator-password"))
        manage(env, "shell", "-c", GRANT_CARETAKER)
        manage(env, "import_project", str(PROJECT_FILE), "--slug", SLUG)
        with run_server(env, token, data_dir) as server:
            console = ConsoleServer(server=server, operator=OPERATOR, password=password)
            submit_a_group(console, McpClient(console, token))
            McpClient(console, token).call("project.overview", {"project": SLUG})  # a request that waits
            yield console


def allowed_client(console: ConsoleServer, decider: str = "live") -> McpClient:
    """A new session of the server's client token, its access to the project allowed from the shell."""
    client = McpClient(console, console.server.token)
    client.call("session.request_access", {"project": SLUG})
    console.server.manage("access_requests", "allow", "--pending", "--as", decider)
    return client


def propose_a_write(client: McpClient, name: str) -> str:
    """A direct write of variable `name` (an override deployment): it waits as a pending confirmation, whose
    short address this returns."""
    answer = client.call(WRITE_TOOL, {**WRITE, "project": SLUG, "name": name})
    assert answer["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", answer
    return f"/console/confirmations/{answer['pending_id']}/"


@pytest.fixture(scope="module")
def confirmation_page(console: ConsoleServer) -> str:
    return propose_a_write(allowed_client(console), "LayoutCheck")


def submit_a_group(console: ConsoleServer, client: McpClient, decider: str = "live") -> None:
    """A client, allowed from the shell by `decider`, submits a change group: the project's draft waits for
    review."""
    client.call("session.request_access", {"project": SLUG})
    console.server.manage("access_requests", "allow", "--pending", "--as", decider)
    expected = {"project": SLUG, "expected_context_generation": client.call("session.status", {})["context_generation"]}
    revision = client.call("draft.status", {"project": SLUG})["working_revision"]
    begun = client.call(
        "change_group.begin",
        {**expected, "title": TITLE, "rationale": RATIONALE, "expected_working_revision": revision},
    )
    group = {**expected, "group_id": begun["group_id"]}
    staged = client.call(
        "change_group.stage", {**group, "operations": [ADD], "expected_working_revision": begun["working_revision"]}
    )
    client.call("change_group.submit", {**group, "expected_working_revision": staged["working_revision"]})


@pytest.fixture
def themed_page(browser: Browser, request) -> Iterator[Page]:
    (width, height), (_, scheme, toggle) = request.param
    context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
    context.set_default_timeout(WAIT_MS)
    # What the admin's theme toggle keeps (admin/js/theme.js reads it before the page is drawn).
    context.add_init_script(f"window.localStorage.setItem('theme', '{toggle}')")
    try:
        yield context.new_page()
    finally:
        context.close()


CASES = [
    pytest.param((viewport, theme), id=f"{viewport[0]}x{viewport[1]}-{theme[0]}")
    for viewport in VIEWPORTS
    for theme in THEMES
]


@pytest.mark.parametrize("themed_page", CASES, indirect=True)
def test_every_screen_loads_cleanly_fits_and_stays_readable(
    themed_page: Page, console: ConsoleServer, confirmation_page: str, request
):
    page = themed_page
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, console)
    problems: dict[str, list[str]] = {}

    for address in [*SCREENS, confirmation_page]:
        response = page.goto(f"{console.server.base}{address}")
        assert response is not None and response.status == 200, address
        page.wait_for_load_state("load")
        page.evaluate("document.querySelectorAll('details').forEach((details) => { details.open = true; })")
        found = [f"console: {error}" for error in errors]
        errors.clear()
        if page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth"):
            found.append(f"overflows: {page.evaluate('document.documentElement.scrollWidth')} px wide")
        found += [f"low contrast: {text}" for text in page.evaluate(LOW_CONTRAST, MIN_CONTRAST)]
        found += [f"no label: {field}" for field in page.evaluate(UNLABELLED)]
        if found:
            problems[address] = found
        if os.environ.get("FORGE_SCREENSHOTS"):
            name = f"layout-{request.node.callspec.id}{address.replace('/', '-').rstrip('-')}.png"
            page.screenshot(path=screenshot_path(name, request.node.path.parent), full_page=True)

    assert problems == {}


@pytest.mark.parametrize("themed_page", CASES[:2], indirect=True)
def test_the_keyboard_reaches_the_switch_button_its_focus_shows_and_a_live_swap_keeps_it(
    themed_page: Page, console: ConsoleServer
):
    page = themed_page
    log_in(page, console)
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")
    button = page.locator("#mcp-switch button")
    for _ in range(TABS):
        page.keyboard.press("Tab")
        if button.evaluate("(element) => element === document.activeElement"):
            break
    else:
        pytest.fail(f"{TABS} presses of Tab never reached the switch button")
    assert button.evaluate(OUTLINE) == "solid 2px"

    page.evaluate("document.querySelector('#forge-dashboard').dataset.before = 'swap'")
    McpClient(console, console.server.token).call("session.status", {})  # a new session: the dashboard changes
    expect(page.locator("#forge-dashboard")).not_to_have_attribute("data-before", "swap")

    assert page.locator("#mcp-switch button").evaluate("(element) => element === document.activeElement")


TABS = 80
"""Presses of Tab allowed to reach a control (the header's links, the dashboard's, then the control)."""
OUTLINE = "(element) => `${getComputedStyle(element).outlineStyle} ${getComputedStyle(element).outlineWidth}`"
