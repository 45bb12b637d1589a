"""`manage.py import_project` and `export_project`: thin wrappers over the registration and export
functions, refusing with a CommandError that says what is wrong."""

from __future__ import annotations

import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent, EventKind
from projects.models import Project
from tests.projects.conftest import INVALID, MAIN, SMALL, fixture_bytes, fixture_path

STEPS = fixture_path(MAIN)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def steps() -> Project:
    run("import_project", str(STEPS), "--slug", "steps")
    return Project.objects.get(slug="steps")


# --- import_project --------------------------------------------------------------------------------


def test_import_project_copies_the_file_under_the_root_and_says_so(root):
    output = run("import_project", str(STEPS), "--slug", "steps")

    assert output == "Registered steps (Dosing Line) at steps.xml, revision 1.\n"
    assert (root / "steps.xml").read_bytes() == fixture_bytes(MAIN)


def test_import_project_registers_the_project_as_manage_py():
    run("import_project", str(STEPS), "--slug", "steps", "--name", "Line 3 press")

    project = Project.objects.get()
    assert (project.slug, project.name, project.accepted_revision) == ("steps", "Line 3 press", 1)
    [event] = AuditEvent.objects.filter(kind=EventKind.PROJECT_REGISTERED)
    assert event.called_by == "manage.py"
    assert event.arguments["how"] == "import"


def test_import_project_with_bind_registers_a_file_under_the_root_in_place(root):
    target = root / "line3" / "press.xml"
    target.parent.mkdir()
    shutil.copyfile(STEPS, target)

    output = run("import_project", str(target), "--slug", "press", "--bind")

    assert output == "Registered press (Dosing Line) at line3/press.xml, revision 1.\n"
    assert sorted(p for p in root.rglob("*") if p.is_file()) == [target]


def test_import_project_of_a_schema_invalid_file_is_a_command_error_naming_the_line(root):
    with pytest.raises(CommandError) as refused:
        run("import_project", str(fixture_path(INVALID)), "--slug", "checker")

    assert str(refused.value).startswith("the file is not valid against the TC6 2.01 schema: line 8: ")
    assert not Project.objects.exists()
    assert list(root.iterdir()) == []


def test_import_project_of_a_missing_file_is_a_command_error_saying_it_cannot_be_read(tmp_path):
    missing = tmp_path / "missing.xml"

    with pytest.raises(CommandError) as refused:
        run("import_project", str(missing), "--slug", "missing")

    assert str(refused.value) == f"cannot read {missing}: No such file or directory"


def test_import_project_with_bind_of_a_missing_file_is_a_command_error(root):
    with pytest.raises(CommandError) as refused:
        run("import_project", str(root / "missing.xml"), "--slug", "missing", "--bind")

    assert str(refused.value) == f"cannot read {root / 'missing.xml'}: No such file or directory"


def test_import_project_with_bind_of_a_file_outside_the_root_is_a_command_error(root):
    with pytest.raises(CommandError) as refused:
        run("import_project", str(STEPS), "--slug", "steps", "--bind")

    assert str(refused.value) == f"{STEPS} is not inside the projects root {root}; put the file there first."
    assert not Project.objects.exists()


def test_import_project_without_a_slug_is_a_command_error_naming_the_option():
    with pytest.raises(CommandError, match="the following arguments are required: --slug"):
        run("import_project", str(STEPS))


@pytest.mark.parametrize("slug", ["line3/press", "Line 3 press", ""])
def test_import_project_under_a_slug_that_is_not_a_slug_is_a_command_error_and_writes_nothing(root, slug):
    with pytest.raises(CommandError):
        run("import_project", str(STEPS), "--slug", slug)

    assert not Project.objects.exists()
    assert list(root.iterdir()) == []


def test_import_project_under_a_slug_that_is_taken_is_a_command_error(steps):
    with pytest.raises(CommandError) as refused:
        run("import_project", str(fixture_path(SMALL)), "--slug", "steps")

    assert str(refused.value) == "a project with the slug 'steps' exists already; choose another slug."


# --- export_project --------------------------------------------------------------------------------


def test_export_project_with_output_writes_the_exact_bytes(steps, tmp_path):
    target = tmp_path / "out" / "steps-export.xml"

    run("export_project", "steps", "-o", str(target))

    assert target.read_bytes() == fixture_bytes(MAIN)


def test_export_project_with_output_reports_what_it_wrote_on_stderr(steps, tmp_path):
    target = tmp_path / "steps-export.xml"
    err = StringIO()

    call_command("export_project", "steps", "-o", str(target), stdout=StringIO(), stderr=err)

    assert err.getvalue() == f"Wrote {target} ({len(fixture_bytes(MAIN))} bytes).\n"


def test_export_project_without_output_writes_the_exact_bytes_to_stdout(steps, capsysbinary):
    call_command("export_project", "steps")

    assert capsysbinary.readouterr().out == fixture_bytes(MAIN)


def test_export_project_of_an_unknown_project_is_a_command_error_naming_import_project():
    with pytest.raises(CommandError) as refused:
        run("export_project", "nowhere")

    assert str(refused.value) == "No project 'nowhere'; 'python manage.py import_project' registers one."
