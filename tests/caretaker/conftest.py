"""Helpers that make real keys and CSRs for the caretaker's tests (the `team` and `active` fixtures, a team of
the caretaker's own for each test, are in tests/conftest.py: the TLS tests of other apps use them too)."""

from __future__ import annotations

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


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
