"""Team members who connect with the caretaker's certificates (mTLS): who the certificate says they are, or why
it is refused (DESIGN sections 5 and 10, docs/TLS.md).

The TLS listener asks for a client certificate without requiring one and accepts whatever is presented, so
that every check happens here, where a refusal can say what failed: a certificate must be within its validity,
chain to a CA of the trust store (`FORGE_TRUST_DIR`), be a peer of the accepted roster by its SHA-256
fingerprint, and be revoked neither in the roster's `revoked.toml` nor in its CRL. The chain reaches the
application in the ASGI scope (`scope["extensions"]["tls"]["client_cert_chain"]`), which only the server
fills in from the TLS connection; no header a client sends is ever read for it.

A verified peer acts through a client token of its own (`token_for`): a `ClientToken` owned by the user
`peer:NAME`, one per certificate, whose stored digest is `x509:` and the certificate's fingerprint, a value
no bearer token's SHA-256 can equal. So sessions, grants, per-token caps, consent and the audit log work
for a peer exactly as for a bearer token's principal, with `called_by: peer:NAME`. The peer's user is in the
group `team:ROLE` of its roster role, which is where an operator gives a role its project rights; an
`observer` is read-only (`is_read_only`).

Everything is read again on every request, so a revocation or a new roster takes effect on the next one: the
parsed roster is cached per published generation, trust-store state and accepted-roster record, which a change
to any of them replaces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction

from access.models import ClientToken
from caretaker import ca, roster, store, trust
from caretaker.models import AcceptedRoster, Role
from caretaker.services import accepted

PEER_PREFIX = "peer:"
DIGEST_PREFIX = "x509:"
MAX_CHAIN = 4
MAX_PEM_BYTES = 32 * 1024
READ_ONLY_ROLES = frozenset({Role.OBSERVER.value})


class CertificateRefused(Exception):
    """A presented client certificate that may not act. `reason` is a stable slug for the wire and the audit
    log; the message says what is wrong and what to do."""

    def __init__(self, reason: str, message: str, *, certificate: x509.Certificate | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.certificate = certificate

    def audit_details(self) -> dict[str, str]:
        if self.certificate is None:
            return {"reason": self.reason}
        return {
            "reason": self.reason,
            "subject": self.certificate.subject.rfc4514_string()[:200],
            "serial": f"{self.certificate.serial_number:x}",
            "fingerprint_sha256": ca.cert_fingerprint(self.certificate),
        }


@dataclass(frozen=True)
class CertifiedPeer:
    """A team member whose certificate passed every check: the roster's name and role for it."""

    name: str
    role: str
    fingerprint_sha256: str
    serial: str
    not_after: datetime

    @property
    def principal(self) -> str:
        return PEER_PREFIX + self.name


# --- the accepted roster, parsed once per change ------------------------------------------------------------


@dataclass(frozen=True)
class _Accepted:
    key: tuple[object, ...]
    roster: roster.Roster | None
    crl_revoked: frozenset[int]
    refusal: CertificateRefused | None


_cache: list[_Accepted] = []


def _state_key() -> tuple[object, ...]:
    """What the accepted roster depends on: the generation `current` names, the trust store's files and the
    accepted-roster record (its sequence, digest and seal)."""
    folder: Path = settings.FORGE_ROSTER_DIR
    try:
        generation = str((folder / store.CURRENT).readlink())
    except OSError:
        generation = ""
    try:
        trusted_files = tuple(
            sorted((path.name, path.stat().st_mtime_ns, path.stat().st_size) for path in trust.folder().glob("*.pem"))
        )
    except OSError:
        trusted_files = ()
    record = AcceptedRoster.objects.filter(pk=1).values_list("sequence", "digest", "seal").first()
    return (generation, trusted_files, record)


def _accepted_roster() -> _Accepted:
    key = _state_key()
    if _cache and _cache[0].key == key:
        return _cache[0]
    found = _read_accepted(key)
    _cache[:] = [found]
    return found


def _read_accepted(key: tuple[object, ...]) -> _Accepted:
    record_exists = key[2] is not None
    last = accepted()
    if record_exists and last is None:
        return _Accepted(key, None, frozenset(), CertificateRefused("roster_record_tampered", _TAMPERED))
    try:
        published = store.read_published(settings.FORGE_ROSTER_DIR)
    except store.StoreUnreadable as exc:
        return _Accepted(
            key, None, frozenset(), CertificateRefused("roster_unreadable", f"The accepted roster: {exc}.")
        )
    if published.empty:
        return _Accepted(key, None, frozenset(), CertificateRefused("no_roster", _NO_ROSTER))
    # Checked at the current time, not cached past it: the roster's `expires` is re-checked per request below.
    try:
        checked = roster.verify_roster(
            published.peers_toml, published.revoked_toml, trusted=trust.roster_signers(), now=datetime.now(UTC)
        )
    except roster.RosterRefused as refused:
        return _Accepted(
            key, None, frozenset(), CertificateRefused(f"roster_{refused.reason}", f"The roster: {refused}")
        )
    if last is not None and (
        checked.meta.sequence_number < last.sequence
        or (checked.meta.sequence_number == last.sequence and checked.digest != last.digest)
    ):
        # The files were put back behind what was accepted (a replay on disk): trust none of them.
        return _Accepted(key, None, frozenset(), CertificateRefused("roster_replayed", _REPLAYED))
    try:
        crl_revoked = _crl_serials(published.crl_pem)
    except CertificateRefused as refused:
        return _Accepted(key, None, frozenset(), refused)
    return _Accepted(key, checked, crl_revoked, None)


