"""Every screen of the console, visited in chromium at 1366x768 and 1920x1080, in the admin's light theme and
in its dark theme picked with the theme toggle: each loads with status 200, logs no console error and throws no
page error, and neither the page nor any list's table runs wider than the window. The open dashboard's counts
also fall within 2 s of a decision taken elsewhere (test_dashboard_live sees them rise).

The screens are found, not listed by hand: the console site's registry gives every app's page, every list and
the page of one row of each model (the deployment holds a real row of each, made by the apps' own action
functions: MCP calls, the shell commands and the services a console button calls), those of the operators'
apps seen as the operator, the others (users, groups, login records, the caretaker's records) as a superuser;
beside them the purpose-built pages (the login page, the dashboard, working drafts and a draft's review, the
confirmation page, the pages that ask before a destructive decision, the token forms and the page that shows
a new token once, the project import, the caretaker's screens). One live server and one browser serve the
module, one browser context per size, theme and user.

With FORGE_SCREENSHOTS set (FORGE_SCREENSHOTS=docs/images), each screen's picture at 1366x768 in the light
theme is kept as screen-<name>.png, and a few in the dark theme as screen-<name>-dark.png: what the window
shows, not the whole page, so the operator's guide (docs/CONSOLE.md) stays light to load."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib import admin

from console.operators import OPERATOR_APPS
from console.site import FOLDED_INTO_DASHBOARD
from tests.browser.conftest import CLIENT_LABEL, CLIENT_OWNER, OPERATOR, WAIT_MS, ConsoleServer, screenshot_path
from tests.browser.test_access_requests import McpClient
from tests.browser.test_dashboard import log_in
from tests.browser.test_drafts import SLUG
from tests.browser.test_layout import allowed_client, console, propose_a_write
from tests.live import LiveServer

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Response

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

__all__ = ["console"]  # test_layout's override deployment (MCP on, a project, a draft waiting, a request), a fixture

LIVE_MS = 2_000
"""How soon an open dashboard must show a change (issue 17)."""
SIZES = [(1366, 768), (1920, 1080)]
THEMES = ["light", "dark"]
"""What the admin's theme toggle holds (admin/js/theme.js keeps it in localStorage)."""
NO_PICTURE = {
    "mcp-api-moved",
    "record-confirmations-pendingconfirmation",
    "client-token-revoke",
    "operator-token-revoke",
    "runtime-token-revoke",
    *(f"app-{label}" for label in ("audit", "confirmations", "console", "projects")),
}
"""Screens that show what another screen's picture shows already (the confirmation page, the page that asks
before denying an access request, the access app's page)."""
SHOWN_DARK = {"dashboard", "draft-review", "pending-confirmation"}
"""The screens whose dark picture is kept beside the light one."""
PEER_ACTIVE, PEER_REVOKED, PEER_ENROLLING = "carol@team", "alice@team", "bob@team"

# A team CA run from the console's side of the services (what the caretaker screen's buttons call), with a
# peer issued, one issued and then revoked, and one waiting with its one-time code; then a direct write
# approved as the confirmation page's button approves it, so a contract exists.
ROWS = """
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.contrib.auth.models import User
from caretaker import services
from caretaker.activation import do_activate
from caretaker.models import ACCEPTANCE_SENTENCE
from confirmations.models import PendingConfirmation
from confirmations.services import do_approve_confirmation

operator = User.objects.get(username=OPERATOR)
do_activate(operator, ACCEPTANCE_SENTENCE)
services.do_create_ca("ed25519", actor=OPERATOR)

def issued(name):
    services.do_create_peer(name, role="author", endpoint="https://" + name.split("@")[0] + "-ws.factory:7531", actor=OPERATOR)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)]))
        .sign(ed25519.Ed25519PrivateKey.generate(), None)
    ).public_bytes(serialization.Encoding.PEM).decode()
    proposal = services.propose_issuance(csr, peer_name=name, requested_by=OPERATOR)
    services.carry_out_now(proposal, user=operator, typed_id=proposal.key_memorable_id)

issued(ACTIVE)
issued(REVOKED)
revocation = services.propose_revocation(REVOKED, "laptop lost", requested_by=OPERATOR)
services.carry_out_now(revocation, user=operator, typed_id=revocation.key_memorable_id)
services.do_create_peer(ENROLLING, role="reviewer", actor=OPERATOR)
services.do_mint_code(ENROLLING, actor=OPERATOR)

approved = PendingConfirmation.objects.get(pk=APPROVED)
do_approve_confirmation(approved.pk, acting_user=operator, typed_id=approved.memorable_id)
"""


@dataclass(frozen=True)
class Screen:
    """A screen by its name (the test's id and the picture's file name) and how to reach it: an address
    ({pending}: the pending confirmation's id), or the steps an operator takes there from another screen."""

    name: str
    address: str = ""
    steps: Callable[[Page, str], Response | None] | None = None


