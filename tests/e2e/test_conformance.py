"""The official MCP conformance suite and the MCP Inspector against a live server.

Both tools send no credentials, so they talk to the server through `tests.tools.auth_proxy`, which adds
the test token and forwards everything else (Host and Origin included) unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.live import ROOT, free_port, stop_process, wait_for_port

RUNNER = ROOT / "scripts" / "conformance.py"

pytestmark = [
    pytest.mark.live,
    pytest.mark.conformance,
    pytest.mark.skipif(shutil.which("npm") is None, reason="the conformance tools need Node.js and npm"),
    pytest.mark.skipif(
        os.environ.get("FORGE_TEST_CONFORMANCE", "1") == "0", reason="FORGE_TEST_CONFORMANCE=0 turns these off"
    ),
]


@pytest.fixture(scope="module")
def proxied(forge_server, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("proxy") / "token"
    token_file.write_text(forge_server.token)
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
            forge_server.base,
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


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    print(done.stdout[-4000:], done.stderr[-2000:])
    return done


def test_every_generic_conformance_scenario_passes(proxied):
    done = _run([sys.executable, str(RUNNER), "suite", "--generic", f"{proxied}/mcp"], timeout=900)
    assert done.returncode == 0, done.stdout
    assert "0 failed" in done.stdout.strip().splitlines()[-1]


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
