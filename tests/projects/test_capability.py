"""The executor's adapter for project files checks, before each step of a change, that the project is still
registered at the identity's path: inside one change against the row that change read (once), never against a
row another change read."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from forge_core.capabilities import TargetMissing
from projects.capability import ProjectFileCapability
from projects.models import Project
from projects.services import do_import_project
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(root: Path) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug="steps", acting_user="tests")


def project_reads(queries: CaptureQueriesContext) -> int:
    return sum('FROM "projects_project"' in query["sql"] for query in queries.captured_queries)


def test_the_steps_of_one_change_read_the_registration_once(project):
    adapter = ProjectFileCapability()

    with CaptureQueriesContext(connection) as queries, adapter.one_change():
        identity = adapter.identity({"project": "steps"})
        content = adapter.read(identity).content
        adapter.write(identity, content, lambda step: None)
        adapter.read(identity)

    assert project_reads(queries) == 1


def test_a_registration_moved_after_one_change_is_refused_by_the_next(project):
    adapter = ProjectFileCapability()
    with adapter.one_change():
        identity = adapter.identity({"project": "steps"})
        adapter.read(identity)
    Project.objects.filter(pk=project.pk).update(path="elsewhere.xml")

    with adapter.one_change(), pytest.raises(TargetMissing, match="no longer registered at that path"):
        adapter.read(identity)


def test_outside_a_change_each_step_reads_the_registration(project):
    adapter = ProjectFileCapability()
    identity = adapter.identity({"project": "steps"})
    adapter.read(identity)
    Project.objects.filter(pk=project.pk).update(path="elsewhere.xml")

    with pytest.raises(TargetMissing, match="no longer registered at that path"):
        adapter.read(identity)


def test_a_change_inside_a_change_under_way_uses_its_reads(project):
    adapter = ProjectFileCapability()

    with CaptureQueriesContext(connection) as queries, adapter.one_change():
        identity = adapter.identity({"project": "steps"})
        with adapter.one_change():
            adapter.read(identity)
        adapter.read(identity)

    assert project_reads(queries) == 1
