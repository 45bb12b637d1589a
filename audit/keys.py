"""The audit log's two keys, kept as files in the secrets directory (mode 0600), never in the database.

The HMAC key binds the chain (only the server can extend or check it); the Ed25519 key signs the
checkpoints that anyone can check with its public half.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings

from forge_core.env import create_once, secret_file

KEY_NAME = "forge-mcp-audit"


@cache
def hmac_key() -> bytes:
    return secret_file(settings.FORGE_SECRETS_DIR, "audit-hmac-key", 32).encode()


@cache
def signing_key() -> Ed25519PrivateKey:
    path: Path = settings.FORGE_SECRETS_DIR / "audit-signing-key.pem"
    pem = create_once(path, _new_signing_key)
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def _new_signing_key() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key() -> Ed25519PublicKey:
    return signing_key().public_key()


def public_key_bytes() -> bytes:
    return public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def origin() -> str:
    """The checkpoint origin line: names this log, and differs between two servers' logs."""
    return f"forge-mcp/audit/{hashlib.sha256(public_key_bytes()).hexdigest()[:16]}"
