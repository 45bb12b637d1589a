"""Runtime connector tokens in the console: listed with their project, made on a form for a project the
operator may grant access to and shown once with a curl that posts a snapshot, revoked from a row, a page or
in bulk after a question. Every change goes through access.runtime's action functions and is audited,
refusals included."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.contrib.auth.models import Group, Permission
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from access.models import RuntimeToken
from access.runtime import do_create_runtime_token
from audit.models import AuditEvent, EventKind
from forge_core.console import OPERATORS_GROUP
from forge_core.tokens import token_digest
from projects.models import Project
from tests.access.test_runtime_snapshots import line, other_line
from tests.console.test_identities import operator, shown_raw

__all__ = ["line", "operator", "other_line"]  # fixtures shared with the tests of tokens and of the endpoint

pytestmark = pytest.mark.django_db

RUNTIME_TOKENS = "/console/access/runtimetoken/"


def audited(kind: EventKind) -> list[tuple[str, str, str]]:
    """The audit rows of this kind about runtime tokens (the cast's client tokens have theirs)."""
    rows = AuditEvent.objects.filter(kind=kind).order_by("seq")
    return [(row.called_by, row.outcome, row.project) for row in rows if row.arguments.get("kind") == "runtime"]


def row_of(page: str, label: str) -> str:
    rows = [row for row in page.split("<tr")[1:] if f">{label}</a>" in row]
    assert len(rows) == 1, f"no single row of {label}"
    return rows[0]


@pytest.fixture
def gateway(cast, line) -> RuntimeToken:
    return do_create_runtime_token(line, "gateway-3", created_by=cast.operator.user, acting_user="tests").token


def grant_access_only_on(project: Project, user) -> None:
    """The operators group loses grant_access on every project; `user` keeps it on this one."""
    permission = Permission.objects.get(content_type__app_label="projects", codename="grant_access")
    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(permission)
    assign_perm("projects.grant_access", user, project)


def test_the_list_shows_each_token_with_its_project_maker_standing_and_last_use(cast, operator, gateway):
    page = operator.get(RUNTIME_TOKENS).content.decode()

    row = row_of(page, "gateway-3")
    assert ">line-3<" in row and ">olivia<" in row
    assert "active" in row and "never" in row
    assert f'class="button danger" href="{RUNTIME_TOKENS}{gateway.pk}/revoke/?next=' in row


def test_the_list_finds_a_token_by_its_first_characters(cast, operator, line, gateway):
    do_create_runtime_token(line, "gateway-4", created_by=cast.operator.user, acting_user="tests")

    page = operator.get(RUNTIME_TOKENS, {"q": gateway.prefix}).content.decode()

    assert ">gateway-3</a>" in page and ">gateway-4</a>" not in page


def test_the_side_menu_lists_runtime_tokens_beside_client_tokens(operator):
    page = operator.get(RUNTIME_TOKENS).content.decode()

    menu = page.split('id="nav-sidebar"')[1]
    assert re.search(r'href="/console/access/clienttoken/".*href="/console/access/runtimetoken/"', menu, re.S)
    assert "Runtime connector tokens" in menu


def test_a_runtime_token_made_on_the_form_is_shown_once_with_a_curl_and_stored_as_its_digest(cast, operator, line):
    answer = operator.post(f"{RUNTIME_TOKENS}add/", {"label": "line-3-gateway", "project": line.pk})

    page = answer.content.decode()
    raw = shown_raw(page, "frt_")
    token = RuntimeToken.objects.get(label="line-3-gateway")
    assert (token.project, token.created_by, token.digest) == (line, cast.operator.user, token_digest(raw))
    assert "no-store" in answer["Cache-Control"]
    assert 'data-copy="raw-token"' in page and 'data-copy="configuration-text-runtime_curl"' in page
    assert "curl -X POST http://testserver/api/projects/line-3/runtime-snapshots" in page
    assert html.escape(f"Authorization: Bearer {raw}") in page
    assert audited(EventKind.TOKEN_CREATED)[-1] == ("olivia", "created", "")
    assert raw not in operator.get(RUNTIME_TOKENS).content.decode()
    assert raw not in operator.get(f"{RUNTIME_TOKENS}{token.pk}/change/").content.decode()


def test_the_shown_curl_posts_a_snapshot_the_endpoint_stores(operator, line):
    page = operator.post(f"{RUNTIME_TOKENS}add/", {"label": "line-3-gateway", "project": line.pk}).content.decode()

    raw = shown_raw(page, "frt_")
    body = re.search(r"-d '(\{.*\})'", html.unescape(page))
    assert body, "the curl has no body"
    answer = APIClient(HTTP_AUTHORIZATION=f"Bearer {raw}").post(
        "/api/projects/line-3/runtime-snapshots", json.loads(body.group(1)), format="json"
    )

    assert answer.status_code == 201, answer.content
    assert answer.json()["stored"] == 1


def test_the_form_offers_only_the_projects_the_operator_may_grant_access_to(cast, operator, line, other_line):
    grant_access_only_on(line, cast.operator.user)

    page = operator.get(f"{RUNTIME_TOKENS}add/").content.decode()

    assert f'<option value="{line.pk}">Line 3 (line-3)</option>' in page
    assert "line-4" not in page


def test_a_runtime_token_for_a_project_the_operator_may_not_grant_on_is_refused_and_audited(
    cast, operator, line, other_line
):
    grant_access_only_on(line, cast.operator.user)

    page = operator.post(f"{RUNTIME_TOKENS}add/", {"label": "sneaky", "project": other_line.pk}).content.decode()

    assert "You may bind a runtime token only to a project you may grant access to" in page
    assert not RuntimeToken.objects.exists()
    assert audited(EventKind.TOKEN_CREATED) == [("olivia", "refused: no grant_access permission", "line-4")]


def test_a_runtime_token_without_a_label_or_a_project_is_refused_with_what_to_do(operator):
    page = operator.post(f"{RUNTIME_TOKENS}add/", {"label": " ", "project": ""}).content.decode()

    assert "Name the connector: the label is what the audit log shows." in page
    assert "Pick the project the connector reads." in page
    assert not RuntimeToken.objects.exists()


def test_a_staff_user_who_is_not_an_operator_makes_no_runtime_token_and_the_attempt_is_audited(cast, client, line):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()
    client.force_login(carla)

    response = client.post(f"{RUNTIME_TOKENS}add/", {"label": "sneaky", "project": line.pk})

    assert response.status_code == 403
    assert not RuntimeToken.objects.exists()
    assert audited(EventKind.TOKEN_CREATED) == [("carla", "refused: not an operator", "")]


def test_revoking_a_runtime_token_asks_first_then_revokes_audits_and_its_next_snapshot_is_refused(cast, operator, line):
    new = do_create_runtime_token(line, "gateway-3", created_by=cast.operator.user, acting_user="tests")
    revoke = f"{RUNTIME_TOKENS}{new.token.pk}/revoke/"

    question = operator.get(revoke).content.decode()
    new.token.refresh_from_db()
    unchanged = new.token.revoked_at
    page = operator.post(revoke, {"next": RUNTIME_TOKENS}, follow=True).content.decode()

    new.token.refresh_from_db()
    assert "Revoke gateway-3" in question and "line-3" in question and 'id="confirm">Revoke</button>' in question
    assert unchanged is None and new.token.revoked_at is not None
    assert "Revoked gateway-3" in page and "revoked" in row_of(page, "gateway-3")
    assert audited(EventKind.TOKEN_REVOKED) == [("olivia", "revoked", "")]
    snapshot = {"taken_at": "2026-12-03T08:00:00+00:00", "values": [{"variable": "X", "value": 1, "forced": False}]}
    refused = APIClient(HTTP_AUTHORIZATION=f"Bearer {new.raw}").post(
        "/api/projects/line-3/runtime-snapshots", snapshot, format="json"
    )
    assert refused.status_code == 401


def test_revoking_the_selected_runtime_tokens_revokes_each_and_audits_each(cast, operator, line, gateway):
    other = do_create_runtime_token(line, "gateway-4", created_by=cast.operator.user, acting_user="tests").token

    page = operator.post(
        RUNTIME_TOKENS, {"action": "revoke_selected", "_selected_action": [gateway.pk, other.pk]}, follow=True
    ).content.decode()

    assert "Revoked 2 token(s)." in page
    assert RuntimeToken.objects.filter(revoked_at__isnull=False).count() == 2
    assert audited(EventKind.TOKEN_REVOKED) == [("olivia", "revoked", ""), ("olivia", "revoked", "")]


def test_a_staff_user_who_is_not_an_operator_cannot_revoke_a_runtime_token_and_the_attempt_is_audited(
    cast, client, gateway
):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()
    carla.user_permissions.add(Permission.objects.get(codename="view_runtimetoken"))
    client.force_login(carla)

    listed = client.get(RUNTIME_TOKENS).content.decode()
    page = client.post(f"{RUNTIME_TOKENS}{gateway.pk}/revoke/", follow=True).content.decode()

    gateway.refresh_from_db()
    assert "Revoke…" not in row_of(listed, "gateway-3")
    assert gateway.revoked_at is None
    assert "Only operators revoke tokens; nothing was changed." in page
    assert audited(EventKind.TOKEN_REVOKED) == [("carla", "refused: not an operator", "")]


def test_a_runtime_token_page_has_no_save_button_no_digest_and_a_revoke_button(operator, gateway):
    page = operator.get(f"{RUNTIME_TOKENS}{gateway.pk}/change/").content.decode()

    assert 'name="_save"' not in page and 'name="_continue"' not in page
    assert gateway.digest not in page
    assert 'id="decide-revoke"' in page
    assert gateway.prefix in page and "line-3" in page


@pytest.mark.parametrize("tokens", ["/console/access/clienttoken/", "/console/console/operatortoken/", RUNTIME_TOKENS])
def test_every_token_list_loads_the_style_that_makes_its_revoke_buttons_red(operator, tokens):
    page = operator.get(tokens).content.decode()

    assert re.search(r'<link href="/static/console/identities\.css[^"]*" media="all" rel="stylesheet">', page)


NO_SUCH_PROJECT = "There is no such project; pick one of those offered."


@pytest.mark.parametrize(
    ("project", "said"),
    [
        ("987654", NO_SUCH_PROJECT),
        (str(10**25), NO_SUCH_PROJECT),
        ("line-3", NO_SUCH_PROJECT),
        ("1.5", NO_SUCH_PROJECT),
        ("-1", NO_SUCH_PROJECT),
        ("\x00", "Null characters are not allowed."),
    ],
)
def test_a_runtime_token_for_no_such_project_is_refused_with_what_to_do(operator, line, project, said):
    answer = operator.post(f"{RUNTIME_TOKENS}add/", {"label": "gateway", "project": project})

    assert answer.status_code == 200
    assert said in answer.content.decode()
    assert not RuntimeToken.objects.exists()


@pytest.mark.parametrize("token_id", [987654, 10**25])
def test_revoking_an_unknown_or_impossible_runtime_token_id_is_404(operator, token_id):
    assert operator.get(f"{RUNTIME_TOKENS}{token_id}/revoke/").status_code == 404
    assert operator.post(f"{RUNTIME_TOKENS}{token_id}/revoke/").status_code == 404
