"""The conformance fixtures app (tests/conformance_fixtures/) serves its tools only where it belongs: under
its own settings module, on a server that answers on loopback alone; the deployment's settings never install
it, so a deployment's tools, resources and prompts hold none of its names."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings as django_settings

from mcp_api import prompts, resources
from mcp_api.registry import REGISTRY
from tests.conformance_fixtures import apps, fixtures
from tests.live import ROOT


def test_the_deployment_settings_do_not_install_the_fixtures():
    assert not any("conformance_fixtures" in app for app in django_settings.INSTALLED_APPS)
    assert not {name for name, _, _ in fixtures.TOOLS} & set(REGISTRY)
    assert not {p.name for p in fixtures.PROMPTS} & set(prompts.PROMPTS)
    assert not {r.uri for r in fixtures.RESOURCES} & set(resources.OPEN_RESOURCES)


def test_the_fixtures_refuse_any_other_settings_module():
    assert "belongs to the conformance tests' settings" in (apps.refusal("forge_site.settings", []) or "")


def test_the_fixtures_refuse_a_server_answering_beyond_loopback():
    assert "loopback only" in (apps.refusal(apps.SETTINGS_MODULE, ["forge.example.com"]) or "")
    assert apps.refusal(apps.SETTINGS_MODULE, []) is None


@pytest.mark.parametrize("hosts", ["", "forge.example.com"])
def test_a_process_with_the_fixture_settings_starts_only_on_loopback(tmp_path, hosts):
    env = {"PATH": "/usr/bin:/bin", "FORGE_DATA_DIR": str(tmp_path), "FORGE_ALLOWED_HOSTS": hosts}
    env["DJANGO_SETTINGS_MODULE"] = apps.SETTINGS_MODULE
    code = "import django; django.setup(); from mcp_api.registry import REGISTRY; print('test_sampling' in REGISTRY)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if hosts:
        assert done.returncode != 0 and "loopback only" in done.stderr
    else:
        assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_the_fixture_image_and_audio_are_what_they_say():
    import base64
    import io
    import wave

    png = base64.b64decode(fixtures.RED_PIXEL)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    with wave.open(io.BytesIO(base64.b64decode(fixtures.SILENCE))) as audio:
        assert audio.getnchannels() == 1 and audio.getnframes() == 80
