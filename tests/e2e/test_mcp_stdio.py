"""`manage.py mcp_stdio`: the official SDK client over stdio, through the bridge, to a live server; over HTTPS
with a team member's certificate (the dashboard's Claude Code configuration, run as written) the session is the
peer's, and a wrong file is a one-line refusal."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from cryptography import x509
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from caretaker.ca import cert_fingerprint
from console.site import MemberFiles, mtls_configurations
from tests.live import INITIALIZE, ROOT, LiveServer, server_env
from tests.team_tls import Member, issue_live, new_member_key, server_cert, tls_team_server

pytestmark = [pytest.mark.live, pytest.mark.anyio]


async def test_an_sdk_stdio_client_lists_and_calls_tools_through_the_bridge(forge_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(forge_server.token)
    token_file.chmod(0o600)
    bridge = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_stdio", "--url", forge_server.mcp_url, "--token-file", str(token_file)],
        env=forge_server.env,
        cwd=str(ROOT),
    )
    with anyio.fail_after(30):
        async with Client(stdio_client(bridge), mode="legacy") as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            status = (await client.call_tool("session.status", {})).structured_content

    assert "server_info" in tools
    assert status["transport"] == "streamable-http"
    assert status["session_id"]


def test_the_bridge_refuses_to_start_without_a_token(forge_server):
    env = {key: value for key, value in forge_server.env.items() if key != "FORGE_MCP_TOKEN"}
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio", "--url", forge_server.mcp_url],
        cwd=ROOT,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert "--token-file" in done.stderr


def test_the_bridge_relays_unreadable_lines_and_relays_the_servers_refusals(forge_server):
    lines = [
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", '
        b'"capabilities": {}, "clientInfo": {"name": "\xed\xa0\x80", "version": "1"}}}',
        b'{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": NaN}}',
        b"\xff\xfe not UTF-8",
    ]
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio", "--url", forge_server.mcp_url],
        cwd=ROOT,
        env={**forge_server.env, "FORGE_MCP_TOKEN": forge_server.token},
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(answer["id"], answer["error"]["code"]) for answer in answers] == [
        (1, -32602),
        (None, -32700),
        (None, -32700),
    ]


# --- over HTTPS, with a team member's certificate -------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[LiveServer]:
    """A live server serving HTTPS beside HTTP, the caretaker active with a team CA in the trust store."""
    # P-256 is the quicker server key to make.
    with tls_team_server(tmp_path_factory.mktemp("tls-stdio"), FORGE_TLS_KEY_TYPE="p256") as server:
        yield server


@pytest.fixture(scope="module")
def alice(tls_server, tmp_path_factory) -> Member:
    return issue_live(tls_server, tmp_path_factory.mktemp("alice"), "alice")


def member_files(server: LiveServer, member: Member) -> MemberFiles:
    return MemberFiles(cert=str(member.cert_path), key=str(member.key_path), ca=str(server_cert(server)))


def bridge_command(server: LiveServer, member: Member) -> list[str]:
    """The mcp_stdio command of the dashboard's Claude Code configuration, with the member's files, run here."""
    claude_code = mtls_configurations(f"{server.tls_base}/mcp", member_files(server, member))["mtls_claude_code"]
    words = shlex.split(claude_code)
    command = words[words.index("--") + 1 :]
    assert command[:3] == ["python", "/path/to/forge-mcp/manage.py", "mcp_stdio"]
    return [sys.executable, "manage.py", *command[2:]]


def member_env(tmp_path: Path) -> dict[str, str]:
    """The member's machine: a Forge checkout with a data dir of its own and no client token."""
    env = server_env(tmp_path / "member-machine")
    env.pop("FORGE_MCP_TOKEN", None)
    return env


async def test_the_bridge_presents_a_team_certificate_and_the_session_belongs_to_the_peer(tls_server, alice, tmp_path):
    command = bridge_command(tls_server, alice)
    bridge = StdioServerParameters(command=command[0], args=command[1:], env=member_env(tmp_path), cwd=str(ROOT))

    with anyio.fail_after(60):
        async with Client(stdio_client(bridge), mode="legacy") as client:
            status = (await client.call_tool("session.status", {})).structured_content
            info = (await client.call_tool("server_info", {})).structured_content

    assert status["owner"] == "peer:alice"
    assert status["transport"] == "streamable-http"
    assert status["session_id"]
    assert info["mtls"] is True
    assert info["tls"]["port"] == tls_server.tls_port
    assert info["tls"]["certificate"]["fingerprint_sha256"] == fingerprint_of(server_cert(tls_server))


