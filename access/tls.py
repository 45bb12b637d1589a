"""The server's own TLS certificate: made on first start, kept while it still names the server, made again when
the names change; or the operator's own certificate and key (DESIGN section 10, docs/TLS.md).

A made certificate is self-signed, valid for ten years, RSA-4096 (the seed's choice) or ECDSA P-256
(`FORGE_TLS_KEY_TYPE`), and its subjectAltName lists every name a client may reach the server by (RFC 6125:
clients match the SAN, never the common name): the bind address, the loopback names when it binds loopback
or every interface, and `FORGE_ALLOWED_HOSTS`. It lives under `FORGE_SECRETS_DIR/tls/` (`server.key` 0600)
beside a small `server.json` that records what it was made for, so a changed bind address or host list makes
a new one at the next start and anything else keeps the one members already trust.

People check the certificate a client shows them against the memorable ID and randomart that `server_info`
and the console's dashboard give (`served()`), the same fingerprint art as for every key of the caretaker.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from django.conf import settings

from caretaker.ca import cert_fingerprint
from caretaker.randomart import key_art

KEY_TYPES = ("rsa4096", "p256")
VALIDITY_DAYS = 3650
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Binding every interface: the certificate names what can be known here, and FORGE_ALLOWED_HOSTS the rest.
ANY_ADDRESS = ("0.0.0.0", "::", "")


class TlsSetupError(Exception):
    """The server certificate cannot be made or loaded; the message says what to do."""


@dataclass(frozen=True)
class ServerCertificate:
    """The certificate and key files the listener serves, and whether Forge made them."""

    cert_path: Path
    key_path: Path
    certificate: x509.Certificate
    generated: bool

    @property
    def names(self) -> list[str]:
        try:
            san = self.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return []
        return [str(value) for value in san.get_values_for_type(x509.DNSName)] + [
            str(value) for value in san.get_values_for_type(x509.IPAddress)
        ]

    def describe(self) -> dict[str, Any]:
        """What `server_info.tls` and the dashboard show: enough for a person to check what a client sees."""
        art = key_art(self.certificate)
        return {
            "subject": self.certificate.subject.rfc4514_string(),
            "names": self.names,
            "fingerprint_sha256": cert_fingerprint(self.certificate),
            "not_after": self.certificate.not_valid_after_utc.isoformat(),
            "generated": self.generated,
            "certificate": self.certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
            **art.as_dict(),
        }


class _Serving:
    """What this process serves over TLS, once `runmcp` set it up: the port and certificate."""

    port: int | None = None
    certificate: ServerCertificate | None = None


def mark_serving(port: int, certificate: ServerCertificate) -> None:
    _Serving.port, _Serving.certificate = port, certificate


def served() -> dict[str, Any] | None:
    """This process's TLS listener as `server_info` and the dashboard describe it, or None without one."""
    if _Serving.port is None or _Serving.certificate is None:
        return None
    return {"port": _Serving.port, "certificate": _Serving.certificate.describe()}


def names_for(host: str, extra_hosts: list[str]) -> list[str]:
    """The names a certificate for a server bound to `host` must carry, in a stable order.

    Django's host patterns become certificate names: `.example.com` (the domain and its subdomains) both
    `example.com` and `*.example.com`; a bare `*` names nothing a certificate could hold and is left out."""
    bound = host.strip("[]")
    names: list[str] = []
    if bound in ANY_ADDRESS or _is_loopback(bound):
        names.extend(LOOPBACK_NAMES)
    if bound not in ANY_ADDRESS:
        names.append(bound)
    for pattern in extra_hosts:
        pattern = pattern.strip().strip("[]").lower()
        if not pattern or pattern == "*":
            continue
        if pattern.startswith("."):
            names.extend([pattern[1:], f"*{pattern}"])
        else:
            names.append(pattern)
    unique: list[str] = []
    for name in names:
        if name not in unique:
            unique.append(name)
    return unique


