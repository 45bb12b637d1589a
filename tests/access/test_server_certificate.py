"""The server's own TLS certificate (access.tls): which names it carries for a bind address and the allowed
hosts, how it is made (key type, validity, SAN, file modes), when it is kept and when made again, how an
operator's own pair is checked, and what a person is shown to compare with what a client sees."""

from __future__ import annotations

import ipaddress
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from access.tls import TlsSetupError, names_for, server_certificate
from caretaker.ca import cert_fingerprint
from caretaker.randomart import key_art

LOOPBACK = ["localhost", "127.0.0.1", "::1"]


@pytest.fixture
def tls_settings(settings, tmp_path: Path):
    """A fresh secrets folder, no operator certificate, no extra hosts, the seed's key type."""
    settings.FORGE_SECRETS_DIR = tmp_path / "secrets"
    settings.FORGE_TLS_CERT = ""
    settings.FORGE_TLS_KEY = ""
    settings.FORGE_EXTRA_ALLOWED_HOSTS = []
    settings.FORGE_TLS_KEY_TYPE = "rsa4096"
    return settings


@pytest.fixture
def p256_settings(tls_settings):
    # Keeping and remaking do not depend on the key type; P-256 keys are made in a blink.
    tls_settings.FORGE_TLS_KEY_TYPE = "p256"
    return tls_settings


def tls_folder(settings) -> Path:
    return settings.FORGE_SECRETS_DIR / "tls"


def file_state(path: Path) -> tuple[bytes, int, int]:
    info = path.stat()
    return path.read_bytes(), info.st_ino, info.st_mtime_ns


def san_of(certificate: x509.Certificate) -> x509.SubjectAlternativeName:
    return certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value


