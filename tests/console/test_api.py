"""The operator REST API: sessions, access requests and their decisions, the MCP switch, and its schema.

Operators get in with a console login or an operator token; a client token, a non-operator and a forged
CSRF token on a console login are refused, and every decision is audited with the deciding operator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
import yaml
from django.contrib.auth.models import Group, Permission
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from access.grants import do_decide_access, raise_request
from access.hotpath import mcp_enabled
from access.models import AccessRequest, AccessState, McpSession, ServerState, Transport
from access.services import do_end_session, do_open_session, do_switch_mcp
from audit.models import AuditEvent, EventKind
from console.operator_tokens import do_create_operator_token, do_revoke_operator_token
from forge_core.console import OPERATORS_GROUP
from projects.models import Project
from tests.conftest import Cast, Member

pytestmark = pytest.mark.django_db

SESSIONS = "/api/sessions"
REQUESTS = "/api/access-requests"
SWITCH = "/api/mcp"
SCHEMA = "/api/schema/"
DOCS = "/api/docs/"


def decision_url(request_id: int, decision: str) -> str:
    return f"{REQUESTS}/{request_id}/{decision}"


def error_code(response) -> str:
    return response.json()["code"]


def logged_in(member: Member) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def with_bearer(raw: str) -> APIClient:
    # CSRF is enforced as a browser would meet it: a token request must not need it.
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def operator_token(cast: Cast) -> str:
    return do_create_operator_token(cast.operator.user, "olivia's scripts", acting_user="tests").raw


@pytest.fixture(params=["console login", "operator token"])
def operator(request, cast: Cast) -> APIClient:
    """Olivia, the operator, through each credential the API accepts."""
    if request.param == "console login":
        return logged_in(cast.operator)
    return with_bearer(request.getfixturevalue("operator_token"))


@pytest.fixture
def line(cast: Cast) -> Project:
    return Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)


def open_session(member: Member, revision: str = "2025-11-25") -> McpSession:
    return do_open_session(member.token, transport=Transport.STREAMABLE_HTTP, protocol_version=revision)


@pytest.fixture
def pending(cast: Cast, line: Project) -> AccessRequest:
    return raise_request(cast.caretaker.token, open_session(cast.caretaker), line)


def walk_pages(client: APIClient, url: str, key: str) -> list[str | int]:
    """The ids of every row, following `next` to the end; every `next` keeps the first page's query."""
    query, seen = url.partition("?")[2], []
    for _ in range(10):
        body = client.get(url).json()
        seen += [row["id"] for row in body[key]]
        if body["next"] is None:
            return seen
        assert all(part in body["next"] for part in query.split("&"))
        url = body["next"]
    raise AssertionError(f"{key}: still a next page after 10")


def queries_per_page(client: APIClient, url: str, key: str) -> list[int]:
    """How many queries a page of 1 and a page of 20 cost (both must be full)."""
    counts = []
    for limit in (1, 20):
        with CaptureQueriesContext(connection) as queries:
            assert len(client.get(url, {"limit": limit}).json()[key]) == limit
        counts.append(len(queries))
    return counts


def requests_raised(cast: Cast, count: int) -> list[AccessRequest]:
    raised = []
    for number in range(count):
        project = Project.objects.create(
            slug=f"cell-{number}", name=f"Cell {number}", path=f"cell-{number}.xml", fingerprint="0" * 64
        )
        raised.append(raise_request(cast.caretaker.token, open_session(cast.caretaker), project))
    return raised


# --- sessions --------------------------------------------------------------------------------------


def test_an_operator_lists_open_sessions_with_transport_revision_client_and_principal(cast, operator):
    session = open_session(cast.caretaker, revision="2025-06-18")

    response = operator.get(SESSIONS)

    assert response.status_code == 200
    assert response.json() == {
        "sessions": [
            {
                "id": session.id,
                "transport": "streamable-http",
                "revision": "2025-06-18",
                "client_label": "carla-client",
                "principal": "carla",
                "created_at": session.created_at.isoformat().replace("+00:00", "Z"),
            }
        ],
        "next": None,
    }


def test_ended_sessions_are_not_listed(cast):
    kept, ended = open_session(cast.caretaker), open_session(cast.operator)
    do_end_session(ended, reason="test")

    listed = logged_in(cast.operator).get(SESSIONS).json()["sessions"]

    assert [row["id"] for row in listed] == [kept.id]


def test_sessions_pages_follow_next_to_the_end(cast):
    opened = [open_session(cast.caretaker) for _ in range(5)]

    seen = walk_pages(logged_in(cast.operator), f"{SESSIONS}?limit=2", "sessions")

    assert seen == [session.id for session in sorted(opened, key=lambda s: (s.created_at, s.id))]


