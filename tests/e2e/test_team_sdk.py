"""The team's certificates end to end: the official SDK client against a live caretaker deployment, the
caretaker approving through the operator REST API by typing the key's memorable ID, the signed roster read
back and verified afterwards.

The deployment runs with FORGE_OVERRIDE_SECURITIES=1, its CA, roster and trust store in its own data dir; the
CA is created and the caretaker switched on by the same functions the console calls (a `manage.py shell`).
"""

from __future__ import annotations

import base64
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from mcp.client import Client

from caretaker import roster
from caretaker.randomart import key_art
from tests.caretaker.conftest import csr_for, new_key
from tests.live import ROOT, LiveServer, manage, prepare, run_server, scratch_database, streamable_client
from tests.team_tls import SWITCH_ON

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 60
PEER = "alice@team"
ROTATE_PREFIX = b"forge-rotate-cert:"

ENROLL = """
from caretaker import services
services.do_create_peer({name!r}, role="author", endpoint="https://alice-ws.factory:7531", actor="live")
print(services.do_mint_code({name!r}, actor="live").raw)
"""


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("team")
    settings = {
        "FORGE_OVERRIDE_SECURITIES": "1",
        "FORGE_CA_DIR": str(data_dir / "team-ca"),
        "FORGE_ROSTER_DIR": str(data_dir / "roster"),
        "FORGE_TRUST_DIR": str(data_dir / "trust"),
    }
    with scratch_database() as database:
        env, token = prepare(data_dir, **database, **settings)
        assert manage(env, "shell", "-c", SWITCH_ON).strip().splitlines()[-1] == "active"
        operator_token = manage(env, "create_operator_token", "live").strip().splitlines()[-1]
        with run_server(env, token, data_dir) as server:
            server.operator_token = operator_token  # type: ignore[attr-defined]
            yield server


def enrollment_code(server: LiveServer, name: str) -> str:
    return server.manage("shell", "-c", ENROLL.format(name=name)).strip().splitlines()[-1]


def approve(server: LiveServer, pending_id: str, typed_id: str) -> httpx.Response:
    """The caretaker approves over the operator REST API, typing the key's memorable ID."""
    return httpx.post(
        f"{server.base}/api/confirmations/{pending_id}/approve",
        json={"typed_id": typed_id},
        headers={"Authorization": f"Bearer {server.operator_token}"},  # type: ignore[attr-defined]
        timeout=30,
    )


