"""Console screens in a real browser: Debian's chromium, driven by Playwright, against a live server.

Browsers cannot be downloaded here, so Playwright never installs one (`playwright install` is never
run): it launches the chromium that Debian's package puts at /usr/bin/chromium, which
`python3 forge.py test` installs when it is missing (as root, with apt-get). Without it, or without the
`playwright` package, these tests skip and say why.

Each test gets a live server of its own (a fresh data dir: MCP off, one console operator, one client
token) and a fresh browser context; the browser itself is started once per module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.live import LiveServer, manage, run_server, scratch_database, server_env

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
WAIT_MS = 10_000
"""The bound on every wait for the page (Playwright's default is 30 s): generous, short for a hang."""


def screenshot_path(name: str, tmp_path: Path) -> Path:
    """Where a test's screenshot goes: the test's own folder, or FORGE_SCREENSHOTS (e.g. docs/images) when
    set, to refresh the documentation's pictures on purpose rather than on every run."""
    folder = Path(os.environ["FORGE_SCREENSHOTS"]) if os.environ.get("FORGE_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


OPERATOR = "olivia"
CLIENT_OWNER = "dana"
CLIENT_LABEL = "claude-desktop"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"no chromium at {CHROMIUM}: `python3 forge.py test` installs Debian's chromium package when it "
            "runs as root on a machine with apt-get (or: apt-get install --no-install-recommends chromium)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright package is missing: install the dev extra (forge.py test does)"
    )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS)
        yield browser
        browser.close()


def csp_violations(page: Page) -> list[str]:
    """The Content-Security-Policy violations chromium reports in the page's console, from now on."""
    seen: list[str] = []
    page.on("console", lambda message: seen.append(message.text) if "Content Security Policy" in message.text else None)
    return seen


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    try:
        page = context.new_page()
        # Every console page is served with a Content-Security-Policy (console/csp.py): whatever a test
        # does, nothing on the pages it opened may have been refused by it.
        violations = csp_violations(page)
        yield page
        assert violations == []
    finally:
        context.close()


@dataclass(frozen=True)
class ConsoleServer:
    """A live server with one console operator; `server.token` is a client token of CLIENT_OWNER."""

    server: LiveServer
    operator: str
    password: str

    @property
    def console_url(self) -> str:
        return f"{self.server.base}/console/"


@pytest.fixture
def console_server(tmp_path_factory) -> Iterator[ConsoleServer]:
    data_dir = tmp_path_factory.mktemp("console")
    password = f"{OPERATOR}-password-123"
    password_file = data_dir / "operator-password"
    password_file.write_text(password + "\n")
    with scratch_database() as database:
        env = server_env(data_dir, **database)
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "create_operator", OPERATOR, "--password-file", str(password_file))
        created = manage(env, "create_token", "--user", CLIENT_OWNER, "--create-user", "--label", CLIENT_LABEL)
        token = created.strip().splitlines()[-1]
        with run_server(env, token, data_dir) as server:
            yield ConsoleServer(server=server, operator=OPERATOR, password=password)