def test_sessions_page_costs_the_same_queries_whatever_its_size(cast):
    for member in (cast.caretaker, cast.operator, cast.other_operator) * 7:
        open_session(member)

    first, second = queries_per_page(logged_in(cast.operator), SESSIONS, "sessions")

    assert first == second


@pytest.mark.parametrize("query", [{"limit": "201"}, {"limit": "0"}, {"after": "no-such-session"}, {"page": "2"}])
def test_bad_session_page_parameters_are_400_naming_the_parameter(cast, query):
    response = logged_in(cast.operator).get(SESSIONS, query)

    assert response.status_code == 400
    assert error_code(response) == "FORGE_ERR_BAD_PARAMETER"
    assert next(iter(query)) in response.json()["detail"]


# --- access requests -------------------------------------------------------------------------------


def test_an_operator_lists_pending_access_requests(cast, operator, pending):
    decided = requests_raised(cast, 1)[0]
    do_decide_access(decided.pk, allow=False, user=cast.operator.user)

    response = operator.get(REQUESTS, {"state": "pending"})

    assert response.status_code == 200
    assert response.json() == {
        "access_requests": [
            {
                "id": pending.pk,
                "state": "pending",
                "project": "line-3",
                "principal": "carla",
                "client_label": "carla-client",
                "session": pending.session_id,
                "created_at": pending.created_at.isoformat().replace("+00:00", "Z"),
                "decided_at": None,
                "decided_by": "",
            }
        ],
        "next": None,
    }


def test_access_request_pages_follow_next_keeping_the_state_filter(cast):
    raised = requests_raised(cast, 5)
    do_decide_access(raised[2].pk, allow=True, user=cast.operator.user)

    seen = walk_pages(logged_in(cast.operator), f"{REQUESTS}?state=pending&limit=2", "access_requests")

    assert seen == [request.pk for request in raised if request.pk != raised[2].pk]


def test_access_requests_page_costs_the_same_queries_whatever_its_size(cast, settings):
    settings.FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN = 20  # one token raises them all here
    requests_raised(cast, 20)

    first, second = queries_per_page(logged_in(cast.operator), REQUESTS, "access_requests")

    assert first == second


@pytest.mark.parametrize("query", [{"state": "waiting"}, {"after": "-1"}, {"limit": "201"}, {"project": "line-3"}])
def test_bad_access_request_parameters_are_400_naming_the_parameter(cast, query):
    response = logged_in(cast.operator).get(REQUESTS, query)

    assert response.status_code == 400
    assert error_code(response) == "FORGE_ERR_BAD_PARAMETER"
    assert next(iter(query)) in response.json()["detail"]


# --- decisions -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("decision", "state"), [("allow", AccessState.ALLOWED), ("deny", AccessState.DENIED)])
def test_an_operator_decides_a_pending_request_and_it_is_audited_with_them(cast, operator, pending, decision, state):
    response = operator.post(decision_url(pending.pk, decision))

    pending.refresh_from_db()
    assert response.status_code == 200
    assert (response.json()["id"], response.json()["state"], response.json()["decided_by"]) == (
        pending.pk,
        state,
        "olivia",
    )
    assert (pending.state, pending.decided_by) == (state, "olivia")
    audited = AuditEvent.objects.filter(kind=EventKind.ACCESS_DECISION).get()
    assert (audited.called_by, audited.outcome, audited.project) == ("olivia", state, "line-3")
    assert audited.arguments == {"request": pending.pk, "principal": "carla"}


def test_an_operator_revokes_an_allowed_grant_and_it_is_audited_with_them(cast, operator, pending):
    do_decide_access(pending.pk, allow=True, user=cast.other_operator.user)

    response = operator.post(decision_url(pending.pk, "revoke"))

    pending.refresh_from_db()
    assert response.status_code == 200
    assert response.json()["state"] == "revoked"
    assert (pending.state, pending.decided_by) == (AccessState.REVOKED, "olivia")
    assert AuditEvent.objects.filter(kind=EventKind.ACCESS_DECISION).order_by("-seq").first().called_by == "olivia"


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_deciding_an_already_decided_request_is_409_and_changes_nothing(cast, pending, decision):
    do_decide_access(pending.pk, allow=False, user=cast.other_operator.user)

    response = logged_in(cast.operator).post(decision_url(pending.pk, decision))

    pending.refresh_from_db()
    assert response.status_code == 409
    assert error_code(response) == "FORGE_ERR_ACCESS_ALREADY_DECIDED"
    assert response.json()["detail"] == "This request is denied already; nothing was changed."
    assert (pending.state, pending.decided_by) == (AccessState.DENIED, "oscar")


