"""A team of the caretaker's own for each test: its CA, roster and trust store in the test's folder, a console
user who may act as caretaker, and helpers that make real keys and CSRs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.contrib.auth.models import Permission, User

from caretaker import activation, services
from caretaker.models import ACCEPTANCE_SENTENCE


@dataclass(frozen=True)
class Team:
    folder: Path
    caretaker: User


@pytest.fixture
def team(settings, tmp_path, db) -> Team:
    """Override mode on, the caretaker's folders in this test's tmp_path, and a caretaker user (no CA yet)."""
    settings.FORGE_OVERRIDE_SECURITIES = True
    settings.FORGE_CA_DIR = tmp_path / "secrets" / "team-ca"
    settings.FORGE_TRUST_DIR = tmp_path / "trust"
    settings.FORGE_ROSTER_DIR = tmp_path / "roster"
    user = User.objects.create_user("cora", password="cora-password-123", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="act_as_caretaker"),
        Permission.objects.get(codename="decide_confirmation"),
    )
    return Team(tmp_path, User.objects.get(pk=user.pk))


@pytest.fixture
def active(team) -> Team:
    """The caretaker active: an Ed25519 team CA and the sentence typed."""
    services.do_create_ca("ed25519", actor="cora")
    activation.do_activate(team.caretaker, ACCEPTANCE_SENTENCE)
    assert activation.is_caretaker()
    return team


def new_key(kind: str = "ed25519"):
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if kind.startswith("rsa"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(kind[3:]))
    return ec.generate_private_key(ec.SECP256R1())


def csr_for(key, *, common_name: str = "whoever") -> str:
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, common_name)]))
        .sign(key, algorithm)
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()
