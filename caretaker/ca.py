"""The team certificate authority: its key and certificate on disk, certificates from members' CSRs, the CRL.

The caretaker runs one CA per deployment. This module is the pure part of it: it makes a CA (Ed25519 or
RSA-4096), writes it once and never over an existing one, loads it back with every check a signer needs
(both files, parseable, matching, really a CA, not expired), screens a member's certificate signing
request, issues a client certificate from it and signs the revocation list. A CSR contributes its public
key and nothing else: the subject, SANs and extensions of an issued certificate come from the caller, who
knows who the member is. Issuing and CRL signing are deterministic (Ed25519 and RSA PKCS#1 v1.5 signatures
are), so the same inputs give the same bytes and a retried issuance cannot produce a second, different
certificate. No Django and no shell-outs: the services and models of the caretaker app build on this API.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_TYPES = ("ed25519", "rsa4096")
CA_VALIDITY_DAYS = 3650
RSA_CA_BITS = 4096
MIN_RSA_CSR_BITS = 3072
MAX_CSR_BYTES = 16 * 1024
SERIAL_BITS = 159
KEY_FILE = "ca.key"
CERT_FILE = "ca.crt"
ACCEPTED_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)

PrivateKey = ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey


class CaUnavailable(Exception):
    """The team CA cannot be used; `reason` is a slug ("missing", "unreadable", "not_a_ca", "mismatch", "expired")."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CaExists(Exception):
    """A team CA (or part of one) is already in the directory; it is never overwritten."""


class CsrRefused(ValueError):
    """A member's CSR is not acceptable; `reason` is a slug and the message says what to send instead."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class TeamCa:
    """A loaded, checked team CA: its private key and its self-signed certificate."""

    key: PrivateKey
    certificate: x509.Certificate

    @property
    def key_type(self) -> str:
        return "ed25519" if isinstance(self.key, ed25519.Ed25519PrivateKey) else "rsa4096"

    @property
    def fingerprint_sha256(self) -> str:
        return cert_fingerprint(self.certificate)

    @property
    def common_name(self) -> str:
        return _common_name(self.certificate.subject)


@dataclass(frozen=True)
class CsrInfo:
    """A screened CSR: its self-signature verified, its key acceptable, nothing dangerous requested."""

    csr: x509.CertificateSigningRequest
    key_type: str
    bits: int
    pem: bytes


def cert_fingerprint(cert: x509.Certificate) -> str:
    """The SHA-256 of the certificate's DER as lowercase hex pairs joined by colons."""
    return ":".join(f"{byte:02x}" for byte in cert.fingerprint(hashes.SHA256()))


def random_serial() -> int:
    """A positive serial number below 2**159 (RFC 5280 allows 20 octets; the top bit stays clear)."""
    return secrets.randbelow((1 << SERIAL_BITS) - 1) + 1


# --- making, writing and loading the CA ------------------------------------------------------------------


def create_ca(
    key_type: str = "ed25519", *, common_name: str = "Forge Team CA", now: datetime | None = None
) -> tuple[bytes, bytes]:
    """A new self-signed CA valid for ten years: (private key PEM as unencrypted PKCS#8, certificate PEM)."""
    key = _generate_key(key_type)
    start = _utc(now or datetime.now(UTC)).replace(microsecond=0)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _checked_common_name(common_name))])
    public_key = key.public_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(random_serial())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public_key), critical=False)
    )
    certificate = _sign(builder, key)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


def write_ca(directory: Path, key_pem: bytes, cert_pem: bytes) -> None:
    """Store a new CA as `ca.key` (0600) and `ca.crt` (0644) in `directory` (made 0700), never over another.

    Raises CaExists, writing nothing, when either file is there already; raises ValueError when the two PEMs
    are not a matching CA pair. If the certificate cannot be placed, the key is removed again: a directory
    never holds half a CA.
    """
    try:
        _team_ca_from_pem(key_pem, cert_pem, where="the CA to write")
    except CaUnavailable as error:
        raise ValueError(str(error)) from error
    _make_private_directory(directory)
    for name in (KEY_FILE, CERT_FILE):
        if (directory / name).exists():
            raise CaExists(
                f"{directory / name} exists already; a team CA is never overwritten. Remove the old CA first."
            )
    key_path = directory / KEY_FILE
    _place_new_file(key_path, key_pem, 0o600)
    try:
        _place_new_file(directory / CERT_FILE, cert_pem, 0o644)
    except BaseException:
        key_path.unlink(missing_ok=True)
        raise
    _fsync_directory(directory)


