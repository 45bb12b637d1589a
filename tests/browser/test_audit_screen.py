"""The audit screen in chromium at 1366x768 (and 1920x1080, dark), in Vienna's time zone: no column runs past
the window, times are shown in the browser's zone with its offset, a filter narrows the list, and an export downloads the filtered
range (streamed by the live server) and shows up in the log."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import OPERATOR, WAIT_MS, ConsoleServer, csp_violations, screenshot_path
from tests.browser.test_dashboard import log_in, open_client_session

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

expect = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing").expect

pytestmark = pytest.mark.live

AUDIT = "/console/audit/auditevent/"
LONG_CLIENT = "a-client-label-far-longer-than-any-column-would-hold-without-wrapping-0123456789"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page of a laptop's screen in Vienna, failing the test on a policy violation or a script error."""
    context = browser.new_context(viewport={"width": 1366, "height": 768}, timezone_id="Europe/Vienna")
    context.set_default_timeout(WAIT_MS)
    try:
        page = context.new_page()
        violations = csp_violations(page)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        yield page
        assert violations == []
        assert errors == []
    finally:
        context.close()


def open_audit(page: Page, console: ConsoleServer, query: str = "") -> None:
    page.goto(f"{console.server.base}{AUDIT}{query}")
    expect(page.locator("#audit-state")).to_be_visible()


def overflow(page: Page) -> dict[str, int]:
    """How far the page and the list reach past what they show, in pixels (0: nothing cut off)."""
    return page.evaluate(
        """() => {
            const list = document.querySelector('#result_list');
            const box = list.closest('.results') || list.parentElement;
            const right = Math.max(...[...list.querySelectorAll('th, td')].map((cell) => cell.getBoundingClientRect().right));
            return {
                page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                list: box.scrollWidth - box.clientWidth,
                cells: Math.max(0, Math.ceil(right - document.documentElement.clientWidth)),
            };
        }"""
    )


@pytest.mark.parametrize(
    ("width", "height", "scheme"), [(1366, 768, "light"), (1920, 1080, "dark")], ids=["1366x768", "1920x1080-dark"]
)
def test_the_audit_list_fits_the_window_with_times_in_the_browsers_zone(
    page: Page, console_server: ConsoleServer, tmp_path: Path, width: int, height: int, scheme: str
):
    page.set_viewport_size({"width": width, "height": height})
    page.emulate_media(color_scheme=scheme)
    console_server.server.manage("create_token", "--user", "reviewer", "--create-user", "--label", LONG_CLIENT)
    open_client_session(console_server, "audit-screen-test")
    log_in(page, console_server)

    open_audit(page, console_server)

    expect(page.locator("#result_list tbody tr").first).to_be_visible()
    first_time = page.locator("#result_list td.field-when time").first
    expect(first_time).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+01:00$"))
    expect(page.locator("#audit-state")).to_contain_text("Verification: nothing wrong found")
    assert overflow(page) == {"page": 0, "list": 0, "cells": 0}
    page.screenshot(path=screenshot_path(f"audit-{width}x{height}-{scheme}.png", tmp_path), full_page=True)


def test_filtering_by_kind_shows_only_events_of_that_kind(page: Page, console_server: ConsoleServer):
    open_client_session(console_server, "audit-screen-test")
    log_in(page, console_server)
    open_audit(page, console_server)

    page.get_by_label("Kind").select_option("console_login")
    page.get_by_role("button", name="Filter").click()

    expect(page).to_have_url(re.compile(r"kind=console_login"))
    kinds = page.locator("#result_list td.field-event_kind")
    expect(kinds.first).to_have_text("console_login")
    assert set(kinds.all_inner_texts()) == {"console_login"}
    expect(page.locator("#audit-export")).to_contain_text("Export the 1 filtered event")
    assert overflow(page) == {"page": 0, "list": 0, "cells": 0}


def test_an_export_of_the_filtered_range_downloads_its_lines_and_is_recorded(page: Page, console_server: ConsoleServer):
    log_in(page, console_server)
    open_audit(page, console_server, "?kind=console_login")

    with page.expect_download() as started:
        page.get_by_role("button", name="JSONL").click()
    download = started.value
    lines = Path(download.path()).read_text().splitlines()

    assert re.fullmatch(r"forge-audit-through-\d+\.jsonl", download.suggested_filename)
    assert [json.loads(line)["kind"] for line in lines] == ["console_login"]
    assert json.loads(lines[0])["called_by"] == OPERATOR
    open_audit(page, console_server)
    newest = page.locator("#result_list tbody tr").first
    expect(newest.locator("td.field-event_kind")).to_have_text("audit_exported")
    expect(newest.locator("td.field-principal")).to_have_text(OPERATOR)


def test_an_events_page_shows_its_arguments_laid_out_and_copies_its_whole_mac(
    page: Page, console_server: ConsoleServer, tmp_path: Path
):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(page, console_server)
    open_audit(page, console_server, "?kind=operator_created")

    page.locator("#result_list tbody tr").first.locator("th a, td a").first.click()

    expect(page.locator("pre.forge-json")).to_contain_text(f'"name": "{OPERATOR}"')
    mac = page.locator(".field-event_mac code")
    whole = mac.get_attribute("title")
    expect(mac).to_have_text(f"{whole[:8]}…{whole[-4:]}")
    page.locator(".field-event_mac button.copy").click()
    expect(page.locator(".field-event_mac button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == whole
    page.screenshot(path=screenshot_path("audit-event.png", tmp_path), full_page=True)
