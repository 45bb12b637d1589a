"""Team members with real certificates, for the TLS and mTLS tests: the caretaker's own functions issue and
revoke them (in this process, or in a live server's data dir through `manage.py shell`), and the files a client
presents (key and certificate PEM) are written where a test can hand them to curl, openssl or httpx."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.caretaker.conftest import csr_for
from tests.live import LiveServer, manage, prepare, run_server, scratch_database

# Run in a live server's data dir (manage.py shell -c): the caretaker switched on with an Ed25519 team CA.
SWITCH_ON = """
from django.contrib.auth.models import Permission, User
from caretaker import activation, services
from caretaker.models import ACCEPTANCE_SENTENCE
user = User.objects.get(username="live")
user.user_permissions.add(Permission.objects.get(codename="act_as_caretaker"))
user = User.objects.get(pk=user.pk)
services.do_create_ca("ed25519", actor="live")
activation.do_activate(user, ACCEPTANCE_SENTENCE)
print("active" if activation.is_caretaker() else "inactive: " + " ".join(activation.missing()))
"""

ISSUE = """
import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from django.contrib.auth.models import User
from caretaker import services
from caretaker.models import Peer
user = User.objects.get(username={caretaker!r})
if not Peer.objects.filter(name={name!r}).exists():
    services.do_create_peer({name!r}, role={role!r}, actor=user.username)
proposal = services.propose_issuance({csr!r}, peer_name={name!r}, requested_by=user.username)
outcome = services.carry_out_now(proposal, user=user, typed_id=proposal.key_memorable_id)
print(json.dumps(outcome.settled))
"""

REVOKE = """
import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from django.contrib.auth.models import User
from caretaker import services
user = User.objects.get(username={caretaker!r})
proposal = services.propose_revocation({name!r}, {reason!r}, requested_by=user.username)
outcome = services.carry_out_now(proposal, user=user, typed_id=proposal.key_memorable_id)
print(json.dumps(outcome.settled))
"""


def client_context(member: Member | None, server_cert: Path) -> ssl.SSLContext:
    """A client's TLS context: the server checked against its certificate, `member`'s certificate presented."""
    context = ssl.create_default_context(cafile=str(server_cert))
    if member is not None:
        context.load_cert_chain(str(member.cert_path), str(member.key_path))
    return context


@dataclass(frozen=True)
class Member:
    """A team member's client files: its private key and certificate (PEM), and what the caretaker issued."""

    name: str
    key_path: Path
    cert_path: Path
    serial: str
    fingerprint_sha256: str
    memorable_id: str  # of the certified key: what a caretaker types to approve its revocation

    @property
    def cert_pem(self) -> str:
        return self.cert_path.read_text()


def new_member_key(folder: Path, name: str) -> tuple[Path, str]:
    """A P-256 key for `name` written 0600 under `folder`, and a CSR for it."""
    key = ec.generate_private_key(ec.SECP256R1())
    folder.mkdir(parents=True, exist_ok=True)
    key_path = folder / f"{name.replace('@', '_')}.key"
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return key_path, csr_for(key, common_name=name)


def member_from_result(folder: Path, name: str, key_path: Path, result: dict) -> Member:
    cert_path = folder / f"{name.replace('@', '_')}.crt"
    cert_path.write_text(result["certificate"])
    return Member(name, key_path, cert_path, result["serial"], result["fingerprint_sha256"], result["memorable_id"])


def issue_live(server, folder: Path, name: str, *, role: str = "author", caretaker: str = "live") -> Member:
    """Register `name` (if new) and issue it a certificate in a live server's data dir, as the caretaker would."""
    key_path, csr = new_member_key(folder, name)
    out = server.manage("shell", "-c", ISSUE.format(caretaker=caretaker, name=name, role=role, csr=csr))
    return member_from_result(folder, name, key_path, json.loads(out.strip().splitlines()[-1]))


def revoke_live(server, name: str, *, reason: str = "key lost", caretaker: str = "live") -> dict:
    out = server.manage("shell", "-c", REVOKE.format(caretaker=caretaker, name=name, reason=reason))
    return json.loads(out.strip().splitlines()[-1])


def issue_here(caretaker, folder: Path, name: str, *, role: str = "author") -> Member:
    """The same as `issue_live`, in this process's database (the caretaker active, e.g. the `active` fixture)."""
    from caretaker import services
    from caretaker.models import Peer

    key_path, csr = new_member_key(folder, name)
    if not Peer.objects.filter(name=name).exists():
        services.do_create_peer(name, role=role, actor=caretaker.username)
    proposal = services.propose_issuance(csr, peer_name=name, requested_by=caretaker.username)
    outcome = services.carry_out_now(proposal, user=caretaker, typed_id=proposal.key_memorable_id)
    assert outcome.verified, outcome.detail
    return member_from_result(folder, name, key_path, outcome.settled)


def revoke_here(caretaker, name: str, *, reason: str = "key lost") -> None:
    from caretaker import services

    proposal = services.propose_revocation(name, reason, requested_by=caretaker.username)
    outcome = services.carry_out_now(proposal, user=caretaker, typed_id=proposal.key_memorable_id)
    assert outcome.verified, outcome.detail


@contextmanager
def tls_team_server(data_dir: Path, **env: str) -> Iterator[LiveServer]:
    """A live server serving HTTPS beside HTTP in override mode, its caretaker active with a team CA in the trust
    store (the data dir's own folders), and an operator token for the caretaker's REST approvals."""
    with scratch_database() as database:
        server_env, token = prepare(data_dir, **database, FORGE_OVERRIDE_SECURITIES="1", **env)
        assert manage(server_env, "shell", "-c", SWITCH_ON).strip().splitlines()[-1] == "active"
        operator_token = manage(server_env, "create_operator_token", "live").strip().splitlines()[-1]
        with run_server(server_env, token, data_dir, tls=True) as server:
            server.operator_token = operator_token  # type: ignore[attr-defined]
            yield server


def server_cert(server: LiveServer) -> Path:
    """The certificate the live server's HTTPS listener made for itself."""
    return server.data_dir / "secrets" / "tls" / "server.crt"
