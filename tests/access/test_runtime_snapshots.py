"""The runtime connectors' endpoint, POST /api/projects/{slug}/runtime-snapshots, in-process: who may post
(only a runtime token, only to its own project), what a snapshot stores (the latest value of each variable,
with forced and the instant it was read; a late older snapshot replaces nothing), the bounds and refusals
(problem details, audited), the token kinds kept apart everywhere else, and the runtime_token command."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from access.models import RuntimeToken, RuntimeValue
from access.runtime import MAX_VALUES_PER_SNAPSHOT, do_create_runtime_token, do_revoke_runtime_token
from audit.models import AuditEvent, EventKind
from console.operator_tokens import do_create_operator_token
from forge_core.canonical import canonical_json
from forge_core.console import OPERATORS_GROUP
from forge_core.tokens import token_digest
from projects.models import Project

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 0, 0, tzinfo=UTC)


def url(slug: str) -> str:
    return f"/api/projects/{slug}/runtime-snapshots"


@pytest.fixture
def line(cast) -> Project:
    return Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)


@pytest.fixture
def other_line(cast) -> Project:
    return Project.objects.create(slug="line-4", name="Line 4", path="line-4.xml", fingerprint="1" * 64)


@pytest.fixture
def connector(cast, line) -> str:
    return do_create_runtime_token(line, "gateway-3", created_by=cast.operator.user, acting_user="tests").raw


def bearer(raw: str | None) -> APIClient:
    client = APIClient()
    if raw is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def snapshot(*values: tuple[str, Any, bool], taken_at: datetime = T0) -> dict[str, Any]:
    return {
        "taken_at": taken_at.isoformat(),
        "values": [{"variable": name, "value": value, "forced": forced} for name, value, forced in values],
    }


def post(raw: str | None, body: Any, slug: str = "line-3"):
    return bearer(raw).post(url(slug), body, format="json")


def stored() -> dict[str, tuple[Any, bool, datetime]]:
    return {row.variable: (row.value, row.forced, row.observed_at) for row in RuntimeValue.objects.all()}


def snapshot_rows() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.RUNTIME_SNAPSHOT).order_by("seq"))


def refused_rows() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.AUTH_REFUSED).order_by("seq"))


# --- what a snapshot stores ------------------------------------------------------------------------------


def test_a_snapshot_stores_each_value_with_forced_and_the_instant_it_was_read(connector):
    body = snapshot(("Main.Speed", 1450, False), ("Main.Run", True, True), ("Main.Mode", "AUTO", False))

    response = post(connector, body)

    assert response.status_code == 201
    assert response.json() == {"project": "line-3", "taken_at": T0.isoformat(), "stored": 3, "older_than_stored": 0}
    assert stored() == {
        "Main.Speed": (1450, False, T0),
        "Main.Run": (True, True, T0),
        "Main.Mode": ("AUTO", False, T0),
    }


def test_a_newer_snapshot_replaces_a_variables_value_and_forced(connector):
    post(connector, snapshot(("Main.Speed", 1450, False)))

    post(connector, snapshot(("Main.Speed", 0, True), taken_at=T0 + timedelta(seconds=5)))

    assert stored() == {"Main.Speed": (0, True, T0 + timedelta(seconds=5))}


def test_an_older_snapshot_arriving_late_replaces_nothing(connector):
    post(connector, snapshot(("Main.Speed", 1450, False), taken_at=T0 + timedelta(seconds=5)))

    response = post(connector, snapshot(("Main.Speed", 3, True), ("Main.Run", True, False)))

    assert response.json()["older_than_stored"] == 1
    assert stored() == {"Main.Speed": (1450, False, T0 + timedelta(seconds=5)), "Main.Run": (True, False, T0)}


def test_a_snapshot_is_audited_as_one_row_with_the_values_digest_not_the_values(connector):
    values = [("Main.Speed", 1450, False), ("Main.Secret", "s3cr3t-value", True)]

    post(connector, snapshot(*values))

    [row] = snapshot_rows()
    arguments = json.loads(row.arguments_json)
    listed = [{"variable": n, "value": v, "forced": f} for n, v, f in values]
    token = RuntimeToken.objects.get(digest=token_digest(connector))
    assert (row.outcome, row.project, row.called_by, row.client_label) == (
        "stored",
        "line-3",
        f"runtime:{token.pk}",
        "gateway-3",
    )
    assert arguments["count"] == 2
    assert arguments["forced"] == 1
    assert arguments["values_sha256"] == hashlib.sha256(canonical_json(listed).encode()).hexdigest()
    assert "s3cr3t-value" not in row.arguments_json
    assert "Main.Secret" not in row.arguments_json


# --- who may post ----------------------------------------------------------------------------------------


def test_a_request_without_credentials_is_401_with_the_bearer_scheme(connector):
    response = post(None, snapshot(("Main.Speed", 1, False)))

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response["Content-Type"] == "application/problem+json"
    assert stored() == {}


def test_an_unknown_runtime_token_is_401_and_audited(connector):
    response = post("frt_" + "x" * 43, snapshot(("Main.Speed", 1, False)))

    assert response.status_code == 401
    assert response.json()["code"] == "FORGE_ERR_AUTHENTICATION_FAILED"
    assert [row.outcome for row in refused_rows()] == ["bad_runtime_token"]
    assert stored() == {}


def test_a_revoked_runtime_token_is_refused_at_its_next_snapshot(cast, connector):
    token = RuntimeToken.objects.get(digest=token_digest(connector))
    do_revoke_runtime_token(token, acting_user="olivia")

    response = post(connector, snapshot(("Main.Speed", 1, False)))

    assert response.status_code == 401
    assert stored() == {}


@pytest.mark.parametrize("kind", ["client", "operator"])
def test_a_client_or_operator_token_is_refused_here_and_audited(cast, line, kind):
    raw = (
        cast.operator.raw_token
        if kind == "client"
        else do_create_operator_token(cast.operator.user, "script", acting_user="tests").raw
    )

    response = post(raw, snapshot(("Main.Speed", 1, False)))

    assert response.status_code == 403
    assert "runtime connector token" in response.json()["detail"]
    assert [row.outcome for row in refused_rows()] == ["runtime endpoint refused another kind of token"]
    assert stored() == {}


def test_a_console_login_is_refused_here(cast, line):
    client = APIClient()
    client.force_login(cast.operator.user)

    response = client.post(url("line-3"), snapshot(("Main.Speed", 1, False)), format="json")

    assert response.status_code == 401
    assert stored() == {}


def test_a_runtime_token_posts_only_to_its_own_project(connector, other_line):
    response = post(connector, snapshot(("Main.Speed", 1, False)), slug="line-4")

    assert response.status_code == 404
    assert response.json()["code"] == "FORGE_ERR_NOT_FOUND"
    assert "line-3" in response.json()["detail"]
    assert [row.outcome for row in snapshot_rows()] == ["refused: FORGE_ERR_NOT_FOUND"]
    assert stored() == {}


def test_a_slug_of_no_project_is_the_same_404(connector):
    response = post(connector, snapshot(("Main.Speed", 1, False)), slug="no-such-line")

    assert response.status_code == 404
    assert response.json()["code"] == "FORGE_ERR_NOT_FOUND"


def test_a_runtime_token_is_refused_by_the_operator_api_and_audited(connector):
    response = bearer(connector).get("/api/sessions")

    assert response.status_code == 401
    assert "only posts runtime snapshots" in response.json()["detail"]
    assert [row.outcome for row in refused_rows()] == ["runtime token refused outside runtime-snapshots"]


def test_a_runtime_token_is_refused_by_the_audit_api(connector):
    assert bearer(connector).get("/api/audit/checkpoint").status_code == 401


# --- bounds and refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"values": [{"variable": "A", "value": 1, "forced": False}]}, "taken_at"),
        ({"taken_at": "2026-12-03T08:00:00", "values": [{"variable": "A", "value": 1, "forced": False}]}, "taken_at"),
        ({"taken_at": T0.isoformat(), "values": []}, "values"),
        ({"taken_at": T0.isoformat(), "values": [{"variable": "A", "value": 1}]}, "values.0.forced"),
        ({"taken_at": T0.isoformat(), "values": [{"variable": "A", "value": 1, "forced": "yes"}]}, "values.0.forced"),
        (
            {"taken_at": T0.isoformat(), "values": [{"variable": "A B", "value": 1, "forced": False}]},
            "values.0.variable",
        ),
        ({"taken_at": T0.isoformat(), "values": [{"variable": "A", "value": [1], "forced": False}]}, "values.0.value"),
        (
            {"taken_at": T0.isoformat(), "values": [{"variable": "A", "value": 10**400, "forced": False}]},
            "values.0.value",
        ),
        (
            {"taken_at": T0.isoformat(), "values": [{"variable": "A", "value": "x" * 1001, "forced": False}]},
            "values.0.value",
        ),
        (
            {"taken_at": T0.isoformat(), "values": [{"variable": "A" * 201, "value": 1, "forced": False}]},
            "values.0.variable",
        ),
        (
            {"taken_at": T0.isoformat(), "values": [{"variable": "A\u0000", "value": 1, "forced": False}]},
            "values.0.variable",
        ),
        (
            {"taken_at": T0.isoformat(), "values": [{"variable": "A", "value": "x\u0000", "forced": False}]},
            "values.0.value",
        ),
        ({**snapshot(("A", 1, False)), "pin": True}, "pin"),
        (snapshot(("A", 1, False), ("A", 2, False)), "values"),
        ([1, 2], "the body"),
    ],
    ids=[
        "no-taken-at",
        "naive-taken-at",
        "no-values",
        "no-forced",
        "forced-not-boolean",
        "variable-with-space",
        "value-a-list",
        "value-too-large",
        "text-too-long",
        "name-too-long",
        "nul-in-name",
        "nul-in-text",
        "unknown-field",
        "variable-twice",
        "not-an-object",
    ],
)
def test_a_body_that_is_not_a_snapshot_is_a_400_naming_the_field(connector, body, named):
    response = post(connector, body)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "FORGE_ERR_BAD_PARAMETER"
    assert named in response.json()["detail"]
    assert [row.outcome for row in snapshot_rows()] == ["refused: FORGE_ERR_BAD_PARAMETER"]
    assert stored() == {}


def test_a_lone_surrogate_in_a_value_is_a_400(connector):
    raw = f'{{"taken_at": "{T0.isoformat()}", "values": [{{"variable": "A", "value": "\\ud800", "forced": false}}]}}'

    response = bearer(connector).generic("POST", url("line-3"), raw.encode(), content_type="application/json")

    assert response.status_code == 400
    assert "values.0.value" in response.json()["detail"]
    assert stored() == {}


def test_a_snapshot_of_more_than_the_bound_of_values_is_refused(connector):
    values = [(f"V{i}", i, False) for i in range(MAX_VALUES_PER_SNAPSHOT + 1)]

    response = post(connector, snapshot(*values))

    assert response.status_code == 400
    assert "values" in response.json()["detail"]
    assert stored() == {}


def test_a_snapshot_of_exactly_the_bound_of_values_is_stored(connector):
    values = [(f"V{i}", i, False) for i in range(MAX_VALUES_PER_SNAPSHOT)]

    assert post(connector, snapshot(*values)).status_code == 201
    assert RuntimeValue.objects.count() == MAX_VALUES_PER_SNAPSHOT


def test_a_snapshot_from_the_future_is_refused_with_what_to_fix(connector):
    response = post(connector, snapshot(("Main.Speed", 1, False), taken_at=datetime.now(UTC) + timedelta(hours=1)))

    assert response.status_code == 400
    assert response.json()["code"] == "FORGE_ERR_RUNTIME_CLOCK"
    assert "NTP" in response.json()["detail"]
    assert [row.outcome for row in snapshot_rows()] == ["refused: FORGE_ERR_RUNTIME_CLOCK"]
    assert stored() == {}


def test_a_project_holds_a_bounded_number_of_variables(connector, monkeypatch):
    monkeypatch.setattr("access.runtime.MAX_VARIABLES_PER_PROJECT", 2)
    post(connector, snapshot(("A", 1, False), ("B", 2, False)))

    refused = post(connector, snapshot(("C", 3, False)))
    known = post(connector, snapshot(("A", 9, True), taken_at=T0 + timedelta(seconds=1)))

    assert refused.status_code == 409
    assert refused.json()["code"] == "FORGE_ERR_RUNTIME_TOO_MANY_VARIABLES"
    assert [row.outcome for row in snapshot_rows()] == [
        "stored",
        "refused: FORGE_ERR_RUNTIME_TOO_MANY_VARIABLES",
        "stored",
    ]
    assert known.status_code == 201
    assert set(stored()) == {"A", "B"}


def test_a_body_that_is_not_json_is_415(connector):
    response = bearer(connector).post(url("line-3"), "taken_at=now", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415
    assert stored() == {}


def test_a_query_parameter_is_refused(connector):
    response = bearer(connector).post(url("line-3") + "?force=1", snapshot(("A", 1, False)), format="json")

    assert response.status_code == 400
    assert stored() == {}


# --- the command -----------------------------------------------------------------------------------------


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("runtime_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_prints_a_token_once_that_posts_to_its_project(cast, line):
    out, err = run("create", "line-3", "--operator", "olivia", "--label", "gateway-3")

    raw = out.strip().splitlines()[-1]
    token = RuntimeToken.objects.get()
    assert raw.startswith("frt_")
    assert token.digest == token_digest(raw)
    assert raw not in err
    assert (token.project, token.label, token.created_by) == (line, "gateway-3", cast.operator.user)
    created = AuditEvent.objects.filter(kind=EventKind.TOKEN_CREATED, client_label="gateway-3").get()
    assert json.loads(created.arguments_json)["kind"] == "runtime"
    assert raw not in created.arguments_json
    assert post(raw, snapshot(("A", 1, False))).status_code == 201


def test_the_command_revokes_a_token_by_its_prefix(cast, connector):
    token = RuntimeToken.objects.get()

    out, _ = run("revoke", "--prefix", token.prefix)

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "Revoked runtime token" in out
    assert AuditEvent.objects.filter(kind=EventKind.TOKEN_REVOKED, client_label="gateway-3").count() == 1
    assert post(connector, snapshot(("A", 1, False))).status_code == 401


def test_the_command_lists_only_tokens_not_revoked(cast, connector, line):
    second = do_create_runtime_token(line, "gateway-b", created_by=cast.operator.user)
    do_revoke_runtime_token(second.token, acting_user="tests")

    out, _ = run("list")

    assert "gateway-3" in out
    assert "gateway-b" not in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("create", "nowhere", "--operator", "olivia"), "No project 'nowhere'"),
        (("create", "line-3", "--operator", "carla"), "not a console operator"),
        (("revoke", "--id", "999"), "No runtime token with id 999"),
    ],
    ids=["unknown-project", "not-an-operator", "unknown-token"],
)
def test_the_command_refuses_with_what_to_do(cast, line, args, says):
    with pytest.raises(CommandError, match=says):
        run(*args)
    assert not RuntimeToken.objects.exists()


def test_the_schema_documents_only_the_runtime_token_on_the_snapshot_path(cast):
    client = APIClient()
    client.force_login(cast.operator.user)

    document = client.get("/api/schema/", {"format": "json"}).json()

    [operation] = document["paths"]["/api/projects/{slug}/runtime-snapshots"].values()
    assert operation["security"] == [{"runtimeToken": []}]
    assert document["components"]["securitySchemes"]["runtimeToken"]["bearerFormat"] == "frt_..."


def test_the_command_refuses_an_operator_without_grant_access_on_the_project_and_audits_it(cast, line):
    permission = Permission.objects.get(content_type__app_label="projects", codename="grant_access")
    Group.objects.get(name=OPERATORS_GROUP).permissions.remove(permission)

    with pytest.raises(CommandError, match=r"olivia may not bind a runtime token to line-3: .*grant_access"):
        run("create", "line-3", "--operator", "olivia", "--label", "gateway-3")

    assert not RuntimeToken.objects.exists()
    rows = AuditEvent.objects.filter(kind=EventKind.TOKEN_CREATED).order_by("seq")
    refused = [row for row in rows if row.arguments.get("kind") == "runtime"]
    assert [(row.called_by, row.outcome, row.project) for row in refused] == [
        ("manage.py", "refused: no grant_access permission", "line-3")
    ]
