"""The quickstart's demo project: built by the operation vocabulary, valid, registered once."""

from __future__ import annotations

import io
import json
import stat

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from access.services import authenticate_token, do_create_token
from forge_core.console import is_operator
from forge_core.instances import read_token_file
from projects import findings
from projects.demo import demo_project_bytes
from projects.models import Project
from projects.plcopen import documents
from projects.rights import can_view


def test_the_demo_project_is_schema_valid_and_the_same_bytes_every_time():
    data = demo_project_bytes()

    assert documents.validate(documents.load(data)) == []
    assert demo_project_bytes() == data


def test_the_demo_project_shows_one_advisory_finding_and_no_problem():
    found = findings.check(documents.load(demo_project_bytes()).root)

    assert [(f.code, f.severity) for f in found] == [("unused_variable", "advisory")]


@pytest.mark.django_db
def test_demo_setup_registers_the_demo_project_once(settings, tmp_path):
    settings.FORGE_PROJECTS_ROOT = tmp_path

    call_command("demo_setup", stdout=io.StringIO())
    call_command("demo_setup", stdout=io.StringIO())

    project = Project.objects.get(slug="demo-conveyor")
    assert (tmp_path / project.path).read_bytes() == demo_project_bytes()
    assert Project.objects.count() == 1


@pytest.mark.django_db
def test_the_demo_client_token_is_its_own_principal_who_may_view_the_demo_project_only(settings, tmp_path):
    settings.FORGE_PROJECTS_ROOT = tmp_path
    call_command("demo_setup", stdout=io.StringIO())

    token = authenticate_token((settings.FORGE_SECRETS_DIR / "demo-token").read_text().strip())
    assert token is not None
    client = token.owner
    assert client.get_username() == "demo-client" and client.get_username() != "operator"
    assert not is_operator(client) and not client.is_staff and not client.has_usable_password()
    assert can_view(client, Project.objects.get(slug="demo-conveyor"))
    assert not client.has_perm("projects.view_project")  # the demo project only, not every project


@pytest.mark.django_db
def test_a_demo_token_kept_from_when_it_was_the_operators_is_revoked_and_replaced(settings, tmp_path):
    settings.FORGE_PROJECTS_ROOT = tmp_path
    call_command("demo_setup", stdout=io.StringIO())
    operator = get_user_model().objects.get(username="operator")
    old = do_create_token(owner=operator, label="demo", acting_user="tests")
    (settings.FORGE_SECRETS_DIR / "demo-token").write_text(old.raw + "\n")

    call_command("demo_setup", stdout=io.StringIO())

    old.token.refresh_from_db()
    assert authenticate_token(old.raw) is None
    new = authenticate_token((settings.FORGE_SECRETS_DIR / "demo-token").read_text().strip())
    assert new is not None and new.owner.get_username() == "demo-client"


@pytest.mark.django_db
def test_demo_setup_prints_the_stdio_bridge_configuration_reading_the_demo_token_file(settings, tmp_path):
    settings.FORGE_PROJECTS_ROOT = tmp_path
    out = io.StringIO()

    call_command("demo_setup", stdout=out)

    printed = out.getvalue()
    token_file = settings.FORGE_SECRETS_DIR / "demo-token"
    assert json.dumps(str(token_file)) in printed and '"mcp_stdio"' in printed
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert read_token_file(token_file) == token_file.read_text().strip()