def _crl_serials(crl_pem: bytes) -> frozenset[int]:
    """The serials the roster's CRL lists, once its signature verifies against a trusted CA; no CRL, none."""
    if not crl_pem.strip():
        return frozenset()
    try:
        crl = x509.load_pem_x509_crl(crl_pem)
    except ValueError:
        raise CertificateRefused("crl_unreadable", _CRL_BAD) from None
    for issuer in trust.roster_signers():
        if issuer.subject == crl.issuer and crl.is_signature_valid(issuer.public_key()):  # type: ignore[arg-type]
            return frozenset(entry.serial_number for entry in crl)
    raise CertificateRefused("crl_unverified", _CRL_BAD)


_TAMPERED = (
    "The record of the accepted roster was changed outside Forge, so no team certificate is accepted until a caretaker "
    "signs the roster again (manage.py roster_sign); use a client token meanwhile."
)
_NO_ROSTER = (
    "This server has no accepted roster, so no team certificate can be matched to a peer: the caretaker signs one "
    "(console, Caretaker) or one signed elsewhere is dropped into FORGE_ROSTER_DIR/incoming/."
)
_REPLAYED = (
    "The roster files on disk are older than the roster this server accepted (a replay), so none of them is trusted; "
    "restore FORGE_ROSTER_DIR/current or have a caretaker sign the roster again."
)
_CRL_BAD = (
    "The roster's CRL (crl.pem) does not verify against a trusted CA, so revocations cannot be checked and no team "
    "certificate is accepted; have the caretaker sign the roster again."
)


# --- one certificate -----------------------------------------------------------------------------------------


def parse_chain(chain_pem: Sequence[str]) -> list[x509.Certificate]:
    """The presented chain (leaf first) as certificates; refused when it is empty, too long or unreadable."""
    if not chain_pem or len(chain_pem) > MAX_CHAIN or any(len(pem) > MAX_PEM_BYTES for pem in chain_pem):
        raise CertificateRefused("unreadable", "The client certificate chain is empty or too long (at most 4).")
    try:
        return [x509.load_pem_x509_certificate(pem.encode("ascii")) for pem in chain_pem]
    except (ValueError, UnicodeEncodeError):
        raise CertificateRefused("unreadable", "The client certificate could not be read as X.509.") from None


def verify(chain_pem: Sequence[str], *, now: datetime | None = None) -> CertifiedPeer:
    """The peer a presented certificate chain (PEM, leaf first) certifies, or `CertificateRefused`."""
    now = now or datetime.now(UTC)
    chain = parse_chain(chain_pem)
    leaf = chain[0]
    if now < leaf.not_valid_before_utc:
        raise CertificateRefused(
            "not_yet_valid",
            f"The client certificate is not valid before {leaf.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}; check the "
            "clock of the machine that issued it.",
            certificate=leaf,
        )
    if now > leaf.not_valid_after_utc:
        raise CertificateRefused(
            "expired",
            f"The client certificate expired at {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}; rotate it "
            "(team.rotate_cert) or ask the caretaker for a new one.",
            certificate=leaf,
        )
    trusted = trust.trusted_certificates()
    if not trusted:
        raise CertificateRefused(
            "unknown_ca",
            "This server trusts no team CA (FORGE_TRUST_DIR is empty); use a client token.",
            certificate=leaf,
        )
    issuer = _trusted_issuer(leaf, trusted, now)
    if issuer is None:
        raise CertificateRefused(
            "unknown_ca",
            "The client certificate was not issued by a CA this server trusts (FORGE_TRUST_DIR), or that CA is not "
            "valid now; use a certificate the team's caretaker issued.",
            certificate=leaf,
        )
    if not _is_client_certificate(leaf):
        raise CertificateRefused(
            "not_client_certificate",
            "The certificate is a CA certificate or not meant for client authentication (extendedKeyUsage); use the "
            "member certificate the caretaker issued.",
            certificate=leaf,
        )
    state = _accepted_roster()
    if state.refusal is not None:
        raise CertificateRefused(state.refusal.reason, str(state.refusal), certificate=leaf)
    assert state.roster is not None
    if state.roster.meta.expires and now > datetime.fromisoformat(state.roster.meta.expires.replace("Z", "+00:00")):
        raise CertificateRefused(
            "roster_expired",
            f"The accepted roster expired at {state.roster.meta.expires}; a caretaker signs it again.",
            certificate=leaf,
        )
    fingerprint = ca.cert_fingerprint(leaf)
    serial = f"{leaf.serial_number:x}"
    for entry in state.roster.revoked:
        if entry.fingerprint_sha256 == fingerprint or _same_serial(entry.serial, leaf.serial_number):
            raise CertificateRefused(
                "revoked",
                f"This certificate of {entry.name} was revoked ({entry.reason}); ask the caretaker for a new one.",
                certificate=leaf,
            )
    if leaf.serial_number in state.crl_revoked:
        raise CertificateRefused(
            "revoked_crl",
            "This certificate is listed in the team CA's revocation list (crl.pem); ask the caretaker for a new one.",
            certificate=leaf,
        )
    for peer in state.roster.peers:
        if peer.fingerprint_sha256 == fingerprint:
            return CertifiedPeer(peer.name, peer.role, fingerprint, serial, leaf.not_valid_after_utc)
    raise CertificateRefused(
        "unknown_peer",
        "The client certificate chains to a trusted CA but is no peer of the accepted roster; the caretaker signs a "
        "roster that lists it (or it was replaced by a newer certificate).",
        certificate=leaf,
    )


