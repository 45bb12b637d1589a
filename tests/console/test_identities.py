"""Identities in the console: client and operator tokens made on a form and shown once, revoked after a
question; the principals screen that sets which projects a client principal may see. Every change goes
through its action function and is audited, refusals included."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm

from access.grants import do_decide_access, raise_request
from access.models import AccessRequest, AccessState, ClientToken, Transport
from access.principals import do_create_token_for
from access.services import do_open_session, token_digest
from audit.models import AuditEvent, EventKind
from console.models import OperatorToken
from console.operator_tokens import do_create_operator_token
from forge_core.console import OPERATORS_GROUP
from projects.models import Project
from projects.rights import can_view

pytestmark = pytest.mark.django_db

CLIENT_TOKENS = "/console/access/clienttoken/"
OPERATOR_TOKENS = "/console/console/operatortoken/"
PRINCIPALS = "/console/access/clientprincipal/"


def shown_raw(page: str, prefix: str) -> str:
    found = re.search(rf'<code id="raw-token">({prefix}[A-Za-z0-9_-]+)</code>', page)
    assert found, "the raw token is not on the page"
    return found.group(1)


def audited(kind: EventKind) -> list[tuple[str, str]]:
    return [(row.called_by, row.outcome) for row in AuditEvent.objects.filter(kind=kind).order_by("seq")]


@pytest.fixture
def operator(cast, client) -> Client:
    client.force_login(cast.operator.user)
    return client


@pytest.fixture
def project(db) -> Project:
    return Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)


def remove_from_operators(codename: str) -> None:
    permission = Permission.objects.get(content_type__app_label="projects", codename=codename)
    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(permission)


# --- client tokens -----------------------------------------------------------------------------------------


def test_a_client_token_made_on_the_form_is_shown_once_with_configurations_and_stored_as_its_digest(cast, operator):
    answer = operator.post(f"{CLIENT_TOKENS}add/", {"label": "cursor-laptop", "owner": "carla", "expires_at": ""})

    page = answer.content.decode()
    raw = shown_raw(page, "fmcp_")
    token = ClientToken.objects.get(label="cursor-laptop")
    assert (token.owner, token.digest, token.expires_at) == (cast.caretaker.user, token_digest(raw), None)
    assert "no-store" in answer["Cache-Control"]
    assert 'data-copy="raw-token"' in page
    assert f"Authorization: Bearer {raw}" in page  # a ready configuration, with this token in it
    stdio = {shown.key: shown.text for shown in answer.context["configurations"]}["claude_desktop_stdio"]
    assert raw not in stdio and "--token-file" in stdio  # the bridge reads the token from its file
    assert audited(EventKind.TOKEN_CREATED)[-1] == ("olivia", "created")
    assert raw not in operator.get(f"{CLIENT_TOKENS}{token.pk}/change/").content.decode()


def test_a_client_token_for_a_new_principal_makes_the_principal_and_says_so_in_the_audit_row(operator):
    expires = (timezone.localtime() + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")

    operator.post(
        f"{CLIENT_TOKENS}add/",
        {"label": "ci-bot", "owner": "robot", "create_owner": "on", "expires_at": expires},
    )

    token = ClientToken.objects.select_related("owner").get(label="ci-bot")
    assert token.owner.get_username() == "robot" and not token.owner.has_usable_password()
    assert token.expires_at is not None and token.expires_at > timezone.now() + timedelta(days=29)
    row = AuditEvent.objects.filter(kind=EventKind.TOKEN_CREATED).order_by("-seq").first()
    assert (row.arguments["owner"], row.arguments["owner_created"]) == ("robot", True)


def test_a_client_token_for_an_unknown_principal_is_refused_with_what_to_do(operator):
    page = operator.post(f"{CLIENT_TOKENS}add/", {"label": "ci-bot", "owner": "nobody"}).content.decode()

    assert "There is no user &#x27;nobody&#x27;. Tick &#x27;create the principal&#x27;" in page
    assert not ClientToken.objects.filter(label="ci-bot").exists()
    assert not get_user_model().objects.filter(username="nobody").exists()


def test_a_client_token_that_would_expire_in_the_past_is_refused(operator):
    page = operator.post(
        f"{CLIENT_TOKENS}add/", {"label": "late", "owner": "carla", "expires_at": "2020-01-01T00:00"}
    ).content.decode()

    assert "Pick a time in the future, or leave it empty." in page
    assert not ClientToken.objects.filter(label="late").exists()


def test_a_staff_user_who_is_not_an_operator_makes_no_token_and_the_attempt_is_audited(cast, client):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()
    client.force_login(carla)

    response = client.post(f"{CLIENT_TOKENS}add/", {"label": "sneaky", "owner": "carla"})

    assert response.status_code == 403
    assert not ClientToken.objects.filter(label="sneaky").exists()
    assert audited(EventKind.TOKEN_CREATED)[-1] == ("carla", "refused: not an operator")


def test_revoking_a_client_token_asks_first_then_revokes_and_audits(cast, operator):
    token = cast.caretaker.token
    revoke = f"{CLIENT_TOKENS}{token.pk}/revoke/"

    listed = operator.get(CLIENT_TOKENS).content.decode()
    question = operator.get(revoke).content.decode()
    token.refresh_from_db()
    unchanged = token.revoked_at
    page = operator.post(revoke, {"next": CLIENT_TOKENS}, follow=True).content.decode()

    token.refresh_from_db()
    assert f'class="button danger" href="{revoke}?next=' in listed
    assert "Revoke carla-client" in question and 'id="confirm">Revoke</button>' in question
    assert unchanged is None and token.revoked_at is not None
    assert "Revoked carla-client" in page
    assert audited(EventKind.TOKEN_REVOKED) == [("olivia", "revoked")]


def test_revoking_a_revoked_token_again_is_refused_with_a_message(cast, operator):
    token = cast.caretaker.token
    operator.post(f"{CLIENT_TOKENS}{token.pk}/revoke/")

    page = operator.post(f"{CLIENT_TOKENS}{token.pk}/revoke/", follow=True).content.decode()

    assert "This token is revoked already; nothing was changed." in page
    assert audited(EventKind.TOKEN_REVOKED) == [("olivia", "revoked")]


def test_a_staff_user_who_is_not_an_operator_cannot_revoke_and_the_attempt_is_audited(cast, client):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()
    carla.user_permissions.add(Permission.objects.get(codename="view_clienttoken"))
    client.force_login(carla)
    token = cast.operator.token

    page = client.post(f"{CLIENT_TOKENS}{token.pk}/revoke/", follow=True).content.decode()

    token.refresh_from_db()
    assert token.revoked_at is None
    assert "Only operators revoke tokens; nothing was changed." in page
    assert audited(EventKind.TOKEN_REVOKED) == [("carla", "refused: not an operator")]


def test_a_token_page_has_no_save_button_and_no_digest(cast, operator):
    page = operator.get(f"{CLIENT_TOKENS}{cast.caretaker.token.pk}/change/").content.decode()

    assert 'name="_save"' not in page and 'name="_continue"' not in page
    assert cast.caretaker.token.digest not in page
    assert 'id="decide-revoke"' in page


# --- operator tokens ---------------------------------------------------------------------------------------


def test_an_operator_token_made_on_the_form_is_shown_once_and_audited(cast, operator):
    answer = operator.post(f"{OPERATOR_TOKENS}add/", {"label": "nightly report", "user": cast.other_operator.user.pk})

    raw = shown_raw(answer.content.decode(), "fop_")
    token = OperatorToken.objects.get(label="nightly report")
    assert (token.user, token.digest) == (cast.other_operator.user, token_digest(raw))
    assert "no-store" in answer["Cache-Control"]
    assert audited(EventKind.TOKEN_CREATED)[-1] == ("olivia", "created")


def test_an_operator_token_for_staff_who_is_not_an_operator_is_refused(cast, operator):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()

    page = operator.post(f"{OPERATOR_TOKENS}add/", {"label": "sneaky", "user": carla.pk}).content.decode()

    assert "carla is not a console operator" in page
    assert not OperatorToken.objects.filter(label="sneaky").exists()


def test_revoking_an_operator_token_from_the_console_revokes_and_audits(cast, operator):
    token = do_create_operator_token(cast.operator.user, "cron", acting_user="olivia").token

    operator.post(f"{OPERATOR_TOKENS}{token.pk}/revoke/")

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert audited(EventKind.TOKEN_REVOKED) == [("olivia", "revoked")]


# --- principals --------------------------------------------------------------------------------------------


def test_the_principals_list_shows_token_owners_and_what_they_see(cast, operator, project):
    assign_perm("projects.view_project", cast.caretaker.user, project)

    page = operator.get(PRINCIPALS).content.decode()

    assert "carla" in page and "olivia" in page


def test_an_operator_lets_a_principal_see_a_project_and_it_is_audited(cast, operator, project):
    carla = cast.caretaker.user
    page_url = f"{PRINCIPALS}{carla.pk}/change/"

    page = operator.post(page_url, {"shown": ["line-3"], "visible": ["line-3"]}, follow=True).content.decode()

    assert can_view(get_user_model().objects.get(pk=carla.pk), project)
    assert "Changed what carla may see on 1 project(s)." in page
    assert 'id="visible-line-3" checked' in page
    assert audited(EventKind.ACCESS_DECISION) == [("olivia", "project visible")]


def test_hiding_a_project_ends_the_principals_grants_on_it(cast, operator, project):
    carla = cast.caretaker.user
    assign_perm("projects.view_project", carla, project)
    session = do_open_session(cast.caretaker.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    grant = raise_request(cast.caretaker.token, session, project)
    do_decide_access(grant.pk, allow=True, user=cast.operator.user)

    operator.post(f"{PRINCIPALS}{carla.pk}/change/", {"shown": ["line-3"]})

    grant = AccessRequest.objects.get(pk=grant.pk)
    assert not can_view(get_user_model().objects.get(pk=carla.pk), project)
    assert (grant.state, grant.decided_by) == (AccessState.ENDED, "project hidden from the principal")
    assert audited(EventKind.ACCESS_DECISION)[-1] == ("olivia", "project hidden")


def test_setting_what_a_principal_sees_without_grant_access_is_refused_and_audited(cast, operator, project):
    remove_from_operators("grant_access")
    carla = cast.caretaker.user

    shown = operator.get(f"{PRINCIPALS}{carla.pk}/change/").content.decode()
    page = operator.post(
        f"{PRINCIPALS}{carla.pk}/change/", {"shown": ["line-3"], "visible": ["line-3"]}, follow=True
    ).content.decode()

    assert 'id="visible-line-3" disabled' in shown
    assert "You may not say who sees line-3" in page
    assert not can_view(get_user_model().objects.get(pk=carla.pk), project)
    assert audited(EventKind.ACCESS_DECISION) == [("olivia", "refused: no grant_access permission")]


def test_a_principal_who_sees_every_project_through_a_group_is_shown_so(cast, operator, project):
    page = operator.get(f"{PRINCIPALS}{cast.other_operator.user.pk}/change/").content.decode()

    assert 'id="every-project"' in page and 'name="visible"' not in page


def test_the_principals_screen_is_for_operators_only(cast, client):
    carla = cast.caretaker.user
    carla.is_staff = True
    carla.save()
    client.force_login(carla)

    assert client.get(PRINCIPALS).status_code == 403


def test_a_client_token_without_a_label_is_refused_with_what_to_do(operator):
    page = operator.post(f"{CLIENT_TOKENS}add/", {"label": "   ", "owner": "carla"}).content.decode()

    assert "Name the client: the label is what the audit log shows." in page
    assert ClientToken.objects.count() == 3  # the cast's


def test_revoking_the_selected_client_tokens_revokes_each_and_audits_each(cast, operator):
    selected = [str(cast.caretaker.token.pk), str(cast.other_operator.token.pk)]

    page = operator.post(
        CLIENT_TOKENS, {"action": "revoke_selected", "_selected_action": selected}, follow=True
    ).content.decode()

    assert "Revoked 2 token(s)." in page
    assert ClientToken.objects.filter(revoked_at__isnull=False).count() == 2
    assert audited(EventKind.TOKEN_REVOKED) == [("olivia", "revoked"), ("olivia", "revoked")]


def test_the_principals_list_counts_per_project_rights_and_says_every_project_for_a_model_right(
    cast, operator, project, django_assert_max_num_queries
):
    assign_perm("projects.view_project", cast.caretaker.user, project)
    for name in ("p1", "p2", "p3", "p4"):  # more rows, no more queries: the cast's three take 12
        do_create_token_for(name, create_owner=True, label=f"{name}-client", expires_at=None, acting_user="tests")

    with django_assert_max_num_queries(12):
        page = operator.get(PRINCIPALS).content.decode()

    rows = {row.split("</a>")[0].rsplit(">", 1)[-1]: row for row in page.split("<tr")[2:]}
    assert '<td class="field-projects">1</td>' in rows["carla"]
    assert '<td class="field-projects">every project</td>' in rows["olivia"]


@pytest.mark.parametrize("token_id", [987654, 10**25])
def test_revoking_an_unknown_or_impossible_token_id_is_404(operator, token_id):
    assert operator.post(f"{CLIENT_TOKENS}{token_id}/revoke/").status_code == 404
    assert operator.post(f"{OPERATOR_TOKENS}{token_id}/revoke/").status_code == 404


def test_a_principals_page_links_to_a_token_form_with_the_owner_filled_in(cast, operator):
    carla = cast.caretaker.user

    page = operator.get(f"{PRINCIPALS}{carla.pk}/change/").content.decode()
    form = operator.get(f"{CLIENT_TOKENS}add/?owner=carla").content.decode()

    assert f'href="{CLIENT_TOKENS}add/?owner=carla"' in page
    assert 'name="owner" value="carla"' in form