def registered(*, operators: bool) -> list[str]:
    """app_label.model_name of every model on the console site, without those folded into the dashboard: those
    an operator works with (the apps whose permissions the operators group holds), or the others, which only
    an administrator (a superuser) sees."""
    return sorted(
        f"{model._meta.app_label}.{model._meta.model_name}"
        for model in admin.site._registry
        if (model._meta.app_label in OPERATOR_APPS) == operators
        and (model._meta.app_label, model._meta.model_name) not in FOLDED_INTO_DASHBOARD
    )


def list_address(name: str) -> str:
    return "/console/{}/{}/".format(*name.split("."))


def followed(list_address: str, link: str) -> Callable[[Page, str], Response | None]:
    """Open a list and follow its first row's link that matches the `link` selector."""

    def steps(page: Page, base: str) -> Response | None:
        page.goto(f"{base}{list_address}")
        found = page.locator(f"#result_list tbody tr {link}")
        if not found.count():
            pytest.fail(f"{list_address} shows no row with {link}: make one in this module's deployment")
        return page.goto(f"{base}{found.first.get_attribute('href')}")

    return steps


def create_client_token(page: Page, base: str) -> Response | None:
    """The client token form, filled and sent: the page that shows the new token once, with configurations."""
    page.goto(f"{base}/console/access/clienttoken/add/")
    page.get_by_label("Label").fill("cursor-on-the-laptop")
    page.get_by_label("Owner principal").fill("live")  # prepare()'s client owner
    with page.expect_navigation() as navigation:
        page.get_by_role("button", name="Create token").click()
    expect(page.locator("#raw-token")).to_be_visible()
    return navigation.value


REVOKE = 'a[href*="/revoke/?"]'
PURPOSE_BUILT = [
    Screen("dashboard", "/console/"),
    Screen("mcp-api-moved", "/console/mcp_api/"),
    Screen("drafts", "/console/drafts/"),
    Screen("draft-review", f"/console/drafts/{SLUG}/"),
    Screen("pending-confirmation", "/console/confirmations/{pending}/"),
    Screen(
        "access-request-deny",
        steps=followed("/console/access/accessrequest/?state__exact=pending", 'a[href*="/deny/?"]'),
    ),
    Screen("client-token-add", "/console/access/clienttoken/add/"),
    Screen("client-token-created", steps=create_client_token),
    Screen("client-token-revoke", steps=followed("/console/access/clienttoken/", REVOKE)),
    Screen("runtime-token-add", "/console/access/runtimetoken/add/"),
    Screen("runtime-token-revoke", steps=followed("/console/access/runtimetoken/", REVOKE)),
    Screen("operator-token-add", "/console/console/operatortoken/add/"),
    Screen("operator-token-revoke", steps=followed("/console/console/operatortoken/", REVOKE)),
    Screen("project-import", "/console/projects/project/import/"),
    Screen("project-bind", "/console/projects/project/bind/"),
    Screen("caretaker", "/console/caretaker/"),
    Screen("caretaker-issue", f"/console/caretaker/peers/{PEER_ENROLLING}/issue/"),
]


def model_screens(models: list[str], prefix: str = "") -> list[Screen]:
    """Each app's page (but the caretaker's: /console/caretaker/ is the caretaker's screen), each model's list
    and the page of its first row (of a model that can hold one here)."""
    apps = sorted({name.split(".")[0] for name in models} - {"caretaker"})
    return [
        *(Screen(f"{prefix}app-{label}", f"/console/{label}/") for label in apps),
        *(Screen(f"{prefix}list-{name.replace('.', '-')}", list_address(name)) for name in models),
        *(
            Screen(f"{prefix}record-{name.replace('.', '-')}", steps=followed(list_address(name), CHANGE))
            for name in models
            if name not in EMPTY_HERE
        ),
    ]


EMPTY_HERE = {
    "axes.accesslog": "AXES_DISABLE_ACCESS_LOG: logins are recorded in the audit log instead",
    "axes.accessfailurelog": "AXES_ENABLE_ACCESS_FAILURE_LOG is off: failures are recorded in the audit log",
    "axes.accessattempt": "AXES_RESET_ON_SUCCESS: every view's login from this address clears the attempts",
}
"""Models whose lists are empty when this module looks (the settings), so no row's page is seen."""


CHANGE = 'a[href$="/change/"]'
SCREENS = [*PURPOSE_BUILT, *model_screens(registered(operators=True))]
ADMINISTRATORS_SCREENS = model_screens(registered(operators=False), prefix="admin-")