def load_ca(directory: Path, *, now: datetime | None = None) -> TeamCa:
    """The team CA in `directory`, checked; CaUnavailable (with a reason slug) when it cannot sign."""
    key_path, cert_path = directory / KEY_FILE, directory / CERT_FILE
    absent = [path.name for path in (key_path, cert_path) if not path.exists()]
    if absent:
        raise CaUnavailable(
            "missing",
            f"no team CA in {directory} ({' and '.join(absent)} absent); the caretaker must create one first.",
        )
    try:
        key_pem, cert_pem = key_path.read_bytes(), cert_path.read_bytes()
    except OSError as error:
        raise CaUnavailable(
            "unreadable",
            f"cannot read the team CA in {directory} ({error.strerror}); check the files' owner and modes.",
        ) from error
    team_ca = _team_ca_from_pem(key_pem, cert_pem, where=str(directory))
    not_after = team_ca.certificate.not_valid_after_utc
    if _utc(now or datetime.now(UTC)) > not_after:
        raise CaUnavailable(
            "expired",
            f"the team CA in {directory} expired on {not_after:%Y-%m-%d}; the caretaker must create a new one.",
        )
    return team_ca


def _generate_key(key_type: str) -> PrivateKey:
    if key_type == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type == "rsa4096":
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_CA_BITS)
    raise ValueError(f"unknown CA key type {key_type!r}; choose one of {', '.join(KEY_TYPES)}.")


def _team_ca_from_pem(key_pem: bytes, cert_pem: bytes, *, where: str) -> TeamCa:
    key = _parse_ca_key(key_pem, where)
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as error:
        raise CaUnavailable(
            "unreadable", f"{CERT_FILE} of {where} is not a PEM certificate; restore it from a backup."
        ) from error
    if not _is_ca_certificate(certificate):
        raise CaUnavailable(
            "not_a_ca",
            f"{CERT_FILE} of {where} is not a CA certificate (basicConstraints CA:TRUE with keyCertSign); "
            "put the team CA's own certificate there.",
        )
    if _public_der(key.public_key()) != _public_der(certificate.public_key()):
        raise CaUnavailable(
            "mismatch", f"{KEY_FILE} and {CERT_FILE} of {where} do not belong together; restore the matching pair."
        )
    return TeamCa(key=key, certificate=certificate)


