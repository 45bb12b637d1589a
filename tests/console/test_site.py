"""The console's dashboard (/console/): the MCP switch and its button, client configurations with a token
placeholder, the open sessions with their counts, and the admin's app list still below."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.messages import constants
from django.db import DatabaseError, connection
from django.http import HttpRequest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from access.hotpath import mcp_enabled
from access.models import Transport
from access.services import do_end_session, do_open_session, do_switch_mcp
from audit.models import AuditEvent, EventKind
from console import site
from forge_core.instances import read_token_file

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:index"
SWITCH = "admin:mcp_switch"


@pytest.fixture
def operator_client(client, cast) -> Client:
    # A password login goes through django-axes' backend, which needs the request the login comes with.
    assert client.login(request=HttpRequest(), username="olivia", password="olivia-password-123")
    return client


@pytest.fixture
def staff_client(client, cast) -> Client:
    """A staff user who is not in the operators group: may open the console, may not turn the switch."""
    get_user_model().objects.create_user(username="sam", password="sam-password-123", is_staff=True)
    assert client.login(request=HttpRequest(), username="sam", password="sam-password-123")
    return client


def messages_of(response) -> list[tuple[int, str]]:
    return [(message.level, message.message) for message in response.context["messages"]]


def switch_events() -> list[tuple[str, str]]:
    return [(event.outcome, event.called_by) for event in AuditEvent.objects.filter(kind=EventKind.MCP_SWITCHED)]


def open_session_of(
    member, *, client_name: str = "", revision: str = "2025-06-18", transport=Transport.STREAMABLE_HTTP
):
    return do_open_session(
        member.token,
        transport=transport,
        protocol_version=revision,
        client_info={"name": client_name, "version": "1.2"} if client_name else {},
        initialized=True,
    )


# --- the switch ------------------------------------------------------------------------------------


def test_the_dashboard_shows_mcp_off_on_a_fresh_install_with_a_button_to_switch_it_on(operator_client):
    response = operator_client.get(reverse(DASHBOARD))

    assert response.status_code == 200
    assert response.context["dashboard"].switch.enabled is False
    assert "MCP is <strong>off</strong>" in response.content.decode()
    assert 'name="position" value="on"' in response.content.decode()


def test_switching_on_from_the_dashboard_turns_mcp_on_audits_it_and_says_so(operator_client):
    response = operator_client.post(reverse(SWITCH), {"position": "on"}, follow=True)

    assert response.redirect_chain == [(reverse(DASHBOARD), 302)]
    assert mcp_enabled() is True
    assert switch_events() == [("on", "olivia")]
    assert messages_of(response) == [
        (constants.SUCCESS, "MCP switched on: clients can use the tools their tokens and grants allow.")
    ]
    assert "MCP is <strong>on</strong>" in response.content.decode()
    assert 'name="position" value="off"' in response.content.decode()


def test_switching_off_from_the_dashboard_turns_mcp_off(operator_client):
    do_switch_mcp(True, acting_user="tests")

    response = operator_client.post(reverse(SWITCH), {"position": "off"}, follow=True)

    assert mcp_enabled() is False
    assert switch_events() == [("on", "tests"), ("off", "olivia")]
    assert messages_of(response) == [
        (constants.SUCCESS, "MCP switched off: every client's access ends; open streams are told.")
    ]
    assert response.context["dashboard"].switch.changed_by == "olivia"


def test_switching_to_the_position_it_already_has_changes_nothing_and_says_so(operator_client):
    response = operator_client.post(reverse(SWITCH), {"position": "off"}, follow=True)

    assert mcp_enabled() is False
    assert switch_events() == []
    assert messages_of(response) == [(constants.INFO, "MCP was already off.")]


def test_a_position_other_than_on_or_off_changes_nothing_and_says_so(operator_client):
    response = operator_client.post(reverse(SWITCH), {"position": "yes"}, follow=True)

    assert mcp_enabled() is False
    assert switch_events() == []
    assert messages_of(response) == [(constants.ERROR, "The switch takes on or off; nothing changed.")]


def test_the_switch_answers_only_post(operator_client):
    assert operator_client.get(reverse(SWITCH)).status_code == 405


def test_a_switch_post_without_the_csrf_token_is_refused_and_changes_nothing(cast):
    client = Client(enforce_csrf_checks=True)
    assert client.login(request=HttpRequest(), username="olivia", password="olivia-password-123")

    response = client.post(reverse(SWITCH), {"position": "on"})

    assert response.status_code == 403
    assert mcp_enabled() is False


def test_an_anonymous_switch_post_is_sent_to_the_login_and_changes_nothing(client, cast):
    response = client.post(reverse(SWITCH), {"position": "on"})

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert mcp_enabled() is False


def test_staff_who_are_not_operators_see_the_state_but_no_button_and_cannot_switch(staff_client):
    page = staff_client.get(reverse(DASHBOARD)).content.decode()
    refused = staff_client.post(reverse(SWITCH), {"position": "on"})

    assert "MCP is <strong>off</strong>" in page
    assert 'name="position"' not in page
    assert 'id="open-sessions"' not in page  # nor the sessions, which their rights do not cover
    assert refused.status_code == 403
    assert mcp_enabled() is False


def test_when_the_audit_row_cannot_be_written_the_switch_stays_and_the_operator_is_told(operator_client):
    def refuse_audit_inserts(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT") and "audit_auditevent" in sql:
            raise DatabaseError("the audit table cannot be written (refused by the test)")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_audit_inserts):
        response = operator_client.post(reverse(SWITCH), {"position": "on"})

    assert mcp_enabled() is False
    assert response.status_code == 302
    page = operator_client.get(reverse(DASHBOARD))
    assert messages_of(page) == [
        (constants.ERROR, "MCP was not switched: the audit log could not be written (see the server log).")
    ]


# --- client configurations -------------------------------------------------------------------------


def test_the_configurations_carry_the_address_of_the_console_and_a_token_placeholder(operator_client, cast):
    response = operator_client.get(reverse(DASHBOARD), HTTP_HOST="localhost:8123")

    shown = {configuration.key: configuration.text for configuration in response.context["dashboard"].configurations}
    assert list(shown) == [
        "claude_desktop",
        "claude_desktop_stdio",
        "stdio_token_file",
        "claude_code",
        "cursor",
        "inspector",
    ]
    desktop = json.loads(shown["claude_desktop"])["mcpServers"]["forge"]
    assert desktop == {
        "command": "npx",
        "args": ["mcp-remote", "http://localhost:8123/mcp", "--header", "Authorization: Bearer <your token>"],
    }
    assert json.loads(shown["cursor"])["mcpServers"]["forge"]["url"] == "http://localhost:8123/mcp"
    assert shown["claude_code"] == (
        "claude mcp add --transport http forge http://localhost:8123/mcp --header 'Authorization: Bearer <your token>'"
    )
    assert "http://localhost:8123/mcp" in shown["inspector"]
    page = response.content.decode()
    assert "Bearer &lt;your token&gt;" in page
    assert cast.operator.raw_token not in page


def test_the_stdio_configuration_starts_this_checkouts_bridge_with_a_token_file_and_no_token(operator_client, cast):
    response = operator_client.get(reverse(DASHBOARD), HTTP_HOST="localhost:8123")

    shown = {configuration.key: configuration.text for configuration in response.context["dashboard"].configurations}
    bridge = json.loads(shown["claude_desktop_stdio"])["mcpServers"]["forge"]
    token_file = Path(settings.FORGE_SECRETS_DIR) / site.STDIO_TOKEN_FILE
    manage_py = Path(settings.BASE_DIR) / "manage.py"
    assert bridge == {
        "command": sys.executable,
        "args": [str(manage_py), "mcp_stdio", "--token-file", str(token_file)],
        "env": {"FORGE_DATA_DIR": str(settings.FORGE_DATA_DIR)},
    }
    assert manage_py.is_file() and Path(bridge["command"]).is_file()
    assert str(token_file) in shown["stdio_token_file"]
    for key in ("claude_desktop_stdio", "stdio_token_file"):
        assert "Bearer" not in shown[key] and site.TOKEN_PLACEHOLDER not in shown[key]
        assert cast.operator.raw_token not in shown[key]


@pytest.mark.parametrize("earlier_mode", [None, 0o644])
def test_the_token_file_command_stores_the_pasted_token_where_the_bridge_reads_it(tmp_path, earlier_mode):
    token_file = tmp_path / "new folder" / site.STDIO_TOKEN_FILE
    if earlier_mode is not None:
        token_file.parent.mkdir()
        token_file.write_text("an older token\n")
        token_file.chmod(earlier_mode)

    command = site.stdio_token_file_command(token_file)
    subprocess.run(["sh", "-c", command], input="fmcp_pasted\n", text=True, check=True, timeout=30)

    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert read_token_file(token_file) == "fmcp_pasted"


def test_the_token_files_folder_is_private_when_the_command_makes_it(tmp_path):
    token_file = tmp_path / "forge" / site.STDIO_TOKEN_FILE

    subprocess.run(["sh", "-c", site.stdio_token_file_command(token_file)], input="t\n", text=True, check=True)

    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700


# --- open sessions ---------------------------------------------------------------------------------


def test_the_sessions_table_lists_open_sessions_with_client_principal_revision_and_transport(operator_client, cast):
    open_session_of(cast.other_operator, client_name="claude-code", revision="2025-11-25")
    open_session_of(cast.caretaker, revision="2024-11-05", transport=Transport.SSE)

    response = operator_client.get(reverse(DASHBOARD))

    sessions = response.context["dashboard"].sessions
    assert sessions.total == 2
    assert sessions.by_transport == [("streamable-http", 1), ("sse", 1)]
    rows = [
        (s.token.label, s.client_name, s.token.owner.get_username(), s.protocol_version, s.transport)
        for s in sessions.shown
    ]
    assert rows == [
        ("carla-client", "", "carla", "2024-11-05", "sse"),
        ("oscar-client", "claude-code", "oscar", "2025-11-25", "streamable-http"),
    ]
    page = response.content.decode()
    assert "oscar-client <span" in page
    assert "(claude-code 1.2)" in page


def test_ended_sessions_are_not_listed_or_counted(operator_client, cast):
    ended = open_session_of(cast.other_operator)
    do_end_session(ended, reason="deleted by client")

    sessions = operator_client.get(reverse(DASHBOARD)).context["dashboard"].sessions

    assert (sessions.total, sessions.shown) == (0, [])


def test_past_the_shown_limit_the_newest_sessions_are_listed_with_a_link_to_all(operator_client, cast, monkeypatch):
    monkeypatch.setattr(site, "OPEN_SESSIONS_SHOWN", 2)
    opened = [open_session_of(cast.other_operator) for _ in range(3)]

    response = operator_client.get(reverse(DASHBOARD))

    sessions = response.context["dashboard"].sessions
    assert sessions.total == 3
    assert [s.pk for s in sessions.shown] == [opened[2].pk, opened[1].pk]
    assert f"{reverse('admin:access_mcpsession_changelist')}?ended_at__isnull=True" in response.content.decode()


def test_the_dashboard_makes_as_many_queries_for_many_sessions_as_for_one(operator_client, cast):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(reverse(DASHBOARD)).status_code == 200
        return len(captured)

    open_session_of(cast.other_operator)
    with_one = queries()
    for member in (cast.operator, cast.caretaker, cast.other_operator):
        open_session_of(member, transport=Transport.SSE)

    assert queries() == with_one


# --- the rest of the index ------------------------------------------------------------------------


def test_the_admin_app_list_stays_below_the_dashboard(operator_client):
    page = operator_client.get(reverse(DASHBOARD)).content.decode()

    assert page.index('id="forge-dashboard"') < page.index('class="app-access module')
    assert reverse("admin:access_clienttoken_changelist") in page


def test_the_dashboard_counts_the_access_requests_waiting_for_a_decision(operator_client, cast):
    from access.grants import raise_request
    from access.services import do_open_session
    from projects.models import Project

    project = Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)
    session = do_open_session(cast.caretaker.token, transport="streamable-http", protocol_version="2025-11-25")
    raise_request(cast.caretaker.token, session, project)

    response = operator_client.get(reverse(DASHBOARD))

    assert response.context["dashboard"].pending_requests == 1
    assert 'id="pending-request-count">1<' in response.content.decode()
