"""The server state folded into the dashboard: its switch panel shows the one row (position, who turned it,
when, and a link to every turn in the audit log); the menus no longer list a "Server states" screen, its
address lands on the panel, and the old screen's switch actions still work and audit."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest

from access.hotpath import mcp_enabled
from access.services import do_switch_mcp
from audit.models import AuditEvent, EventKind
from tests.console.test_site import operator_client

pytestmark = pytest.mark.django_db
__all__ = ["operator_client"]  # the logged-in operator's browser, a fixture

HISTORY = "/console/audit/auditevent/?kind=mcp_switched"


def test_the_switch_panel_says_who_turned_it_and_links_every_turn_in_the_audit_log(operator_client):
    do_switch_mcp(True, acting_user="olivia")

    page = operator_client.get("/console/").content.decode()

    assert "Turned on by olivia" in page
    assert f'href="{HISTORY}" id="switch-history"' in page


def test_a_switch_never_turned_says_so(operator_client):
    page = operator_client.get("/console/").content.decode()

    assert "Never turned since this server was installed" in page


def test_staff_who_may_not_read_the_audit_log_get_no_link_to_it(client, cast):
    get_user_model().objects.create_user(username="sam", password="sam-password-123", is_staff=True)
    assert client.login(request=HttpRequest(), username="sam", password="sam-password-123")
    do_switch_mcp(True, acting_user="olivia")

    page = client.get("/console/").content.decode()

    assert "Turned on by olivia" in page and "switch-history" not in page


def test_no_menu_lists_server_states_any_more(operator_client):
    dashboard = operator_client.get("/console/")
    access = operator_client.get("/console/access/")
    tokens = operator_client.get("/console/access/clienttoken/")  # the side menu

    for page in (dashboard, access, tokens):
        assert "/console/access/serverstate/" not in page.content.decode()
    assert "/console/access/clienttoken/" in access.content.decode()


@pytest.mark.parametrize("address", ["/console/access/serverstate/", "/console/access/serverstate/1/change/"])
def test_the_server_state_screens_land_on_the_dashboards_switch_panel(operator_client, address):
    response = operator_client.get(address)

    assert response.status_code == 302
    assert response["Location"] == "/console/#mcp-switch"


def test_the_old_screens_switch_action_still_switches_audits_and_says_so_on_the_dashboard(operator_client):
    response = operator_client.post(
        "/console/access/serverstate/", {"action": "switch_on", "_selected_action": ["1"]}, follow=True
    )

    assert response.redirect_chain[-1] == ("/console/#mcp-switch", 302)
    assert mcp_enabled() is True
    assert "MCP switched on." in response.content.decode()
    assert AuditEvent.objects.filter(kind=EventKind.MCP_SWITCHED, called_by="olivia").count() == 1


def test_the_server_state_screens_still_ask_an_anonymous_visitor_to_log_in(client, cast):
    response = client.get("/console/access/serverstate/")

    assert response.status_code == 302
    assert response["Location"].startswith("/console/login/")