def _is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def server_certificate(host: str) -> ServerCertificate:
    """The certificate to serve for a server bound to `host`: the operator's (`FORGE_TLS_CERT`,
    `FORGE_TLS_KEY`) checked, else the one made here, made (again) when it is missing, unreadable, expired
    or made for other names or another key type."""
    if settings.FORGE_TLS_CERT or settings.FORGE_TLS_KEY:
        return _operator_certificate(settings.FORGE_TLS_CERT, settings.FORGE_TLS_KEY)
    folder = settings.FORGE_SECRETS_DIR / "tls"
    wanted = {
        "names": names_for(host, list(settings.FORGE_EXTRA_ALLOWED_HOSTS)),
        "key_type": settings.FORGE_TLS_KEY_TYPE,
    }
    kept = _kept(folder, wanted)
    if kept is not None:
        return kept
    return _make(folder, wanted)


def _kept(folder: Path, wanted: dict[str, Any]) -> ServerCertificate | None:
    try:
        made_for = json.loads((folder / "server.json").read_text())
        certificate = x509.load_pem_x509_certificate((folder / "server.crt").read_bytes())
        key = serialization.load_pem_private_key((folder / "server.key").read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if made_for != wanted or certificate.not_valid_after_utc <= datetime.now(UTC) + timedelta(days=30):
        return None
    # A start killed between writing a new key and its certificate leaves a key the old certificate does not
    # hold; serving that pair would fail in OpenSSL, so it is made again instead.
    if not _same_key(key, certificate):
        return None
    return ServerCertificate(folder / "server.crt", folder / "server.key", certificate, generated=True)


def _make(folder: Path, wanted: dict[str, Any]) -> ServerCertificate:
    key = (
        rsa.generate_private_key(65537, 4096)
        if wanted["key_type"] == "rsa4096"
        else ec.generate_private_key(ec.SECP256R1())
    )
    now = datetime.now(UTC).replace(microsecond=0)
    alt_names: list[x509.GeneralName] = []
    for name in wanted["names"]:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Forge MCP"),
            x509.NameAttribute(NameOID.COMMON_NAME, (wanted["names"] or ["forge-mcp"])[0][:64]),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    certificate = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)  # a folder made looser by hand holds the key: tighten it before writing one into it
    # The key first, the record last: a start killed in between finds no matching record and makes them again.
    _replace(folder / "server.key", key_pem, 0o600)
    _replace(folder / "server.crt", certificate.public_bytes(serialization.Encoding.PEM), 0o644)
    _replace(folder / "server.json", json.dumps(wanted).encode(), 0o644)
    return ServerCertificate(folder / "server.crt", folder / "server.key", certificate, generated=True)


def _replace(path: Path, content: bytes, mode: int) -> None:
    """Write `path` whole or not at all: a temporary file, fsynced, renamed over it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _same_key(key: PrivateKeyTypes, certificate: x509.Certificate) -> bool:
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        key.public_key().public_bytes(serialization.Encoding.DER, public)
        == certificate.public_key().public_bytes(serialization.Encoding.DER, public)
    )


def _operator_certificate(cert_file: str, key_file: str) -> ServerCertificate:
    if not (cert_file and key_file):
        raise TlsSetupError(
            "Set both FORGE_TLS_CERT and FORGE_TLS_KEY (the certificate chain and its private key, PEM), or neither "
            "to have Forge make its own certificate."
        )
    cert_path, key_path = Path(cert_file).resolve(), Path(key_file).resolve()
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as exc:
        raise TlsSetupError(
            f"Cannot read {exc.filename} ({exc.strerror}); check FORGE_TLS_CERT and FORGE_TLS_KEY."
        ) from None
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise TlsSetupError(
            f"FORGE_TLS_CERT must be a PEM certificate and FORGE_TLS_KEY an unencrypted PEM private key ({exc})."
        ) from None
    if not _same_key(key, certificate):
        raise TlsSetupError(f"The key in {key_path} is not the key of the certificate in {cert_path}; give the pair.")
    if certificate.not_valid_after_utc <= datetime.now(UTC):
        raise TlsSetupError(
            f"The certificate in {cert_path} expired on {certificate.not_valid_after_utc:%Y-%m-%d}; renew it, or unset "
            "FORGE_TLS_CERT and FORGE_TLS_KEY to have Forge make its own certificate."
        )
    return ServerCertificate(cert_path, key_path, certificate, generated=False)