def _trusted_issuer(
    leaf: x509.Certificate, trusted: Sequence[x509.Certificate], now: datetime
) -> x509.Certificate | None:
    """The trusted CA that signed `leaf` directly and is valid now, if one did.

    A team CA signs its members' certificates itself (its pathLenConstraint is 0), so the path is one step; a
    chain the client sends beyond its own certificate is not needed and not used. cryptography's path builder
    is not used because it applies the Web PKI's profile, which forbids Ed25519, the CA key DESIGN prefers."""
    for candidate in trusted:
        if not candidate.not_valid_before_utc <= now <= candidate.not_valid_after_utc:
            continue
        try:
            leaf.verify_directly_issued_by(candidate)
        except (ValueError, TypeError, InvalidSignature):
            continue
        if _may_sign_certificates(candidate):
            return candidate
    return None


def _may_sign_certificates(certificate: x509.Certificate) -> bool:
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return True  # RFC 5280 4.2.1.3: without the extension, the key's use is not restricted
    return usage.key_cert_sign


def _is_client_certificate(certificate: x509.Certificate) -> bool:
    extensions = {extension.oid: extension.value for extension in certificate.extensions}
    constraints = extensions.get(x509.BasicConstraints.oid)
    if isinstance(constraints, x509.BasicConstraints) and constraints.ca:
        return False
    try:
        purposes = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return ExtendedKeyUsageOID.CLIENT_AUTH in purposes or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in purposes


def _same_serial(listed: str, serial: int) -> bool:
    try:
        return int(listed.replace(":", ""), 16) == serial
    except ValueError:
        return False


# --- the peer's client token ----------------------------------------------------------------------------------


def certificate_digest(fingerprint_sha256: str) -> str:
    """The stored digest of a certificate's token: `x509:` and the fingerprint's first 59 hex digits. A bearer
    value is looked up by its SHA-256 in hex, which never contains `x` or `:`, so no bearer token finds it."""
    return DIGEST_PREFIX + fingerprint_sha256.replace(":", "")[:59]


def token_for(peer: CertifiedPeer) -> ClientToken:
    """The client token a verified certificate acts through, made on its first use (with the user `peer:NAME`);
    the user's role group follows the roster."""
    digest = certificate_digest(peer.fingerprint_sha256)
    token = ClientToken.objects.select_related("owner").filter(digest=digest).first()
    if token is None:
        token = _make_token(peer, digest)
    _follow_role(token.owner, peer.role)
    return token


def _make_token(peer: CertifiedPeer, digest: str) -> ClientToken:
    try:
        with transaction.atomic():
            owner, _ = User.objects.get_or_create(username=peer.principal[:150])
            if owner.has_usable_password():
                owner.set_unusable_password()
                owner.save(update_fields=["password"])
            return ClientToken.objects.create(
                label=f"{peer.name} (certificate {peer.serial[:16]})"[:200],
                owner=owner,
                digest=digest,
                prefix=f"{DIGEST_PREFIX}{digest[len(DIGEST_PREFIX) :][:8]}",
                expires_at=peer.not_after,
            )
    except IntegrityError:  # another request made it at the same moment
        return ClientToken.objects.select_related("owner").get(digest=digest)


def _follow_role(user: User, role: str) -> None:
    wanted = f"team:{role}"
    current = set(user.groups.filter(name__startswith="team:").values_list("name", flat=True))
    if current == {wanted}:
        return
    with transaction.atomic():
        group, _ = Group.objects.get_or_create(name=wanted)
        user.groups.remove(*Group.objects.filter(name__in=current - {wanted}))
        user.groups.add(group)


def is_read_only(token: ClientToken) -> bool:
    """Whether the token's principal is a peer whose roster role only reads (observer)."""
    if not token.digest.startswith(DIGEST_PREFIX):
        return False
    return any(group.removeprefix("team:") in READ_ONLY_ROLES for group in _group_names(token.owner))


def _group_names(user: User) -> list[str]:
    return [group.name for group in user.groups.all()]


def chain_fingerprint(chain_pem: Sequence[str]) -> str:
    """A short name of a presented chain for logs: the SHA-256 of its PEM text."""
    return hashlib.sha256("".join(chain_pem).encode()).hexdigest()[:16]


def pem_of(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