def _parse_ca_key(key_pem: bytes, where: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as error:
        raise CaUnavailable(
            "unreadable", f"{KEY_FILE} of {where} is not an unencrypted PEM private key; restore it from a backup."
        ) from error
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size == RSA_CA_BITS:
        return key
    raise CaUnavailable(
        "unreadable",
        f"{KEY_FILE} of {where} is not an Ed25519 or RSA-4096 key; a team CA uses one of {', '.join(KEY_TYPES)}.",
    )


def _is_ca_certificate(certificate: x509.Certificate) -> bool:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except (x509.ExtensionNotFound, ValueError):
        return False
    return constraints.ca and usage.key_cert_sign


def _public_der(public_key: object) -> bytes:
    if not isinstance(public_key, ed25519.Ed25519PublicKey | rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        return b""
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _make_private_directory(directory: Path) -> None:
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
        # mkdir's mode is filtered by the umask; the CA's folder must end up 0700 whatever it is.
        os.chmod(directory, 0o700)


def _place_new_file(path: Path, content: bytes, mode: int) -> None:
    """Write `content` to a fresh temporary file, fsync it, then give it its name without ever replacing one.

    A hard link fails when the name is taken, where a rename would silently replace a CA written by a
    concurrent caller between our existence check and now.
    """
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError as error:
            raise CaExists(f"{path} appeared while the team CA was being written; it was left as it is.") from error
    finally:
        temporary.unlink(missing_ok=True)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        # Some file systems refuse fsync on a directory; the files themselves are already durable.
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


# --- screening a member's CSR ------------------------------------------------------------------------------


def inspect_csr(data: bytes | str) -> CsrInfo:
    """A member's CSR (PEM or DER), screened; CsrRefused with a reason slug when it is not acceptable."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) > MAX_CSR_BYTES:
        raise CsrRefused("too_large", f"the CSR is {len(raw)} bytes, over the {MAX_CSR_BYTES}; send a single PEM CSR.")
    csr = _parse_csr(raw)
    key_type, bits = _acceptable_key(csr)
    if not csr.is_signature_valid:
        raise CsrRefused(
            "bad_signature",
            "the CSR's self-signature does not verify; generate the CSR again with the same private key.",
        )
    _refuse_dangerous_extensions(csr)
    return CsrInfo(csr=csr, key_type=key_type, bits=bits, pem=csr.public_bytes(serialization.Encoding.PEM))


def _parse_csr(raw: bytes) -> x509.CertificateSigningRequest:
    unreadable = CsrRefused(
        "unreadable", "this is not a certificate signing request; send the PEM (-----BEGIN CERTIFICATE REQUEST-----)."
    )
    try:
        if raw.lstrip().startswith(b"-----BEGIN"):
            return x509.load_pem_x509_csr(raw)
        return x509.load_der_x509_csr(raw)
    except ValueError as error:
        raise unreadable from error


def _acceptable_key(csr: x509.CertificateSigningRequest) -> tuple[str, int]:
    what_to_send = "make the CSR with an Ed25519, RSA (3072 bits or more) or ECDSA P-256/P-384/P-521 key."
    try:
        public_key = csr.public_key()
    except (ValueError, UnsupportedAlgorithm) as error:
        raise CsrRefused("unsupported_key", f"the CSR's key type is not supported; {what_to_send}") from error
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return "ED25519", 256
    if isinstance(public_key, rsa.RSAPublicKey):
        if public_key.key_size < MIN_RSA_CSR_BITS:
            raise CsrRefused(
                "weak_key",
                f"the CSR's RSA key has {public_key.key_size} bits, under {MIN_RSA_CSR_BITS}; {what_to_send}",
            )
        return "RSA", public_key.key_size
    if isinstance(public_key, ec.EllipticCurvePublicKey) and isinstance(public_key.curve, ACCEPTED_CURVES):
        return "ECDSA", public_key.curve.key_size
    raise CsrRefused("unsupported_key", f"the CSR's key type is not supported; {what_to_send}")


def _refuse_dangerous_extensions(csr: x509.CertificateSigningRequest) -> None:
    try:
        extensions = csr.extensions
    except ValueError as error:
        raise CsrRefused(
            "unreadable", "the CSR's requested extensions cannot be read; generate the CSR again without extensions."
        ) from error
    for extension in extensions:
        value = extension.value
        if isinstance(value, x509.BasicConstraints) and value.ca:
            raise CsrRefused(
                "ca_requested",
                "the CSR asks to be a CA (basicConstraints CA:TRUE); request an ordinary client certificate.",
            )
        if isinstance(value, x509.ExtendedKeyUsage) and list(value) != [ExtendedKeyUsageOID.CLIENT_AUTH]:
            raise CsrRefused(
                "extra_eku",
                "the CSR asks for an extended key usage other than clientAuth; request clientAuth only, or none.",
            )


# --- issuing certificates and the CRL -----------------------------------------------------------------------


def issue_certificate(
    ca: TeamCa,
    csr: CsrInfo,
    *,
    common_name: str,
    serial: int,
    not_before: datetime,
    days: int,
    dns_names: Sequence[str] = (),
    uris: Sequence[str] = (),
) -> bytes:
    """A client certificate (PEM) for the CSR's public key; every other field comes from the arguments.

    The validity runs from `not_before` for `days`, cut at the CA's own end. The same arguments give the
    same bytes.
    """
    if days < 1:
        raise ValueError(f"a certificate must be valid for at least one day, not {days}.")
    _check_serial(serial)
    start = _utc(not_before).replace(microsecond=0)
    ca_end = ca.certificate.not_valid_after_utc
    if start >= ca_end:
        raise ValueError(f"not_before {start:%Y-%m-%d} is past the team CA's end ({ca_end:%Y-%m-%d}); create a new CA.")
    public_key = csr.csr.public_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ca.common_name),
            x509.NameAttribute(NameOID.COMMON_NAME, _checked_common_name(common_name)),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(start)
        .not_valid_after(min(start + timedelta(days=days), ca_end))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_encipherment=csr.key_type == "RSA"), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    names = [x509.DNSName(name) for name in dns_names] + [x509.UniformResourceIdentifier(uri) for uri in uris]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(
        x509.SubjectKeyIdentifier.from_public_key(public_key),
        critical=False,
    ).add_extension(_authority_key_identifier(ca), critical=False)
    return _sign(builder, ca.key).public_bytes(serialization.Encoding.PEM)


def sign_crl(
    ca: TeamCa,
    revoked: Sequence[tuple[int, datetime]],
    *,
    this_update: datetime,
    next_update: datetime,
    crl_number: int,
) -> bytes:
    """The CRL (PEM) listing `revoked` as (serial, revocation time), with CRLNumber and AKI; deterministic."""
    start, end = _utc(this_update).replace(microsecond=0), _utc(next_update).replace(microsecond=0)
    if end <= start:
        raise ValueError("next_update must come after this_update.")
    if crl_number < 0:
        raise ValueError(f"the CRL number must not be negative, not {crl_number}.")
    serials = [serial for serial, _ in revoked]
    if len(set(serials)) != len(serials):
        raise ValueError("a serial is listed twice among the revoked certificates; list each once.")
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.certificate.subject)
        .last_update(start)
        .next_update(end)
        .add_extension(x509.CRLNumber(crl_number), critical=False)
        .add_extension(_authority_key_identifier(ca), critical=False)
    )
    # Sorted so that the same set of revocations always gives the same bytes, whatever order it came in.
    for serial, when in sorted(revoked, key=lambda entry: entry[0]):
        _check_serial(serial)
        entry = (
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(_utc(when).replace(microsecond=0))
        )
        builder = builder.add_revoked_certificate(entry.build())
    return _sign(builder, ca.key).public_bytes(serialization.Encoding.PEM)


# --- signing, key usages and names --------------------------------------------------------------------------


def _sign(
    builder: x509.CertificateBuilder | x509.CertificateRevocationListBuilder, key: PrivateKey
) -> x509.Certificate | x509.CertificateRevocationList:
    # Both algorithms sign deterministically, which issue_certificate and sign_crl promise.
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return builder.sign(key, None)
    return builder.sign(key, hashes.SHA256(), rsa_padding=padding.PKCS1v15())


def _key_usage(
    *,
    digital_signature: bool = False,
    key_encipherment: bool = False,
    key_cert_sign: bool = False,
    crl_sign: bool = False,
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _authority_key_identifier(ca: TeamCa) -> x509.AuthorityKeyIdentifier:
    try:
        ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _common_name(name: x509.Name) -> str:
    attributes = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = attributes[0].value if attributes else ""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _checked_common_name(common_name: str) -> str:
    # RFC 5280's upper bound for a common name is 64 characters.
    if not 1 <= len(common_name) <= 64:
        raise ValueError(f"a common name must be 1 to 64 characters, not {len(common_name)}; choose a shorter name.")
    return common_name


def _check_serial(serial: int) -> None:
    if not 0 < serial < 1 << SERIAL_BITS:
        raise ValueError(f"a serial number must be positive and below 2**{SERIAL_BITS}; use random_serial().")


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("a naive datetime is ambiguous here; pass a timezone-aware one (UTC).")
    return moment.astimezone(UTC)