def own_pair(
    folder: Path,
    *,
    name: str = "forge.example.com",
    expired: bool = False,
    key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[Path, Path]:
    """A self-signed certificate and its key as an operator would bring them, written as PEM files."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    not_after = now - timedelta(days=1) if expired else now + timedelta(days=90)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_after - timedelta(days=365))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "own.crt", folder / "own.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


# --- names_for -------------------------------------------------------------------------------------------


def test_a_loopback_bind_names_every_loopback_name_once():
    assert names_for("127.0.0.1", []) == LOOPBACK
    assert names_for("::1", []) == LOOPBACK
    assert names_for("[::1]", []) == LOOPBACK
    assert names_for("localhost", []) == LOOPBACK


def test_another_loopback_address_is_named_beside_the_loopback_names():
    assert names_for("127.0.0.2", []) == [*LOOPBACK, "127.0.0.2"]


def test_binding_every_interface_names_the_loopback_names_and_not_the_wildcard_address():
    assert names_for("0.0.0.0", []) == LOOPBACK
    assert names_for("::", []) == LOOPBACK


def test_a_specific_address_is_named_alone():
    assert names_for("192.0.2.10", []) == ["192.0.2.10"]
    assert names_for("[2001:db8::7]", []) == ["2001:db8::7"]


def test_allowed_hosts_become_names_a_leading_dot_the_domain_and_its_wildcard_and_a_bare_star_nothing():
    assert names_for("192.0.2.10", ["forge.internal", ".Example.com", "*", "", "[2001:db8::7]"]) == [
        "192.0.2.10",
        "forge.internal",
        "example.com",
        "*.example.com",
        "2001:db8::7",
    ]


def test_an_allowed_host_already_named_by_the_bind_address_is_named_once():
    assert names_for("127.0.0.1", ["localhost", "127.0.0.1", "forge.internal"]) == [*LOOPBACK, "forge.internal"]


# --- a made certificate ----------------------------------------------------------------------------------


def test_a_made_certificate_is_rsa_4096_valid_ten_years_and_names_the_server(tls_settings):
    made = server_certificate("127.0.0.1")

    certificate = made.certificate
    key = certificate.public_key()
    assert isinstance(key, rsa.RSAPublicKey) and key.key_size == 4096
    assert made.generated is True
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert timedelta(days=3649) < lifetime < timedelta(days=3651)
    assert certificate.not_valid_before_utc <= datetime.now(UTC) < certificate.not_valid_after_utc
    san = san_of(certificate)
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    assert made.cert_path == tls_folder(tls_settings) / "server.crt"
    assert x509.load_pem_x509_certificate(made.cert_path.read_bytes()) == certificate
    on_disk = serialization.load_pem_private_key(made.key_path.read_bytes(), password=None)
    assert on_disk.public_key().public_numbers() == key.public_numbers()


def test_a_made_certificate_is_p256_when_the_key_type_says_so(p256_settings):
    made = server_certificate("127.0.0.1")

    key = made.certificate.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    on_disk = serialization.load_pem_private_key(made.key_path.read_bytes(), password=None)
    assert isinstance(on_disk, ec.EllipticCurvePrivateKey)
    assert on_disk.public_key().public_numbers() == key.public_numbers()


def test_a_made_certificate_names_allowed_hosts_with_addresses_as_ip_entries(p256_settings):
    p256_settings.FORGE_EXTRA_ALLOWED_HOSTS = [".example.com", "*", "192.0.2.20"]

    made = server_certificate("192.0.2.10")

    san = san_of(made.certificate)
    assert san.get_values_for_type(x509.DNSName) == ["example.com", "*.example.com"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("192.0.2.10"),
        ipaddress.ip_address("192.0.2.20"),
    ]
    assert sorted(made.names) == sorted(["192.0.2.10", "example.com", "*.example.com", "192.0.2.20"])


def test_the_key_file_is_0600_in_a_0700_folder_and_the_record_says_what_it_was_made_for(p256_settings):
    made = server_certificate("127.0.0.1")

    folder = tls_folder(p256_settings)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(made.key_path.stat().st_mode) == 0o600
    assert json.loads((folder / "server.json").read_text()) == {"names": LOOPBACK, "key_type": "p256"}
    assert sorted(p.name for p in folder.iterdir()) == ["server.crt", "server.json", "server.key"]


def test_a_second_start_for_the_same_host_keeps_the_certificate_untouched(p256_settings):
    first = server_certificate("127.0.0.1")
    before = {
        name: file_state(tls_folder(p256_settings) / name) for name in ("server.crt", "server.key", "server.json")
    }

    second = server_certificate("127.0.0.1")

    assert cert_fingerprint(second.certificate) == cert_fingerprint(first.certificate)
    assert {name: file_state(tls_folder(p256_settings) / name) for name in before} == before


def test_a_loopback_bind_on_ipv6_keeps_the_certificate_made_for_ipv4_loopback(p256_settings):
    first = server_certificate("127.0.0.1")

    assert cert_fingerprint(server_certificate("::1").certificate) == cert_fingerprint(first.certificate)


def test_a_changed_bind_address_makes_a_new_certificate(p256_settings):
    first = server_certificate("127.0.0.1")

    second = server_certificate("127.0.0.2")

    assert cert_fingerprint(second.certificate) != cert_fingerprint(first.certificate)
    assert "127.0.0.2" in second.names
    assert x509.load_pem_x509_certificate(second.cert_path.read_bytes()) == second.certificate
    assert json.loads((tls_folder(p256_settings) / "server.json").read_text())["names"] == [*LOOPBACK, "127.0.0.2"]


def test_changed_allowed_hosts_make_a_new_certificate(p256_settings):
    first = server_certificate("127.0.0.1")
    p256_settings.FORGE_EXTRA_ALLOWED_HOSTS = ["forge.internal"]

    second = server_certificate("127.0.0.1")

    assert cert_fingerprint(second.certificate) != cert_fingerprint(first.certificate)
    assert "forge.internal" in second.names


def test_a_changed_key_type_makes_a_new_certificate(p256_settings):
    first = server_certificate("127.0.0.1")
    p256_settings.FORGE_TLS_KEY_TYPE = "rsa4096"

    second = server_certificate("127.0.0.1")

    assert cert_fingerprint(second.certificate) != cert_fingerprint(first.certificate)
    assert isinstance(second.certificate.public_key(), rsa.RSAPublicKey)
    assert json.loads((tls_folder(p256_settings) / "server.json").read_text())["key_type"] == "rsa4096"


def test_a_certificate_whose_key_file_is_gone_is_made_again(p256_settings):
    first = server_certificate("127.0.0.1")
    first.key_path.unlink()

    second = server_certificate("127.0.0.1")

    assert cert_fingerprint(second.certificate) != cert_fingerprint(first.certificate)
    assert second.key_path.exists()


def test_a_key_file_that_no_longer_matches_the_certificate_is_made_again(p256_settings):
    first = server_certificate("127.0.0.1")
    stray = ec.generate_private_key(ec.SECP256R1())
    first.key_path.write_bytes(
        stray.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )

    second = server_certificate("127.0.0.1")

    assert cert_fingerprint(second.certificate) != cert_fingerprint(first.certificate)
    on_disk = serialization.load_pem_private_key(second.key_path.read_bytes(), password=None)
    assert on_disk.public_key().public_numbers() == second.certificate.public_key().public_numbers()


# --- the operator's own pair -----------------------------------------------------------------------------


def test_an_operator_pair_is_served_as_is_and_nothing_is_made(tls_settings, tmp_path):
    cert_path, key_path = own_pair(tmp_path / "own")
    tls_settings.FORGE_TLS_CERT, tls_settings.FORGE_TLS_KEY = str(cert_path), str(key_path)

    served = server_certificate("127.0.0.1")

    assert served.generated is False
    assert (served.cert_path, served.key_path) == (cert_path.resolve(), key_path.resolve())
    assert served.certificate == x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert served.names == ["forge.example.com"]
    assert not tls_folder(tls_settings).exists()


def test_an_operator_certificate_with_another_key_is_refused(tls_settings, tmp_path):
    cert_path, _ = own_pair(tmp_path / "own")
    _, other_key = own_pair(tmp_path / "other")
    tls_settings.FORGE_TLS_CERT, tls_settings.FORGE_TLS_KEY = str(cert_path), str(other_key)

    with pytest.raises(TlsSetupError, match=r"is not the key of the certificate in .*own\.crt; give the pair"):
        server_certificate("127.0.0.1")


def test_a_missing_operator_file_is_refused_naming_the_file_and_the_settings(tls_settings, tmp_path):
    cert_path, key_path = own_pair(tmp_path / "own")
    key_path.unlink()
    tls_settings.FORGE_TLS_CERT, tls_settings.FORGE_TLS_KEY = str(cert_path), str(key_path)

    with pytest.raises(TlsSetupError) as refused:
        server_certificate("127.0.0.1")

    assert str(key_path) in str(refused.value)
    assert "check FORGE_TLS_CERT and FORGE_TLS_KEY" in str(refused.value)


def test_a_certificate_file_that_is_not_pem_is_refused(tls_settings, tmp_path):
    cert_path, key_path = own_pair(tmp_path / "own")
    certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.DER))
    tls_settings.FORGE_TLS_CERT, tls_settings.FORGE_TLS_KEY = str(cert_path), str(key_path)

    with pytest.raises(TlsSetupError, match="FORGE_TLS_CERT must be a PEM certificate"):
        server_certificate("127.0.0.1")


def test_a_key_file_that_is_not_pem_is_refused(tls_settings, tmp_path):
    cert_path, key_path = own_pair(tmp_path / "own")
    key_path.write_text("not a key\n")
    tls_settings.FORGE_TLS_CERT, tls_settings.FORGE_TLS_KEY = str(cert_path), str(key_path)

    with pytest.raises(TlsSetupError, match="FORGE_TLS_KEY an unencrypted PEM private key"):
        server_certificate("127.0.0.1")


def test_an_expired_operator_certificate_is_refused_saying_what_to_do(tls_settings, tmp_path):
    cert_path, key_path = own_pair(tmp_path / "own", expired=True)
    tls_settings.FORGE_TLS_CERT, tls_settings.FORGE_TLS_KEY = str(cert_path), str(key_path)

    with pytest.raises(TlsSetupError) as refused:
        server_certificate("127.0.0.1")

    message = str(refused.value)
    expired_on = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    assert f"expired on {expired_on}" in message
    assert "renew it" in message and "FORGE_TLS_CERT and FORGE_TLS_KEY" in message


@pytest.mark.parametrize("given", ["FORGE_TLS_CERT", "FORGE_TLS_KEY"])
def test_only_one_of_the_two_settings_is_refused_asking_for_both_or_neither(tls_settings, tmp_path, given):
    cert_path, key_path = own_pair(tmp_path / "own")
    setattr(tls_settings, given, str(cert_path if given == "FORGE_TLS_CERT" else key_path))

    with pytest.raises(TlsSetupError, match=r"Set both FORGE_TLS_CERT and FORGE_TLS_KEY .* or neither"):
        server_certificate("127.0.0.1")
    assert not tls_folder(tls_settings).exists()


# --- what a person is shown ------------------------------------------------------------------------------


def test_describe_carries_the_memorable_id_randomart_and_fingerprints(p256_settings):
    made = server_certificate("127.0.0.1")

    described = made.describe()

    art = key_art(made.certificate)
    assert described["memorable_id"] == art.memorable_id
    assert described["randomart"] == art.randomart
    assert described["fingerprint"] == art.fingerprint
    assert described["fingerprint"].startswith("SHA256:")
    assert described["fingerprint_sha256"] == made.certificate.fingerprint(hashes.SHA256()).hex(":")
    assert described["key_type"] == art.key_type and described["bits"] == 256
    assert described["generated"] is True
    assert sorted(described["names"]) == sorted(LOOPBACK)
    assert described["not_after"] == made.certificate.not_valid_after_utc.isoformat()


def test_a_looser_tls_folder_is_made_private_before_a_key_is_written_into_it(p256_settings):
    folder = tls_folder(p256_settings)
    folder.mkdir(parents=True)
    folder.chmod(0o755)

    server_certificate("127.0.0.1")

    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "server.key").stat().st_mode) == 0o600