@dataclass(frozen=True)
class Deployment:
    console: ConsoleServer
    administrator: ConsoleServer
    """The same server, signed in to as a superuser."""
    pending: str
    """The id of a direct write waiting for a decision."""


@pytest.fixture(scope="module")
def deployment(console: ConsoleServer) -> Deployment:
    """test_layout's deployment, with a row of every model the console's screens show: a pending confirmation
    and an approved one (its contract), an operator token, a runtime token, a client principal, a checkpoint of
    the log, a request waiting, a caretaker with a team CA and peers, and an administrator."""
    server = console.server
    administrator = ConsoleServer(server=server, operator=ADMINISTRATOR, password=f"{ADMINISTRATOR}-password-123")
    server.manage("shell", "-c", SUPERUSER.format(name=administrator.operator, password=administrator.password))
    pending = propose_a_write(allowed_client(console), "EveryScreen").strip("/").rsplit("/", 1)[-1]
    approved = propose_a_write(allowed_client(console), "EveryScreenApproved").strip("/").rsplit("/", 1)[-1]
    server.manage("create_operator_token", OPERATOR, "--label", "deploy-script")
    server.manage("create_token", "--user", CLIENT_OWNER, "--create-user", "--label", CLIENT_LABEL)  # a principal
    server.manage("runtime_token", "create", SLUG, "--operator", OPERATOR, "--label", "line-3-plc")
    server.manage("audit_checkpoint")
    names = {
        "OPERATOR": OPERATOR,
        "APPROVED": approved,
        "ACTIVE": PEER_ACTIVE,
        "REVOKED": PEER_REVOKED,
        "ENROLLING": PEER_ENROLLING,
    }
    server.manage("shell", "-c", "".join(f"{key} = {value!r}\n" for key, value in names.items()) + ROWS)
    McpClient(console, server.token).call("project.overview", {"project": SLUG})  # a request left pending
    return Deployment(console=console, administrator=administrator, pending=pending)


ADMINISTRATOR = "ada"
SUPERUSER = (
    "from django.contrib.auth.models import User; User.objects.create_superuser('{name}', password='{password}')"
)


def pending_requests(server: LiveServer) -> list[str]:
    """The ids of the access requests waiting for a decision, as `access_requests list` shows them."""
    rows = [line.split() for line in server.manage("access_requests", "list").splitlines()]
    return [row[0] for row in rows if row[1:2] == ["pending"]]


@dataclass
class View:
    """One browser context of a size and theme, logged in, and the errors its page reported since the last
    look."""

    name: str
    context: BrowserContext
    page: Page
    errors: list[str]


def new_context(browser: Browser, width: int, height: int, theme: str) -> BrowserContext:
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(WAIT_MS)
    context.add_init_script(f"window.localStorage.setItem('theme', '{theme}')")
    return context


def watched(context: BrowserContext) -> tuple[Page, list[str]]:
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return page, errors


def signed_in(request, browser: Browser, who: ConsoleServer) -> Iterator[View]:
    (width, height), theme = request.param
    context = new_context(browser, width, height, theme)
    try:
        page, errors = watched(context)
        log_in(page, who)
        yield View(f"{width}x{height}-{theme}", context, page, errors)
    finally:
        context.close()


@pytest.fixture(scope="module")
def view(request, browser: Browser, deployment: Deployment) -> Iterator[View]:
    """A browser context of one size and theme (the parameter), signed in as the operator."""
    yield from signed_in(request, browser, deployment.console)


@pytest.fixture(scope="module")
def administrators_view(request, browser: Browser, deployment: Deployment) -> Iterator[View]:
    """A browser context of one size and theme (the parameter), signed in as a superuser."""
    yield from signed_in(request, browser, deployment.administrator)


VIEWS = [
    pytest.param(((width, height), theme), id=f"{width}x{height}-{theme}")
    for width, height in SIZES
    for theme in THEMES
]

# How far the document, and the box around each list's table, reach past what they show (0: nothing cut off).
OVERFLOW = """() => {
  const root = document.documentElement;
  const found = [];
  if (root.scrollWidth > root.clientWidth) found.push(`the page is ${root.scrollWidth} px wide in ${root.clientWidth}`);
  for (const table of document.querySelectorAll('#result_list, #content-main table')) {
    const box = table.closest('.results') || table.parentElement;
    if (box.scrollWidth > box.clientWidth + 1) {
      found.push(`the table in ${box.tagName.toLowerCase()}${box.id ? '#' + box.id : ''}.${box.className} is ${box.scrollWidth} px wide in ${box.clientWidth}`);
    }
  }
  return found;
}"""