async def structured(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return (await client.call_tool(tool, arguments)).structured_content


def rotation_proof(old_key: Any, csr_pem: str) -> str:
    """The new CSR's DER bytes after the rotation prefix, signed with the current (Ed25519) key."""
    der = x509.load_pem_x509_csr(csr_pem.encode()).public_bytes(serialization.Encoding.DER)
    return base64.b64encode(old_key.sign(ROTATE_PREFIX + der)).decode()


def roster_verify_command(server: LiveServer, folder: Path) -> subprocess.CompletedProcess[str] | None:
    """`manage.py roster_verify` on the exported files, where that command exists in this checkout."""
    if not (ROOT / "caretaker" / "management" / "commands" / "roster_verify.py").exists():
        return None
    return subprocess.run(
        [sys.executable, "manage.py", "roster_verify", str(folder / "peers.toml"), str(folder / "revoked.toml")],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_request_approve_by_memorable_id_rotate_and_export_over_the_sdk(team_server, tmp_path):
    server = team_server
    code = await anyio.to_thread.run_sync(enrollment_code, server, PEER)
    first_key, second_key = new_key(), new_key()
    first_art, second_art = key_art(first_key.public_key()), key_art(second_key.public_key())
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            proposed = await structured(
                client, "team.request_cert", {"enrollment_code": code, "csr": csr_for(first_key)}
            )
            approved = await anyio.to_thread.run_sync(approve, server, proposed["pending_id"], first_art.memorable_id)
            issued = await structured(client, "editor.confirm", {"pending_id": proposed["pending_id"]})
            reused = await structured(client, "team.request_cert", {"enrollment_code": code, "csr": csr_for(new_key())})

            new_csr = csr_for(second_key)
            rotation = await structured(
                client,
                "team.rotate_cert",
                {"peer": PEER, "csr": new_csr, "proof": rotation_proof(first_key, new_csr)},
            )
            rotated_approval = await anyio.to_thread.run_sync(
                approve, server, rotation["pending_id"], second_art.memorable_id
            )
            rotated = await structured(client, "editor.confirm", {"pending_id": rotation["pending_id"]})
            peers = await structured(client, "team.list_peers", {})
            setup = await structured(client, "team.export_setup", {})

    assert {"team.request_cert", "team.rotate_cert", "team.export_setup", "team.list_peers"} <= set(tools)

    # The request waits for the caretaker, who approves by the key's memorable ID; the client gets the rest.
    assert proposed["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", proposed
    assert proposed["memorable_id"] == first_art.memorable_id
    assert approved.status_code == 200, approved.text
    assert issued["state"] == "executed", issued
    first = issued["result"]
    certificate = x509.load_pem_x509_certificate(first["certificate"].encode())
    assert certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == PEER
    assert (first["memorable_id"], first["randomart"]) == (first_art.memorable_id, first_art.randomart)
    assert first["serial"] == format(certificate.serial_number, "x")

    # The code works once.
    assert reused["error"] == "FORGE_ERR_ENROLLMENT_CODE", reused

    # Rotation issues the new certificate and revokes the old serial in the same roster.
    assert rotation["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", rotation
    assert rotated_approval.status_code == 200, rotated_approval.text
    assert rotated["state"] == "executed", rotated
    second = rotated["result"]
    assert second["memorable_id"] == second_art.memorable_id
    assert second["revoked_serial"] == first["serial"] != second["serial"]
    [listed] = peers["peers"]
    assert (listed["name"], listed["serial"], listed["revoked"]) == (PEER, second["serial"], False)
    assert listed["memorable_id"] == second_art.memorable_id

    # The exported roster verifies against the exported CA, and names the old serial as revoked.
    team_ca = x509.load_pem_x509_certificate(setup["ca_certificate"].encode())
    checked = roster.verify_roster(
        setup["peers_toml"].encode(), setup["revoked_toml"].encode(), trusted=[team_ca], now=datetime.now(UTC)
    )
    assert checked.meta.sequence_number == 2
    assert [(p.name, p.fingerprint_sha256) for p in checked.peers] == [(PEER, second["fingerprint_sha256"])]
    assert [r.serial for r in checked.revoked] == [first["serial"]]
    on_disk = server.data_dir / "roster"
    assert (on_disk / "peers.toml").read_text() == setup["peers_toml"]
    assert (on_disk / "revoked.toml").read_text() == setup["revoked_toml"]
    (tmp_path / "peers.toml").write_text(setup["peers_toml"])
    (tmp_path / "revoked.toml").write_text(setup["revoked_toml"])
    done = roster_verify_command(server, tmp_path)
    if done is not None:
        assert done.returncode == 0, done.stdout + done.stderr


async def test_a_wrong_typed_id_over_rest_is_refused_and_the_request_stays_pending(team_server):
    server = team_server
    code = await anyio.to_thread.run_sync(enrollment_code, server, "bob@team")
    key = new_key()
    with anyio.fail_after(BOUND):
        async with streamable_client(server, mode="legacy") as client:
            proposed = await structured(client, "team.request_cert", {"enrollment_code": code, "csr": csr_for(key)})
            refused = await anyio.to_thread.run_sync(approve, server, proposed["pending_id"], "not-the-right-id")
            pending = await structured(client, "editor.confirm", {"pending_id": proposed["pending_id"]})

    assert refused.status_code == 400, refused.text
    assert "FORGE_ERR_TYPED_ID_MISMATCH" in refused.text, refused.text
    assert pending["state"] == "pending", pending
