"""Projects in the console: import by upload, bind a file under the root, the export download, and no
way to add or delete a project around the checks that registration makes."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.messages import constants
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpRequest
from django.urls import reverse

from audit.models import AuditEvent, EventKind
from projects.models import Project
from projects.services import do_import_project
from tests.projects.conftest import INVALID, MAIN, SMALL, fixture_bytes

pytestmark = pytest.mark.django_db

STEPS = MAIN
CHANGELIST = "admin:projects_project_changelist"
IMPORT = "admin:projects_project_import"
BIND = "admin:projects_project_bind"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def operator_client(client, cast):
    assert client.login(request=HttpRequest(), username="olivia", password="olivia-password-123")
    return client


def messages_of(response) -> list[tuple[int, str]]:
    return [(message.level, message.message) for message in response.context["messages"]]


def upload(name: str, slug: str, **fields: str) -> dict:
    return {"slug": slug, "name": "", **fields, "file": SimpleUploadedFile(name, fixture_bytes(name), "text/xml")}


def form_errors(response) -> list[str]:
    return list(response.context["form"].non_field_errors())


# --- import ----------------------------------------------------------------------------------------


def test_the_changelist_links_to_the_import_and_bind_screens(operator_client):
    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    assert f'href="{reverse(IMPORT)}"' in page
    assert f'href="{reverse(BIND)}"' in page


def test_the_import_screen_shows_a_multipart_form(operator_client):
    response = operator_client.get(reverse(IMPORT))

    assert response.status_code == 200
    assert 'enctype="multipart/form-data"' in response.content.decode()
    assert set(response.context["form"].fields) == {"slug", "name", "file"}


def test_importing_an_upload_registers_it_and_redirects_with_a_success_message(operator_client, root):
    response = operator_client.post(reverse(IMPORT), upload(STEPS, "steps"), follow=True)

    assert response.redirect_chain == [(reverse(CHANGELIST), 302)]
    assert messages_of(response) == [(constants.SUCCESS, "Registered Dosing Line (steps) at revision 1.")]
    assert Project.objects.get().slug == "steps"
    assert (root / "steps.xml").read_bytes() == fixture_bytes(STEPS)


def test_an_import_from_the_console_is_audited_as_the_operator(operator_client):
    operator_client.post(reverse(IMPORT), upload(STEPS, "steps"))

    [event] = AuditEvent.objects.filter(kind=EventKind.PROJECT_REGISTERED)
    assert (event.project, event.called_by) == ("steps", "olivia")


def test_importing_a_schema_invalid_upload_shows_the_error_on_the_form_and_registers_nothing(operator_client, root):
    response = operator_client.post(reverse(IMPORT), upload(INVALID, "checker"))

    assert response.status_code == 200
    [error] = form_errors(response)
    assert error.startswith("the file is not valid against the TC6 2.01 schema: line 8: ")
    assert "line 8: " in response.content.decode()
    assert not Project.objects.exists()
    assert list(root.iterdir()) == []


def test_importing_under_a_taken_slug_shows_the_error_on_the_form(operator_client):
    do_import_project(fixture_bytes(STEPS), slug="steps", acting_user="tests")

    response = operator_client.post(reverse(IMPORT), upload(SMALL, "steps"))

    assert form_errors(response) == ["a project with the slug 'steps' exists already; choose another slug."]
    assert Project.objects.count() == 1


def test_importing_under_a_slug_that_is_not_a_slug_is_a_field_error(operator_client, root):
    response = operator_client.post(reverse(IMPORT), upload(STEPS, "../steps"))

    assert response.status_code == 200
    assert response.context["form"].errors["slug"]
    assert not Project.objects.exists()
    assert list(root.iterdir()) == []


# --- bind ------------------------------------------------------------------------------------------


def test_binding_from_the_console_registers_the_file_where_it_lies(operator_client, root):
    (root / "line3").mkdir()
    (root / "line3" / "press.xml").write_bytes(fixture_bytes(STEPS))

    response = operator_client.post(
        reverse(BIND), {"slug": "press", "name": "", "path": "line3/press.xml"}, follow=True
    )

    assert response.redirect_chain == [(reverse(CHANGELIST), 302)]
    assert messages_of(response) == [(constants.SUCCESS, "Registered Dosing Line (press) at revision 1.")]
    assert Project.objects.get().path == "line3/press.xml"
    assert sorted(p for p in root.rglob("*") if p.is_file()) == [root / "line3" / "press.xml"]


def test_binding_a_path_outside_the_root_shows_the_error_on_the_form(operator_client, root, tmp_path):
    (tmp_path / "x.xml").write_bytes(fixture_bytes(STEPS))

    response = operator_client.post(reverse(BIND), {"slug": "press", "name": "", "path": "../x.xml"})

    assert response.status_code == 200
    assert form_errors(response) == [f"../x.xml is not inside the projects root {root}; put the file there first."]
    assert not Project.objects.exists()


# --- export ----------------------------------------------------------------------------------------


def test_the_changelist_links_each_project_to_its_export(operator_client):
    project = do_import_project(fixture_bytes(STEPS), slug="steps", acting_user="tests")

    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    assert f'<a href="{reverse("admin:projects_project_export", args=[project.pk])}">download</a>' in page


def test_the_export_link_downloads_the_exact_bytes_as_an_attachment(operator_client):
    project = do_import_project(fixture_bytes(STEPS), slug="steps", acting_user="tests")

    response = operator_client.get(reverse("admin:projects_project_export", args=[project.pk]))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/xml"
    assert response["Content-Disposition"] == 'attachment; filename="steps.xml"'
    assert response.content == fixture_bytes(STEPS)


def test_the_export_of_an_unknown_project_is_404(operator_client):
    response = operator_client.get(reverse("admin:projects_project_export", args=[999]))

    assert response.status_code == 404


def test_the_import_screen_sends_a_visitor_who_is_not_logged_in_to_the_login_page(client):
    response = client.get(reverse(IMPORT))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


# --- no add, no delete -----------------------------------------------------------------------------


def test_the_add_screen_is_forbidden(operator_client):
    assert operator_client.get(reverse("admin:projects_project_add")).status_code == 403


def test_the_delete_screen_is_forbidden_and_the_project_stays(operator_client):
    project = do_import_project(fixture_bytes(STEPS), slug="steps", acting_user="tests")

    response = operator_client.post(reverse("admin:projects_project_delete", args=[project.pk]), {"post": "yes"})

    assert response.status_code == 403
    assert Project.objects.filter(pk=project.pk).exists()


def test_the_changelist_offers_no_bulk_action_so_no_bulk_delete(operator_client):
    do_import_project(fixture_bytes(STEPS), slug="steps", acting_user="tests")

    response = operator_client.get(reverse(CHANGELIST))

    assert response.context["action_form"] is None
    assert "delete_selected" not in response.content.decode()


def test_the_change_screen_lets_the_operator_edit_only_the_name(operator_client):
    project = do_import_project(fixture_bytes(STEPS), slug="steps", acting_user="tests")

    response = operator_client.get(reverse("admin:projects_project_change", args=[project.pk]))

    assert set(response.context["adminform"].form.fields) == {"name"}
