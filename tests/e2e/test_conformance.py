"""The official MCP conformance suite and the MCP Inspector against live servers.

Both tools send no credentials, so they talk to the server through `tests.tools.auth_proxy`, which adds
the test token and forwards everything else (Host and Origin included) unchanged. The deployment's own server
(`forge_server`) must pass every scenario that needs no named fixture; a second server started with the
conformance fixtures app (`tests.conformance_fixtures.settings`) must pass the suite's whole list.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.live import ROOT, LiveServer, free_port, prepare, run_server, scratch_database, stop_process, wait_for_port

RUNNER = ROOT / "scripts" / "conformance.py"
FIXTURE_SETTINGS = "tests.conformance_fixtures.settings"

pytestmark = [
    pytest.mark.live,
    pytest.mark.conformance,
    pytest.mark.skipif(shutil.which("npm") is None, reason="the conformance tools need Node.js and npm"),
    pytest.mark.skipif(
        os.environ.get("FORGE_TEST_CONFORMANCE", "1") == "0", reason="FORGE_TEST_CONFORMANCE=0 turns these off"
    ),
]


@contextmanager
def proxy_for(server: LiveServer, folder) -> Iterator[str]:
    token_file = folder / "token"
    token_file.write_text(server.token)
    token_file.chmod(0o600)
    port = free_port()
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.tools.auth_proxy",
            "--listen",
            str(port),
            "--target",
            server.base,
            "--token-file",
            str(token_file),
        ],
        cwd=ROOT,
    )
    try:
        wait_for_port(port, proxy)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proxy)


@pytest.fixture(scope="module")
def proxied(forge_server, tmp_path_factory):
    with proxy_for(forge_server, tmp_path_factory.mktemp("proxy")) as url:
        yield url


@pytest.fixture(scope="module")
def proxied_fixtures(tmp_path_factory):
    """A server of its own with the fixtures app. The suite opens a session per scenario and never ends one, and
    drops event streams without waiting for the server to see them go (it does at its next keep-alive), so its
    token may hold more sessions and streams than a deployment's defaults allow."""
    data_dir = tmp_path_factory.mktemp("conformance-fixtures")
    with scratch_database() as database:
        env, token = prepare(
            data_dir,
            DJANGO_SETTINGS_MODULE=FIXTURE_SETTINGS,
            FORGE_MAX_SESSIONS_PER_TOKEN="1000",
            FORGE_MAX_STREAMS_PER_TOKEN="1000",
            **database,
        )
        with run_server(env, token, data_dir) as server, proxy_for(server, data_dir) as url:
            yield url


def _run(args: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    print(done.stdout[-6000:], done.stderr[-2000:])
    return done


def _suite(url: str, *options: str, env: dict[str, str] | None = None) -> list[str]:
    done = _run([sys.executable, str(RUNNER), "suite", *options, f"{url}/mcp"], timeout=900, env=env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout
    assert lines[-1].startswith("conformance: ") and " 0 failed " in lines[-1], lines[-1]
    return [line.split()[1] for line in lines if line.startswith(("PASS", "FAIL"))]


def test_every_scenario_passes_with_the_fixtures_app(proxied_fixtures):
    passed = _suite(proxied_fixtures)
    # The whole list of 0.1.16 at 2025-11-25, fixtures and capabilities included.
    assert len(passed) >= 32
    assert {
        "tools-call-sampling",
        "tools-call-elicitation",
        "tools-call-with-progress",
        "prompts-get-with-image",
    } <= set(passed)


# The newest suite published when this was written, which also has the 2026-07-28 list. Each run takes about
# half a minute against the fixtures server.
NEWER_SUITE = "0.2.0-alpha.12"


@pytest.mark.parametrize(
    ("revision", "at_least", "scenarios"),
    [
        ("2025-11-25", 33, {"tools-call-sampling", "tools-call-elicitation", "json-schema-2020-12"}),
        (
            "2026-07-28",
            40,
            {
                "server-stateless",
                "http-custom-header-server-validation",
                "input-required-result-multi-round",
                "input-required-result-tampered-state",
                "input-required-result-non-tool-request",
            },
        ),
    ],
)
def test_every_scenario_of_the_newer_suite_passes_with_the_fixtures_app(
    proxied_fixtures, revision, at_least, scenarios
):
    env = {**os.environ, "FORGE_CONFORMANCE_VERSION": NEWER_SUITE, "FORGE_CONFORMANCE_SPEC": revision}
    passed = _suite(proxied_fixtures, env=env)
    assert len(passed) >= at_least
    assert scenarios <= set(passed)


def test_every_generic_and_capability_scenario_passes_without_the_fixtures(proxied):
    passed = _suite(proxied, "--without-fixtures")
    assert {"server-initialize", "tools-list", "logging-set-level", "resources-list", "prompts-list"} <= set(passed)


def test_inspector_lists_and_calls_tools_over_both_transports(proxied):
    done = _run(
        [
            sys.executable,
            str(RUNNER),
            "inspector",
            "--http",
            f"{proxied}/mcp",
            "--sse",
            f"{proxied}/sse",
            "--tool",
            "server_info",
        ],
        timeout=600,
    )
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "inspector: 4 passed, 0 failed (of 4)"
