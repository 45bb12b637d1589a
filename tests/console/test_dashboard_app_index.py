"""The admin's app index pages (/console/<app>/, reached from the dashboard's section headers and the
breadcrumbs) show their app's screens and no dashboard panel: they once reused the dashboard's template
without its data and said "MCP is off" while it was on."""

from __future__ import annotations

import pytest

from access.services import do_switch_mcp
from tests.console.test_site import operator_client

pytestmark = pytest.mark.django_db
__all__ = ["operator_client"]  # the logged-in operator's browser, a fixture

# (the address, the address it ends at, a screen its page lists)
APP_INDEX_PAGES = [
    ("/console/audit/", "/console/audit/", "/console/audit/auditevent/"),
    ("/console/mcp_api/", "/console/access/", "/console/access/accessrequest/"),
    ("/console/confirmations/", "/console/confirmations/", "/console/confirmations/pendingconfirmation/"),
    ("/console/projects/", "/console/projects/", "/console/projects/project/"),
    ("/console/access/", "/console/access/", "/console/access/clienttoken/"),
]


@pytest.mark.parametrize(("address", "ends_at", "lists"), APP_INDEX_PAGES)
def test_an_app_index_page_with_mcp_on_lists_its_screens_and_shows_no_switch_panel(
    operator_client, address, ends_at, lists
):
    do_switch_mcp(True, acting_user="olivia")

    response = operator_client.get(address, follow=True)

    assert response.status_code == 200
    assert response.request["PATH_INFO"] == ends_at
    page = response.content.decode()
    assert f'href="{lists}"' in page
    assert "MCP is" not in page and 'id="mcp-switch"' not in page


@pytest.mark.parametrize(("address", "ends_at", "lists"), APP_INDEX_PAGES)
def test_an_app_index_page_with_mcp_off_does_not_claim_a_switch_position_either(
    operator_client, address, ends_at, lists
):
    response = operator_client.get(address, follow=True)

    assert response.status_code == 200
    assert "MCP is" not in response.content.decode()


def test_the_dashboard_itself_says_mcp_is_on_when_it_is(operator_client):
    do_switch_mcp(True, acting_user="olivia")

    page = operator_client.get("/console/").content.decode()

    assert "MCP is <strong>on</strong>" in page