def test_revoking_a_pending_request_is_409_and_changes_nothing(cast, pending):
    response = logged_in(cast.operator).post(decision_url(pending.pk, "revoke"))

    pending.refresh_from_db()
    assert response.status_code == 409
    assert error_code(response) == "FORGE_ERR_ACCESS_ALREADY_DECIDED"
    assert "Only an allowed grant can be revoked" in response.json()["detail"]
    assert pending.state == AccessState.PENDING


@pytest.mark.parametrize("decision", ["allow", "deny", "revoke"])
@pytest.mark.parametrize("request_id", [987654, 10**25])
def test_deciding_an_unknown_request_is_404(cast, decision, request_id):
    response = logged_in(cast.operator).post(decision_url(request_id, decision))

    assert response.status_code == 404
    assert error_code(response) == "FORGE_ERR_NO_SUCH_ACCESS_REQUEST"


def test_an_operator_without_grant_access_is_403_and_the_attempt_is_audited(cast, pending):
    grant_access = Permission.objects.get(content_type__app_label="projects", codename="grant_access")
    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(grant_access)

    response = logged_in(cast.operator).post(decision_url(pending.pk, "allow"))

    pending.refresh_from_db()
    assert response.status_code == 403
    assert error_code(response) == "FORGE_ERR_NO_GRANT_ACCESS"
    assert response.json()["detail"] == "You may not grant access to line-3; ask its owner."
    assert pending.state == AccessState.PENDING
    refused = AuditEvent.objects.filter(kind=EventKind.ACCESS_DECISION).get()
    assert (refused.called_by, refused.outcome) == ("olivia", "refused: no grant_access permission")


# --- the switch ------------------------------------------------------------------------------------


def test_an_operator_reads_the_switch_off_on_a_fresh_install(cast, operator):
    response = operator.get(SWITCH)

    assert response.status_code == 200
    assert response.json() == {"enabled": False, "changed_by": "", "changed_at": None}


def test_an_operator_reads_who_turned_the_switch_last(cast, operator):
    do_switch_mcp(True, acting_user="oscar")
    state = ServerState.objects.get(pk=1)

    response = operator.get(SWITCH)

    assert response.json() == {
        "enabled": True,
        "changed_by": "oscar",
        "changed_at": state.changed_at.isoformat().replace("+00:00", "Z"),
    }


def test_an_operator_turns_the_switch_on_and_off_and_each_turn_is_audited_with_them(cast, operator):
    on = operator.put(SWITCH, {"enabled": True}, format="json")
    assert on.status_code == 200
    assert (on.json()["enabled"], on.json()["changed_by"], on.json()["changed"]) == (True, "olivia", True)
    assert mcp_enabled()

    off = operator.put(SWITCH, {"enabled": False}, format="json")
    assert (off.json()["enabled"], off.json()["changed"]) == (False, True)
    assert not mcp_enabled()
    turns = AuditEvent.objects.filter(kind=EventKind.MCP_SWITCHED).order_by("seq")
    assert [(turn.called_by, turn.outcome) for turn in turns] == [("olivia", "on"), ("olivia", "off")]


def test_turning_the_switch_to_where_it_is_changes_nothing_and_says_so(cast):
    do_switch_mcp(True, acting_user="oscar")

    response = logged_in(cast.operator).put(SWITCH, {"enabled": True}, format="json")

    assert response.status_code == 200
    assert (response.json()["changed"], response.json()["changed_by"]) == (False, "oscar")
    assert AuditEvent.objects.filter(kind=EventKind.MCP_SWITCHED, called_by="olivia").count() == 0


@pytest.mark.parametrize("body", [{"enabled": "true"}, {"enabled": 1}, {}, {"enabled": True, "force": True}, [True]])
def test_a_switch_body_other_than_enabled_true_or_false_is_400_and_changes_nothing(cast, body):
    response = logged_in(cast.operator).put(SWITCH, body, format="json")

    assert response.status_code == 400
    assert error_code(response) == "FORGE_ERR_BAD_PARAMETER"
    assert '{"enabled": true}' in response.json()["detail"]
    assert not mcp_enabled()


