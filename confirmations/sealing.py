"""Protection of recovery-contract records: canonical identities, encryption at rest, and record MACs.

Reference 001 asks that target identity, intent and snapshot be stored protected (encrypted with a key
kept outside the database) next to public digests, and that every record be authenticated by an HMAC
bound to one store id, so a record edited in the database, or copied from another deployment, is
refused on load. The three secrets live in `FORGE_SECRETS_DIR` (mode 0600, created on first use):
`contract-store-id`, `contract-hmac-key` and `artifact-key` (AES-256-GCM). A sealed artifact carries its
nonce; its associated data names the store, the contract and the artifact kind, so a ciphertext moved to
another contract or field does not open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import unicodedata
from collections.abc import Mapping
from functools import cache
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from forge_core import canonical
from forge_core.env import create_once, secret_file

NONCE_BYTES = 12


class ContractTampered(Exception):
    """A stored contract record, event or artifact does not authenticate: it was changed outside the service."""


class NotCanonical(ValueError):
    """A value that has no canonical form here (a float, or a type JSON cannot carry)."""


@cache
def store_id() -> str:
    return secret_file(settings.FORGE_SECRETS_DIR, "contract-store-id", 16)


@cache
def _hmac_key() -> bytes:
    return secret_file(settings.FORGE_SECRETS_DIR, "contract-hmac-key", 32).encode()


@cache
def _artifact_key() -> AESGCM:
    path = settings.FORGE_SECRETS_DIR / "artifact-key"
    raw = create_once(path, lambda: base64.b64encode(AESGCM.generate_key(bit_length=256)) + b"\n")
    try:
        key = base64.b64decode(raw.strip(), validate=True)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ImproperlyConfigured(f"{path} does not hold a base64 AES-256 key; restore it from backup.")
    return AESGCM(key)


def clear_key_cache() -> None:
    """Forget the loaded secrets (tests move FORGE_SECRETS_DIR)."""
    store_id.cache_clear()
    _hmac_key.cache_clear()
    _artifact_key.cache_clear()


def _nfc(text: str) -> str:
    # ASCII text is NFC already, and nearly all of a record's text is ASCII: it goes as it is.
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _canonical(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return _nfc(value)
    if kind is dict:
        canonical = {_nfc(str(k)): _canonical(v) for k, v in value.items()}
        if len(canonical) != len(value):
            raise NotCanonical("two keys are the same text once normalized (NFC)")
        return canonical
    if kind is list:
        return [_canonical(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        raise NotCanonical("floats have no canonical form in a contract; use integers or strings")
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, Mapping):
        canonical = {unicodedata.normalize("NFC", str(k)): _canonical(v) for k, v in value.items()}
        if len(canonical) != len(value):
            raise NotCanonical("two keys are the same text once normalized (NFC)")
        return canonical
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    raise NotCanonical(f"a {type(value).__name__} has no canonical form in a contract")


def canonical_json(value: Any) -> bytes:
    """A contract's canonical form: text NFC-normalized, floats and other dynamic values refused, then the
    service's canonical JSON (`forge_core.canonical`) as UTF-8."""
    return canonical.canonical_json(_canonical(value)).encode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mac(parts: Mapping[str, Any]) -> str:
    """HMAC-SHA256 over the store id and a record's canonical JSON."""
    message = store_id().encode() + b"\n" + canonical_json(parts)
    return hmac.new(_hmac_key(), message, hashlib.sha256).hexdigest()


def check_mac(parts: Mapping[str, Any], stored: str, what: str) -> None:
    if not hmac.compare_digest(mac(parts), stored):
        raise ContractTampered(f"{what} does not authenticate; it was changed outside Forge")


def _associated(contract_id: str, kind: str) -> bytes:
    return f"{store_id()}|{contract_id}|{kind}".encode()


def seal(contract_id: str, kind: str, plaintext: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + _artifact_key().encrypt(nonce, plaintext, _associated(contract_id, kind))


def unseal(contract_id: str, kind: str, sealed: bytes) -> bytes:
    try:
        return _artifact_key().decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _associated(contract_id, kind))
    except (InvalidTag, ValueError):
        raise ContractTampered(f"the {kind} of contract {contract_id} does not open; it was changed or moved") from None
