"""This test process serving HTTPS, as `runmcp --tls-port` marks it: a real server certificate (P-256, made by
`access.tls` in the test's folder) recorded by `access.tls.mark_serving`, and forgotten again when the block
ends; and a team CA put in the trust store, which is what makes the listener ask for client certificates."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.test import override_settings

from access import tls
from access.tls import ServerCertificate
from caretaker import ca


@contextmanager
def serving_tls(folder: Path, port: int = 8443) -> Iterator[ServerCertificate]:
    with override_settings(FORGE_SECRETS_DIR=folder, FORGE_TLS_KEY_TYPE="p256", FORGE_TLS_CERT="", FORGE_TLS_KEY=""):
        certificate = tls.server_certificate("127.0.0.1")
    before = (tls._Serving.port, tls._Serving.certificate)
    tls.mark_serving(port, certificate)
    try:
        yield certificate
    finally:
        tls._Serving.port, tls._Serving.certificate = before


def trust_a_team_ca() -> None:
    """A team CA's certificate in the trust store (settings.FORGE_TRUST_DIR, a test folder)."""
    _, certificate_pem = ca.create_ca("ed25519")
    settings.FORGE_TRUST_DIR.mkdir(parents=True, exist_ok=True)
    (settings.FORGE_TRUST_DIR / "team-ca.pem").write_bytes(certificate_pem)
