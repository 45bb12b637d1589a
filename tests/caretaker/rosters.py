"""Rosters for the caretaker's tests: another caretaker's CA that signs them, and the ways an attacker would
alter one (each must be refused)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from caretaker import ca, roster

NOW = datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class Elsewhere:
    """The team CA of another caretaker: it signs rosters this server did not sign."""

    key: Ed25519PrivateKey
    certificate: x509.Certificate
    pem: bytes

    @classmethod
    def create(cls, common_name: str = "Other Team CA") -> Elsewhere:
        key_pem, cert_pem = ca.create_ca("ed25519", common_name=common_name)
        key = serialization.load_pem_private_key(key_pem, password=None)
        assert isinstance(key, Ed25519PrivateKey)
        return cls(key, x509.load_pem_x509_certificate(cert_pem), cert_pem)

    def sign(
        self, sequence: int, *, peers: tuple[str, ...] = ("alice@team",), signed: datetime = NOW, days: int = 30
    ) -> roster.Roster:
        return roster.sign_roster(
            [roster.Peer(name, fingerprint_of(name), "author", "") for name in peers],
            [],
            sequence_number=sequence,
            signed_ts=signed,
            expires=signed + timedelta(days=days),
            ca_key=self.key,
            ca_certificate=self.certificate,
        )


def fingerprint_of(name: str) -> str:
    return hashlib.sha256(name.encode()).digest().hex(":")


def write_pair(folder: Path, signed: roster.Roster, stem: str = "") -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    peers, revoked = folder / f"{stem}peers.toml", folder / f"{stem}revoked.toml"
    peers.write_bytes(signed.peers_toml)
    revoked.write_bytes(signed.revoked_toml)
    return peers, revoked


def tampered_peer(signed: roster.Roster) -> roster.Roster:
    peers = signed.peers_toml.replace(b'name = "alice@team"', b'name = "mallory@team"')
    assert peers != signed.peers_toml
    return roster.Roster(signed.meta, signed.peers, signed.revoked, peers, signed.revoked_toml)


def tampered_meta(signed: roster.Roster) -> roster.Roster:
    peers = signed.peers_toml.replace(b"sequence_number = 4\n", b"sequence_number = 40\n")
    assert peers != signed.peers_toml
    return roster.Roster(signed.meta, signed.peers, signed.revoked, peers, signed.revoked_toml)


def without_signature(signed: roster.Roster) -> roster.Roster:
    peers = re.sub(rb"(?m)^signature_b64 = .*\n", b"", signed.peers_toml)
    return roster.Roster(signed.meta, signed.peers, signed.revoked, peers, signed.revoked_toml)
