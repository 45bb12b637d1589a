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
import time
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


# A change made after a read shows as a new modification time only once the clock has moved past the times that
# read saw: timestamps step in the kernel's ticks (milliseconds), or in seconds, or two, on some filesystems.
SETTLED_NS = 2_000_000_000


class _Read:
    """The trust store as last read: its folder's identity and times, what its files were then (name, size,
    modification and change times, inode), and whether the read came long enough after every one of those times
    that any later change must show a time of its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.folder: Path | None = None
        self.listing: tuple[int, int, int, int] | None = None
        self.files: tuple[tuple[str, int, int, int, int], ...] | None = None
        self.settled = False
        self.found: list[TrustedCa] = []


_read = _Read()


def _folder_state(status: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is added to, removed from or renamed in the folder (or the folder replaced)."""
    return (status.st_dev, status.st_ino, status.st_mtime_ns, status.st_ctime_ns)


def _file_state(name: str, status: os.stat_result) -> tuple[str, int, int, int, int]:
    """What changes when a file is replaced or written: its inode, size and times. The change time too, which no
    one can set back: a file rewritten to the same size with its modification time put back still shows."""
    return (name, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)


def _unchanged(where: Path, listing: tuple[int, int, int, int]) -> list[TrustedCa] | None:
    """The CAs of the last read if the store is as it was (the folder's status, then each file's), else None.

    No listing of the folder: adding, removing or renaming a file changes the folder's times, replacing or editing
    one its own status. Only a read that had settled is trusted so: before, a change in the same clock tick as
    the read could leave every time as it was."""
    with _read.lock:
        if not (_read.settled and _read.folder == where and _read.listing == listing and _read.files is not None):
            return None
        files, found = _read.files, list(_read.found)
    for state in files:
        try:
            if _file_state(state[0], os.stat(where / state[0])) != state:
                return None
        except OSError:
            return None
    return found


def trusted() -> list[TrustedCa]:
    """Every readable CA certificate in the trust store, by file name; a file that is not one is skipped.

    Every MCP call's `server_info`, every mTLS check and every roster check asks, so the folder is listed and the
    certificates parsed again only when a file was added, removed or changed since the last read (a status of
    the folder and of each file otherwise)."""
    where = folder()
    began = time.time_ns()
    try:
        listing = _folder_state(os.stat(where))
    except OSError:
        return []
    found = _unchanged(where, listing)
    if found is not None:
        return found
    try:
        with os.scandir(where) as entries:
            listed = sorted((entry.name, entry.stat()) for entry in entries if fnmatch.fnmatch(entry.name, "*.pem"))
    except OSError:
        return []
    files = tuple(_file_state(name, status) for name, status in listed)
    newest = max(
        [listing[2], listing[3], *(time for _, status in listed for time in (status.st_mtime_ns, status.st_ctime_ns))]
    )
    with _read.lock:
        if _read.files == files and _read.folder == where:
            _read.listing, _read.settled = listing, newest < began - SETTLED_NS
            return list(_read.found)
    found = []
    for name, _ in listed:
        try:
            certificate = x509.load_pem_x509_certificate((where / name).read_bytes()[:MAX_PEM_BYTES])
        except (OSError, ValueError):
            continue
        if _is_ca(certificate):
            found.append(TrustedCa(name, certificate))
    with _read.lock:
        _read.files, _read.folder, _read.found = files, where, found
        _read.listing, _read.settled = listing, newest < began - SETTLED_NS
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