async def test_the_bridge_with_only_the_servers_certificate_uses_https_with_the_token(tls_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(tls_server.token)
    token_file.chmod(0o600)
    args = ["manage.py", "mcp_stdio", "--url", f"{tls_server.tls_base}/mcp", "--token-file", str(token_file)]
    args += ["--ca", str(server_cert(tls_server))]
    bridge = StdioServerParameters(command=sys.executable, args=args, env=member_env(tmp_path), cwd=str(ROOT))

    with anyio.fail_after(60):
        async with Client(stdio_client(bridge), mode="legacy") as client:
            status = (await client.call_tool("session.status", {})).structured_content

    assert status["owner"] == "live"
    assert status["session_id"]


def test_the_bridge_names_a_server_certificate_it_cannot_check(tls_server, alice, tmp_path):
    command = bridge_command(tls_server, alice)
    command[command.index("--ca") + 1] = str(alice.cert_path)  # not the server's certificate
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=member_env(tmp_path),
        input=json.dumps(INITIALIZE) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["error"]["code"] == -32603
    assert "failed the certificate check" in answer["error"]["message"]
    assert "--ca" in answer["error"]["message"]


def test_the_dashboards_mtls_curl_and_python_sdk_configurations_work_against_the_server(tls_server, alice, tmp_path):
    configurations = mtls_configurations(f"{tls_server.tls_base}/mcp", member_files(tls_server, alice))

    curl = subprocess.run(
        ["bash", "-c", configurations["mtls_curl"] + " --silent --show-error --include"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    sdk = subprocess.run(
        [sys.executable, "-c", configurations["mtls_python_sdk"]],
        env=member_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert curl.returncode == 0, curl.stderr
    assert curl.stdout.startswith("HTTP/1.1 200")
    assert '"protocolVersion":"2025-11-25"' in curl.stdout.replace(" ", "")
    assert sdk.returncode == 0, sdk.stderr
    assert "'owner': 'peer:alice'" in sdk.stdout


def run_bridge(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio", *args],
        cwd=ROOT,
        env=member_env(tmp_path),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_bridge_refuses_a_key_that_is_not_the_certificates_saying_so(alice, tmp_path):
    other_key, _ = new_member_key(tmp_path, "mallory")

    done = run_bridge(
        tmp_path, "--url", "https://127.0.0.1:1/mcp", "--cert", str(alice.cert_path), "--key", str(other_key)
    )

    assert done.returncode != 0
    assert f"--key {other_key} is not the key of the certificate in --cert {alice.cert_path}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--cert", "{missing}", "--key", "{key}"], "cannot read --cert {missing}: No such file or directory"),
        (["--cert", "{cert}"], "--cert and --key go together"),
        (["--ca", "{key}"], "--ca {key} holds no PEM certificate"),
        (["--cert", "{key}", "--key", "{key}"], "--cert {key} is not a PEM certificate"),
        (["--cert", "{cert}", "--key", "{cert}"], "--key {cert} is not a PEM private key"),
    ],
)
def test_the_bridge_says_which_tls_file_is_wrong(alice, tmp_path, options, said):
    names = {"missing": str(tmp_path / "missing.crt"), "key": str(alice.key_path), "cert": str(alice.cert_path)}

    done = run_bridge(tmp_path, "--url", "https://127.0.0.1:1/mcp", *[option.format(**names) for option in options])

    assert done.returncode != 0
    assert said.format(**names) in done.stderr
    assert "Traceback" not in done.stderr


def test_the_bridge_refuses_tls_files_for_a_plain_http_url(alice, tmp_path):
    done = run_bridge(
        tmp_path, "--url", "http://127.0.0.1:1/mcp", "--cert", str(alice.cert_path), "--key", str(alice.key_path)
    )

    assert done.returncode != 0
    assert "are for an https:// URL" in done.stderr


def fingerprint_of(path: Path) -> str:
    return cert_fingerprint(x509.load_pem_x509_certificate(path.read_bytes()))
