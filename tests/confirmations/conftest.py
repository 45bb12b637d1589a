"""Fixtures of the confirmations tests: a projects root in a temporary folder and a registered project."""

from __future__ import annotations

from pathlib import Path

import pytest

from projects.models import Project
from projects.services import do_import_project
from tests.projects.conftest import MAIN, fixture_bytes

FIXTURE_FILE = MAIN  # the project file the contracts of these tests change


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def project(db) -> Project:
    return do_import_project(fixture_bytes(FIXTURE_FILE), slug="steps", acting_user="tests")