def shown(view: View, deployment: Deployment, screen: Screen) -> list[str]:
    """Open the screen; what is wrong with it (nothing: an empty list)."""
    page = view.page
    view.errors.clear()
    base = deployment.console.server.base
    if screen.steps is not None:
        response = screen.steps(page, base)
    else:
        response = page.goto(f"{base}{screen.address.format(pending=deployment.pending)}")
    page.wait_for_load_state("load")
    status = [] if response is not None and response.status == 200 else [f"status {response and response.status}"]
    return [*status, *(f"console: {error}" for error in view.errors), *page.evaluate(OVERFLOW)]


def keep_picture(page: Page, view: str, screen: str, folder: Path) -> None:
    """With FORGE_SCREENSHOTS set: the window's picture at 1366x768, light, and of a few screens dark."""
    if not os.environ.get("FORGE_SCREENSHOTS"):
        return
    if view == "1366x768-light" and screen not in NO_PICTURE:
        page.screenshot(path=screenshot_path(f"screen-{screen}.png", folder))
    elif view == "1366x768-dark" and screen in SHOWN_DARK:
        page.screenshot(path=screenshot_path(f"screen-{screen}-dark.png", folder))


@pytest.mark.parametrize("view", VIEWS, indirect=True)
@pytest.mark.parametrize("screen", SCREENS, ids=[screen.name for screen in SCREENS])
def test_the_screen_loads_without_errors_and_fits_the_window(
    view: View, screen: Screen, deployment: Deployment, tmp_path: Path
):
    problems = shown(view, deployment, screen)
    keep_picture(view.page, view.name, screen.name, tmp_path)

    assert problems == []


@pytest.mark.parametrize("administrators_view", VIEWS, indirect=True)
@pytest.mark.parametrize("screen", ADMINISTRATORS_SCREENS, ids=[screen.name for screen in ADMINISTRATORS_SCREENS])
def test_an_administrators_screen_loads_without_errors_and_fits_the_window(
    administrators_view: View, screen: Screen, deployment: Deployment
):
    assert shown(administrators_view, deployment, screen) == []


@pytest.mark.parametrize(
    ("width", "height", "theme"),
    [pytest.param(width, height, theme, id=f"{width}x{height}-{theme}") for width, height in SIZES for theme in THEMES],
)
def test_the_login_page_loads_without_errors_and_fits_the_window(
    width: int, height: int, theme: str, browser: Browser, deployment: Deployment, tmp_path: Path
):
    context = new_context(browser, width, height, theme)
    try:
        page, errors = watched(context)
        response = page.goto(f"{deployment.console.server.base}/console/login/")
        expect(page.get_by_role("button", name="Log in")).to_be_visible()
        problems = [*errors, *page.evaluate(OVERFLOW)]
        keep_picture(page, f"{width}x{height}-{theme}", "login", tmp_path)
    finally:
        context.close()

    assert response is not None and response.status == 200
    assert problems == []


def reloaded(page: Page, count: str) -> int:
    """Reload the dashboard, wait for its live feed to connect, and read one of its counts."""
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-forge-live", "open")
    return int(page.locator(f"#{count}").inner_text())


def test_an_access_request_allowed_from_a_shell_leaves_the_count_of_an_open_dashboard_within_2_s(
    view_dashboard: Page, deployment: Deployment
):
    page, server = view_dashboard, deployment.console.server
    waiting = set(pending_requests(server))
    McpClient(deployment.console, server.token).call("session.request_access", {"project": SLUG})
    (asked,) = set(pending_requests(server)) - waiting
    before = reloaded(page, "pending-request-count")

    server.manage("access_requests", "allow", asked, "--as", OPERATOR)

    expect(page.locator("#pending-request-count")).to_have_text(str(before - 1), timeout=LIVE_MS)


def test_a_write_denied_from_a_shell_leaves_the_count_of_an_open_dashboard_within_2_s(
    view_dashboard: Page, deployment: Deployment
):
    page, server = view_dashboard, deployment.console.server
    pending = propose_a_write(allowed_client(deployment.console), "CountedLive").strip("/").rsplit("/", 1)[-1]
    before = reloaded(page, "pending-confirmation-count")

    server.manage("shell", "-c", DENY.format(pending=pending, operator=OPERATOR))

    expect(page.locator("#pending-confirmation-count")).to_have_text(str(before - 1), timeout=LIVE_MS)


# The confirmation page's Deny button, from a shell: the same action function.
DENY = (
    "from django.contrib.auth.models import User; from confirmations.services import do_deny_confirmation; "
    "do_deny_confirmation('{pending}', acting_user=User.objects.get(username='{operator}'), reason='not today')"
)


@pytest.fixture
def view_dashboard(browser: Browser, deployment: Deployment) -> Iterator[Page]:
    """A dashboard open at 1366x768."""
    context = new_context(browser, 1366, 768, "light")
    try:
        page, _ = watched(context)
        log_in(page, deployment.console)
        yield page
    finally:
        context.close()
