"""Two deployments bound to one project file: the dashboard warns (advisory), naming the project; a file no other
live deployment binds, or one bound by a deployment whose process is gone, raises no warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from forge_core import instances
from projects import writers
from projects.models import Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment(settings, tmp_path, monkeypatch) -> Path:
    """This deployment: its data folder, projects root and a runtime folder of its own for the test."""
    settings.FORGE_DATA_DIR = tmp_path / "data"
    settings.FORGE_PROJECTS_ROOT = tmp_path / "projects"
    settings.FORGE_PROJECTS_ROOT.mkdir()
    monkeypatch.setenv("FORGE_RUNTIME_DIR", str(tmp_path / "runtime"))
    Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)
    Project.objects.create(slug="press", name="Press", path="press.xml", fingerprint="0" * 64)
    return settings.FORGE_PROJECTS_ROOT


def another_deployment_binds(files: list[Path], pid: int) -> None:
    """The binding record another running deployment (another data folder) publishes."""
    other = Path("/elsewhere/forge-data")
    runtime = instances.private_folder(instances.runtime_dir())
    record = {
        "format": instances.FORMAT,
        "pid": pid,
        "data_fingerprint": instances.data_fingerprint(other),
        "files": [instances.file_digest(file) for file in files],
    }
    instances.write_record(runtime / f"{instances.data_fingerprint(other)[:32]}-{pid}.json", record)


def dashboard_of(client, cast) -> str:
    client.force_login(cast.operator.user)
    response = client.get(reverse("admin:index"))
    assert response.status_code == 200
    return response.content.decode()


def test_a_file_another_running_deployment_binds_is_named_on_the_dashboard(client, cast, deployment):
    writers.publish()  # this deployment's own record: never counted against itself
    another_deployment_binds([deployment / "line-3.xml", deployment / "elsewhere.xml"], os.getppid())

    page = dashboard_of(client, cast)

    assert 'id="two-writers"' in page
    assert "<strong>line-3</strong>" in page
    assert "<strong>press</strong>" not in page
    assert "also bound by 1 other deployment" in page


def test_no_warning_without_another_live_deployment_on_the_same_file(client, cast, deployment):
    writers.publish()
    another_deployment_binds([deployment / "other.xml"], os.getppid())
    assert 'id="two-writers"' not in dashboard_of(client, cast)

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    another_deployment_binds([deployment / "line-3.xml"], int(done.stdout))  # a crashed deployment's record
    assert 'id="two-writers"' not in dashboard_of(client, cast)
    assert [json.loads(p.read_text())["pid"] for p in instances.runtime_dir().glob("*.json")].count(
        int(done.stdout)
    ) == 0
