"""The trust store: CA certificates in `FORGE_TRUST_DIR/*.pem` (DESIGN section 10).

A roster is accepted only when it is signed by one of these CAs, and (with TLS) a client certificate must chain
to one. The caretaker's own CA is added when it is created. Each entry is shown to people with its fingerprint
art, since adding a CA is trusting a key.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from django.conf import settings
from django.db import transaction

from audit.models import EventKind
from audit.services import record
from caretaker import ca
from caretaker.randomart import key_art
from forge_core.errors import Refusal
from forge_core.live import notify_console, notify_trust_changed

MAX_PEM_BYTES = 64 * 1024


@dataclass(frozen=True)
class TrustedCa:
    file_name: str
    certificate: x509.Certificate

    @property
    def fingerprint_sha256(self) -> str:
        return ca.cert_fingerprint(self.certificate)

    @property
    def subject(self) -> str:
        return self.certificate.subject.rfc4514_string()

    def describe(self) -> dict[str, object]:
        """What `server_info.trust_store_cas[]` and the trust-store screen show for it (worked out once)."""
        return dict(self._described)

    @functools.cached_property
    def _described(self) -> dict[str, object]:
        art = key_art(self.certificate)
        return {
            "file": self.file_name,
            "subject": self.subject,
            "fingerprint_sha256": self.fingerprint_sha256,
            "not_after": self.certificate.not_valid_after_utc.isoformat(),
            **art.as_dict(),
        }


def folder() -> Path:
    return settings.FORGE_TRUST_DIR


class _Read:
    """The trust store as last read, and what its files were then (name, size, modification time, inode)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: tuple[tuple[str, int, int, int], ...] | None = None
        self.folder: Path | None = None
        self.found: list[TrustedCa] = []


_read = _Read()


def trusted() -> list[TrustedCa]:
    """Every readable CA certificate in the trust store, by file name; a file that is not one is skipped.

    Every MCP call's `server_info`, every mTLS check and every roster check asks, so the certificates are parsed
    again only when a file was added, removed or changed since the last read (one directory listing otherwise)."""
    where = folder()
    try:
        with os.scandir(where) as entries:
            listed = sorted((entry.name, entry.stat()) for entry in entries if fnmatch.fnmatch(entry.name, "*.pem"))
    except OSError:
        return []
    files = tuple((name, stat.st_size, stat.st_mtime_ns, stat.st_ino) for name, stat in listed)
    with _read.lock:
        if _read.files == files and _read.folder == where:
            return list(_read.found)
    found: list[TrustedCa] = []
    for name, _ in listed:
        try:
            certificate = x509.load_pem_x509_certificate((where / name).read_bytes()[:MAX_PEM_BYTES])
        except (OSError, ValueError):
            continue
        if _is_ca(certificate):
            found.append(TrustedCa(name, certificate))
    with _read.lock:
        _read.files, _read.folder, _read.found = files, where, found
    return list(found)


def trusted_certificates() -> list[x509.Certificate]:
    return [entry.certificate for entry in trusted()]


def roster_signers() -> list[x509.Certificate]:
    """The CAs whose rosters this server accepts: the trust store's, and its own team CA even if someone took
    it out of the store (the roster it publishes must stay readable to itself)."""
    found = trusted_certificates()
    try:
        own = ca.load_ca(settings.FORGE_CA_DIR).certificate
    except ca.CaUnavailable:
        return found
    if all(ca.cert_fingerprint(c) != ca.cert_fingerprint(own) for c in found):
        found.append(own)
    return found


def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _file_name_for(certificate: x509.Certificate) -> str:
    common = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    label = re.sub(r"[^a-z0-9]+", "-", str(common[0].value).lower()).strip("-") if common else "ca"
    return f"{label or 'ca'}-{ca.cert_fingerprint(certificate).replace(':', '')[:16]}.pem"


def install(pem: bytes, *, actor: str, why: str) -> TrustedCa:
    """Add a CA certificate to the trust store (audited); refused with nothing written unless it is one CA
    certificate in PEM. Adding one already there changes nothing."""
    if len(pem) > MAX_PEM_BYTES:
        raise Refusal("FORGE_ERR_INVALID_CERTIFICATE", "That file is too large to be one CA certificate.", status=400)
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise Refusal(
            "FORGE_ERR_INVALID_CERTIFICATE",
            "That is not a PEM certificate: upload the CA's certificate (-----BEGIN CERTIFICATE-----).",
            status=400,
        ) from None
    if not _is_ca(certificate):
        raise Refusal(
            "FORGE_ERR_INVALID_CERTIFICATE",
            "That certificate is not a CA (basicConstraints CA:TRUE): upload the team CA's certificate, not a member's.",
            status=400,
        )
    for entry in trusted():
        if entry.fingerprint_sha256 == ca.cert_fingerprint(certificate):
            return entry
    target = folder() / _file_name_for(certificate)
    folder().mkdir(parents=True, exist_ok=True, mode=0o700)
    with transaction.atomic():
        record(
            EventKind.CARETAKER_ACTION,
            tool="trust.add",
            arguments={
                "fingerprint_sha256": ca.cert_fingerprint(certificate),
                "subject": certificate.subject.rfc4514_string(),
                "why": why,
            },
            outcome="trusted",
            called_by=actor,
        )
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
        temporary.write_bytes(certificate.public_bytes(Encoding.PEM))
        os.replace(temporary, target)
        notify_console("caretaker")
        notify_trust_changed()
    return TrustedCa(target.name, certificate)


def remove(file_name: str, *, actor: str) -> None:
    """Take a CA out of the trust store (audited): rosters it signed are no longer accepted."""
    entry = next((e for e in trusted() if e.file_name == file_name), None)
    if entry is None:
        raise Refusal("FORGE_ERR_NOT_FOUND", f"The trust store holds no CA file {file_name!r}.", status=404)
    with transaction.atomic():
        record(
            EventKind.CARETAKER_ACTION,
            tool="trust.remove",
            arguments={"fingerprint_sha256": entry.fingerprint_sha256, "subject": entry.subject},
            outcome="removed",
            called_by=actor,
        )
        (folder() / entry.file_name).unlink(missing_ok=True)
        notify_console("caretaker")
        notify_trust_changed()