def test_a_form_encoded_switch_body_is_415(cast):
    response = logged_in(cast.operator).put(SWITCH, "enabled=true", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415
    assert not mcp_enabled()


def test_turning_the_switch_when_the_audit_log_cannot_be_written_is_503_and_changes_nothing(cast, settings, tmp_path):
    client = logged_in(cast.operator)
    blocked = tmp_path / "blocked" / "audit.jsonl"
    blocked.mkdir(parents=True)
    settings.FORGE_AUDIT_LOG = blocked

    response = client.put(SWITCH, {"enabled": True}, format="json")

    assert response.status_code == 503
    assert error_code(response) == "FORGE_ERR_AUDIT_UNAVAILABLE"
    assert not mcp_enabled()


# --- who gets in -----------------------------------------------------------------------------------


def every_endpoint(pending: AccessRequest) -> list[tuple[str, str]]:
    return [
        ("get", SESSIONS),
        ("get", REQUESTS),
        ("post", decision_url(pending.pk, "allow")),
        ("post", decision_url(pending.pk, "deny")),
        ("post", decision_url(pending.pk, "revoke")),
        ("get", SWITCH),
        ("put", SWITCH),
    ]


def call(client: APIClient, method: str, url: str):
    if method == "put":
        return client.put(url, {"enabled": True}, format="json")
    return getattr(client, method)(url)


def assert_nothing_changed(pending: AccessRequest) -> None:
    pending.refresh_from_db()
    assert pending.state == AccessState.PENDING
    assert not mcp_enabled()
    assert not AuditEvent.objects.filter(kind__in=[EventKind.ACCESS_DECISION, EventKind.MCP_SWITCHED]).exists()


def test_every_endpoint_without_credentials_is_401_naming_the_bearer_scheme(cast, pending):
    for method, url in every_endpoint(pending):
        response = call(APIClient(), method, url)
        assert response.status_code == 401, (method, url)
        assert response["WWW-Authenticate"] == 'Bearer realm="forge-mcp"'
        assert error_code(response) == "FORGE_ERR_NOT_AUTHENTICATED"
        assert "operator token" in response.json()["detail"]
    assert_nothing_changed(pending)


def test_every_endpoint_refuses_a_client_token_even_an_operators_with_403(cast, pending):
    for member in (cast.operator, cast.caretaker):
        for method, url in every_endpoint(pending):
            response = call(with_bearer(member.raw_token), method, url)
            assert response.status_code == 403, (member.user, method, url)
            assert error_code(response) == "FORGE_ERR_PERMISSION_DENIED"
            assert "Client tokens are for MCP clients" in response.json()["detail"]
    assert_nothing_changed(pending)


@pytest.mark.parametrize("who", ["caretaker", "staff outside the operators group"])
def test_every_endpoint_refuses_a_console_login_that_is_not_an_operators_with_403(
    cast, pending, who, django_user_model
):
    user = cast.caretaker.user if who == "caretaker" else django_user_model.objects.create_user("stella", is_staff=True)
    client = APIClient()
    client.force_login(user)
    for method, url in every_endpoint(pending):
        response = call(client, method, url)
        assert response.status_code == 403, (method, url)
        assert error_code(response) == "FORGE_ERR_PERMISSION_DENIED"
    assert_nothing_changed(pending)


@pytest.mark.parametrize(
    "raw", ["fop_not-a-real-token", "fop_" + "x" * 300], ids=["unknown operator token", "overlong operator token"]
)
def test_an_unknown_operator_token_is_401_and_audited(cast, raw):
    response = with_bearer(raw).get(SWITCH)

    assert response.status_code == 401
    assert error_code(response) == "FORGE_ERR_AUTHENTICATION_FAILED"
    assert "create_operator_token" in response.json()["detail"]
    refused = AuditEvent.objects.order_by("-seq").first()
    assert (refused.kind, refused.outcome, refused.arguments) == (
        "auth_refused",
        "bad_operator_token",
        {"path": SWITCH},
    )


def test_a_revoked_operator_token_is_401(cast):
    new = do_create_operator_token(cast.operator.user, "retired", acting_user="tests")
    assert with_bearer(new.raw).get(SWITCH).status_code == 200

    do_revoke_operator_token(new.token, acting_user="oscar")

    assert with_bearer(new.raw).get(SWITCH).status_code == 401


def test_an_operator_token_stops_working_when_its_user_leaves_the_operators(cast, operator_token):
    cast.operator.user.groups.clear()

    assert with_bearer(operator_token).get(SWITCH).status_code == 401


def test_an_operator_token_reads_the_audit_events_as_its_operator(cast, operator_token):
    assert with_bearer(operator_token).get("/api/audit/events").status_code == 200


# --- CSRF on a console login -----------------------------------------------------------------------

CSRF_SECRET = "a" * 32
FORGED_SECRET = "b" * 32


def browser(member: Member, *, csrf_header: str | None) -> Client:
    """A logged-in browser holding the CSRF cookie; `csrf_header` is what the page sends back, if anything."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    client.cookies["csrftoken"] = CSRF_SECRET
    if csrf_header is not None:
        client.defaults["HTTP_X_CSRFTOKEN"] = csrf_header
    return client


@pytest.mark.parametrize("csrf_header", [None, FORGED_SECRET], ids=["no CSRF token", "forged CSRF token"])
def test_a_decision_on_a_console_login_without_the_csrf_token_is_403_and_changes_nothing(cast, pending, csrf_header):
    client = browser(cast.operator, csrf_header=csrf_header)

    decided = client.post(decision_url(pending.pk, "allow"))
    switched = client.put(SWITCH, '{"enabled": true}', content_type="application/json")

    for response in (decided, switched):
        assert response.status_code == 403
        assert error_code(response) == "FORGE_ERR_PERMISSION_DENIED"
        assert "CSRF" in response.json()["detail"]
    assert_nothing_changed(pending)


def test_a_decision_on_a_console_login_with_the_csrf_token_goes_through(cast, pending):
    client = browser(cast.operator, csrf_header=CSRF_SECRET)

    response = client.post(decision_url(pending.pk, "allow"))

    pending.refresh_from_db()
    assert response.status_code == 200
    assert pending.state == AccessState.ALLOWED


# --- schema and docs -------------------------------------------------------------------------------

OPERATOR_PATHS = {
    "/api/sessions",
    "/api/access-requests",
    "/api/access-requests/{request_id}/allow",
    "/api/access-requests/{request_id}/deny",
    "/api/access-requests/{request_id}/revoke",
    "/api/mcp",
    # confirmations.api, the same operator API
    "/api/confirmations",
    "/api/confirmations/{confirmation_id}",
    "/api/confirmations/{confirmation_id}/approve",
    "/api/confirmations/{confirmation_id}/deny",
    "/api/contracts",
    "/api/contracts/{contract_id}",
    "/api/contracts/{contract_id}/rollback",
    "/api/contracts/{contract_id}/resolve",
    # console.draft_api
    "/api/drafts",
    "/api/drafts/{slug}",
    "/api/drafts/{slug}/accept",
    "/api/drafts/{slug}/discard",
    # console.caretaker_api
    "/api/caretaker/peers",
    "/api/caretaker/peers/{name}/codes",
}
AUDIT_PATHS = {
    "/api/audit/events",
    "/api/audit/checkpoint",
    "/api/audit/proof/inclusion",
    "/api/audit/proof/consistency",
}
RUNTIME_PATHS = {"/api/projects/{slug}/runtime-snapshots"}  # access.runtime_api, for runtime connectors


@pytest.mark.parametrize(
    ("query", "parse"),
    [({}, yaml.safe_load), ({"format": "json"}, json.loads)],
    ids=["yaml", "json"],
)
def test_the_schema_is_openapi_listing_the_operator_and_audit_paths(cast, query, parse: Callable[[str], dict]):
    response = logged_in(cast.operator).get(SCHEMA, query)

    assert response.status_code == 200
    document = parse(response.content.decode())
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "Forge MCP API"
    assert set(document["paths"]) == OPERATOR_PATHS | AUDIT_PATHS | RUNTIME_PATHS


def test_the_schema_documents_only_operator_credentials_on_the_operator_paths(cast):
    document = yaml.safe_load(logged_in(cast.operator).get(SCHEMA).content)

    for path in OPERATOR_PATHS:
        for operation in document["paths"][path].values():
            assert operation["security"] == [{"operatorToken": []}, {"cookieAuth": []}], path
    assert {"clientToken": []} in document["paths"]["/api/audit/checkpoint"]["get"]["security"]


def test_the_schema_needs_credentials(cast):
    assert APIClient().get(SCHEMA).status_code == 401


def test_the_docs_page_loads_and_references_only_local_static_assets(cast):
    response = logged_in(cast.operator).get(DOCS)

    assert response.status_code == 200
    page = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any(asset.endswith("swagger-ui-bundle.js") for asset in assets)
    for asset in assets:
        assert asset.startswith("/static/drf_spectacular_sidecar/"), asset
        assert finders.find(asset.removeprefix("/static/")) is not None, asset
    assert "http://" not in page and "https://" not in page


def test_a_request_asks_once_whether_its_user_is_an_operator(operator):
    with CaptureQueriesContext(connection) as queries:
        assert operator.get("/api/sessions").status_code == 200

    membership = [q["sql"] for q in queries.captured_queries if "auth_user_groups" in q["sql"]]
    assert len(membership) == 1, membership
