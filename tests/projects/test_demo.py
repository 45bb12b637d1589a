"""The quickstart's demo project: built by the operation vocabulary, valid, registered once."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from projects import findings
from projects.demo import demo_project_bytes
from projects.models import Project
from projects.plcopen import documents


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
