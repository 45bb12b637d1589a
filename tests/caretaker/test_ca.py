"""The team CA (caretaker.ca): the CA certificate, certificates issued from members' CSRs and the CRL, each
checked field by field and cross-checked by a real `openssl`; every refusal of a CSR from a really crafted
one; the CA's files on disk (modes, never overwritten, never half written) and every reason it cannot load."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, SignatureAlgorithmOID

from caretaker import ca as ca_module
from caretaker.ca import (
    KEY_TYPES,
    CaExists,
    CaUnavailable,
    CsrInfo,
    CsrRefused,
    TeamCa,
    cert_fingerprint,
    create_ca,
    inspect_csr,
    issue_certificate,
    load_ca,
    random_serial,
    sign_crl,
    write_ca,
)

OPENSSL = "/usr/bin/openssl"
FIXED_START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEAF_KEY_TYPES = ("ed25519", "rsa3072", "ecdsa-p256")

LeafKey = ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


# --- the cast: one CA of each key type and one leaf key of each kind, made once ------------------------------


@pytest.fixture(scope="module", params=KEY_TYPES)
def ca_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp(f"ca-{request.param}") / "ca"
    write_ca(directory, *create_ca(request.param, common_name=f"Team CA {request.param}"))
    return directory


@pytest.fixture(scope="module")
def team_ca(ca_dir: Path) -> TeamCa:
    return load_ca(ca_dir)


@pytest.fixture(scope="module")
def leaf_keys() -> dict[str, LeafKey]:
    return {
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "rsa3072": rsa.generate_private_key(public_exponent=65537, key_size=3072),
        "ecdsa-p256": ec.generate_private_key(ec.SECP256R1()),
    }


@pytest.fixture(scope="module")
def other_ed25519_ca() -> tuple[bytes, bytes]:
    return create_ca("ed25519", common_name="Another Team CA")


@pytest.fixture(scope="module")
def openssl() -> str:
    if not os.access(OPENSSL, os.X_OK):
        pytest.fail(f"{OPENSSL} is missing; `python3 forge.py test` installs openssl, which these cross-checks need.")
    return OPENSSL


def make_csr(
    key: object,
    *,
    common_name: str = "member",
    extensions: list[x509.ExtensionType] | None = None,
    algorithm: hashes.HashAlgorithm | None = None,
) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    )
    for extension in extensions or []:
        builder = builder.add_extension(extension, critical=False)
    needs_hash = not isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey)
    signed = builder.sign(key, algorithm or (hashes.SHA256() if needs_hash else None))  # type: ignore[arg-type]
    return signed.public_bytes(serialization.Encoding.PEM)


def issue(
    team_ca: TeamCa,
    csr: CsrInfo,
    *,
    common_name: str = "alice",
    serial: int = 4242,
    not_before: datetime | None = None,
    days: int = 30,
    dns_names: list[str] | None = None,
    uris: list[str] | None = None,
) -> x509.Certificate:
    pem = issue_certificate(
        team_ca,
        csr,
        common_name=common_name,
        serial=serial,
        not_before=not_before or datetime.now(UTC) - timedelta(minutes=1),
        days=days,
        dns_names=dns_names or [],
        uris=uris or [],
    )
    return x509.load_pem_x509_certificate(pem)


def run_openssl(openssl: str, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([openssl, *map(str, arguments)], capture_output=True, text=True, check=False, timeout=60)


def extension_value(certificate: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension:
    return certificate.extensions.get_extension_for_class(kind)


# --- the CA certificate --------------------------------------------------------------------------------------


def test_create_ca_makes_a_self_signed_v3_ca_with_the_listed_extensions(team_ca: TeamCa):
    cert = team_ca.certificate
    assert cert.version is x509.Version.v3
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"Team CA {team_ca.key_type}"
    cert.verify_directly_issued_by(cert)

    constraints = extension_value(cert, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca is True and constraints.value.path_length == 0
    usage = extension_value(cert, x509.KeyUsage)
    assert usage.critical
    assert (usage.value.key_cert_sign, usage.value.crl_sign, usage.value.digital_signature) == (True, True, True)
    assert not (usage.value.key_encipherment or usage.value.content_commitment or usage.value.key_agreement)
    ski = extension_value(cert, x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(team_ca.key.public_key())
    assert extension_value(cert, x509.AuthorityKeyIdentifier).value.key_identifier == ski.digest

    assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(days=3650)
    assert 0 < cert.serial_number < 2**159


def test_the_ca_key_is_of_its_type_and_signs_with_sha256_pkcs1v15_or_ed25519(team_ca: TeamCa):
    if team_ca.key_type == "rsa4096":
        assert isinstance(team_ca.key, rsa.RSAPrivateKey) and team_ca.key.key_size == 4096
        assert team_ca.certificate.signature_algorithm_oid == SignatureAlgorithmOID.RSA_WITH_SHA256
    else:
        assert isinstance(team_ca.key, ed25519.Ed25519PrivateKey)
        assert team_ca.certificate.signature_algorithm_oid == SignatureAlgorithmOID.ED25519


def test_create_ca_gives_an_unencrypted_pkcs8_key_and_a_fresh_serial_each_time():
    key_pem, cert_pem = create_ca()
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert cert_pem.startswith(b"-----BEGIN CERTIFICATE-----\n")
    again = x509.load_pem_x509_certificate(create_ca()[1])
    assert x509.load_pem_x509_certificate(cert_pem).serial_number != again.serial_number


def test_create_ca_starts_at_the_given_time():
    start = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    cert = x509.load_pem_x509_certificate(create_ca(now=start)[1])
    assert cert.not_valid_before_utc == start
    assert cert.not_valid_after_utc == start + timedelta(days=3650)


def test_create_ca_refuses_an_unknown_key_type_naming_the_choices():
    with pytest.raises(ValueError, match="ed25519, rsa4096"):
        create_ca("rsa2048")


def test_the_fingerprint_is_the_sha256_openssl_reports_in_lowercase(ca_dir: Path, team_ca: TeamCa, openssl: str):
    result = run_openssl(openssl, "x509", "-in", ca_dir / "ca.crt", "-noout", "-fingerprint", "-sha256")
    assert result.returncode == 0, result.stderr
    from_openssl = result.stdout.strip().split("=", 1)[1].lower()
    assert team_ca.fingerprint_sha256 == from_openssl == cert_fingerprint(team_ca.certificate)
    assert re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){31}", team_ca.fingerprint_sha256)


def test_random_serials_are_positive_below_2_to_the_159_and_distinct():
    serials = [random_serial() for _ in range(2000)]
    assert all(0 < serial < 2**159 for serial in serials)
    assert len(set(serials)) == len(serials)
    assert max(serials).bit_length() > 150


# --- issued certificates -------------------------------------------------------------------------------------


@pytest.mark.parametrize("leaf_type", LEAF_KEY_TYPES)
def test_openssl_verifies_an_issued_client_certificate_against_the_ca(
    ca_dir: Path, team_ca: TeamCa, leaf_keys: dict[str, LeafKey], leaf_type: str, openssl: str, tmp_path: Path
):
    csr = inspect_csr(make_csr(leaf_keys[leaf_type]))
    leaf = tmp_path / "leaf.pem"
    leaf.write_bytes(
        issue_certificate(
            team_ca,
            csr,
            common_name="alice",
            serial=random_serial(),
            not_before=datetime.now(UTC) - timedelta(minutes=5),
            days=30,
        )
    )
    result = run_openssl(openssl, "verify", "-purpose", "sslclient", "-CAfile", ca_dir / "ca.crt", leaf)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == f"{leaf}: OK"


@pytest.mark.parametrize("leaf_type", LEAF_KEY_TYPES)
def test_an_issued_certificate_carries_exactly_the_client_extensions(
    team_ca: TeamCa, leaf_keys: dict[str, LeafKey], leaf_type: str
):
    key = leaf_keys[leaf_type]
    cert = issue(team_ca, inspect_csr(make_csr(key)), dns_names=["alice.team.example"], uris=["forge:member/alice"])

    assert cert.public_key() == key.public_key()
    assert cert.issuer == team_ca.certificate.subject
    assert cert.serial_number == 4242
    constraints = extension_value(cert, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca is False
    usage = extension_value(cert, x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature
    assert usage.value.key_encipherment is (leaf_type == "rsa3072")
    assert not (usage.value.key_cert_sign or usage.value.crl_sign)
    assert list(extension_value(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    san = extension_value(cert, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["alice.team.example"]
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["forge:member/alice"]
    assert extension_value(cert, x509.SubjectKeyIdentifier).value == x509.SubjectKeyIdentifier.from_public_key(
        key.public_key()
    )
    ca_ski = extension_value(team_ca.certificate, x509.SubjectKeyIdentifier).value
    assert extension_value(cert, x509.AuthorityKeyIdentifier).value.key_identifier == ca_ski.digest
    cert.verify_directly_issued_by(team_ca.certificate)


def test_an_issued_certificate_is_named_by_the_caller_under_the_cas_name(team_ca: TeamCa, leaf_keys):
    cert = issue(team_ca, inspect_csr(make_csr(leaf_keys["ed25519"])), common_name="bob")
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "bob"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == team_ca.common_name
    assert len(cert.subject) == 2


def test_an_issued_certificate_has_no_san_when_no_names_are_given(team_ca: TeamCa, leaf_keys):
    cert = issue(team_ca, inspect_csr(make_csr(leaf_keys["ed25519"])))
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_an_issued_certificate_takes_nothing_from_the_csr_but_its_key(team_ca: TeamCa, leaf_keys):
    greedy = make_csr(
        leaf_keys["ecdsa-p256"],
        common_name="root",
        extensions=[
            x509.SubjectAlternativeName([x509.DNSName("evil.example"), x509.UniformResourceIdentifier("https://evil")]),
            x509.KeyUsage(True, True, True, True, True, True, True, False, False),
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
            x509.NameConstraints(permitted_subtrees=[x509.DNSName("evil.example")], excluded_subtrees=None),
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.55555.1"), b"\x05\x00"),
        ],
    )
    cert = issue(team_ca, inspect_csr(greedy), common_name="carol", dns_names=["carol.team.example"])

    assert cert.subject.rfc4514_string() == f"CN=carol,O={team_ca.common_name}"
    san = extension_value(cert, x509.SubjectAlternativeName).value
    assert list(san) == [x509.DNSName("carol.team.example")]
    usage = extension_value(cert, x509.KeyUsage).value
    assert usage.digital_signature and not (usage.key_cert_sign or usage.crl_sign or usage.content_commitment)
    assert {extension.oid for extension in cert.extensions} == {
        x509.BasicConstraints.oid,
        x509.KeyUsage.oid,
        x509.ExtendedKeyUsage.oid,
        x509.SubjectAlternativeName.oid,
        x509.SubjectKeyIdentifier.oid,
        x509.AuthorityKeyIdentifier.oid,
    }


def test_an_issued_certificate_runs_for_the_given_days(team_ca: TeamCa, leaf_keys):
    start = datetime(2027, 6, 1, 8, 30, tzinfo=UTC)
    cert = issue(team_ca, inspect_csr(make_csr(leaf_keys["ed25519"])), not_before=start, days=90)
    assert cert.not_valid_before_utc == start
    assert cert.not_valid_after_utc == start + timedelta(days=90)


def test_an_issued_certificate_ends_no_later_than_the_ca(team_ca: TeamCa, leaf_keys):
    ca_end = team_ca.certificate.not_valid_after_utc
    start = ca_end - timedelta(days=10)
    cert = issue(team_ca, inspect_csr(make_csr(leaf_keys["ed25519"])), not_before=start, days=365)
    assert cert.not_valid_after_utc == ca_end


def test_issuing_after_the_cas_end_is_refused(team_ca: TeamCa, leaf_keys):
    csr = inspect_csr(make_csr(leaf_keys["ed25519"]))
    with pytest.raises(ValueError, match="past the team CA's end"):
        issue(team_ca, csr, not_before=team_ca.certificate.not_valid_after_utc + timedelta(days=1))


@pytest.mark.parametrize("serial", [0, -5, 2**159])
def test_issuing_with_a_serial_out_of_range_is_refused(team_ca: TeamCa, leaf_keys, serial: int):
    with pytest.raises(ValueError, match="random_serial"):
        issue(team_ca, inspect_csr(make_csr(leaf_keys["ed25519"])), serial=serial)


@pytest.mark.parametrize("leaf_type", LEAF_KEY_TYPES)
def test_issuing_is_deterministic(ca_dir: Path, team_ca: TeamCa, leaf_keys: dict[str, LeafKey], leaf_type: str):
    def issued(ca: TeamCa, serial: int = 77) -> bytes:
        csr = inspect_csr(make_csr(leaf_keys[leaf_type]))
        return issue_certificate(
            ca, csr, common_name="dave", serial=serial, not_before=FIXED_START, days=10, dns_names=["d.example"]
        )

    first = issued(team_ca)
    # A fresh CSR from the same key (a new signature for ECDSA) and a freshly loaded CA change nothing.
    assert issued(load_ca(ca_dir)) == first
    assert issued(team_ca, serial=78) != first


# --- the CRL ---------------------------------------------------------------------------------------------------


def test_openssl_verifies_the_crl_and_lists_the_revoked_serials(
    ca_dir: Path, team_ca: TeamCa, openssl: str, tmp_path: Path
):
    now = datetime.now(UTC)
    serials = [random_serial(), 5, 0xABCDEF]
    crl_path = tmp_path / "crl.pem"
    crl_path.write_bytes(
        sign_crl(
            team_ca,
            [(serial, now - timedelta(hours=1)) for serial in serials],
            this_update=now,
            next_update=now + timedelta(days=7),
            crl_number=3,
        )
    )
    verified = run_openssl(openssl, "crl", "-in", crl_path, "-CAfile", ca_dir / "ca.crt", "-noout", "-verify")
    assert verified.returncode == 0, verified.stderr
    assert "verify OK" in verified.stdout + verified.stderr

    text = run_openssl(openssl, "crl", "-in", crl_path, "-noout", "-text")
    assert text.returncode == 0, text.stderr
    listed = [int(hex_serial, 16) for hex_serial in re.findall(r"Serial Number: ([0-9A-F]+)", text.stdout)]
    assert sorted(listed) == sorted(serials)
    assert re.search(r"X509v3 CRL Number: \n\s+3\n", text.stdout)


def test_the_crl_carries_its_number_and_the_cas_key_identifier(team_ca: TeamCa):
    crl = x509.load_pem_x509_crl(
        sign_crl(
            team_ca,
            [(9, FIXED_START)],
            this_update=FIXED_START,
            next_update=FIXED_START + timedelta(days=1),
            crl_number=12,
        )
    )
    assert crl.is_signature_valid(team_ca.key.public_key())
    assert crl.issuer == team_ca.certificate.subject
    assert crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number == 12
    ca_ski = extension_value(team_ca.certificate, x509.SubjectKeyIdentifier).value
    assert crl.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier == ca_ski.digest
    entry = crl.get_revoked_certificate_by_serial_number(9)
    assert entry is not None and entry.revocation_date_utc == FIXED_START
    assert (crl.last_update_utc, crl.next_update_utc) == (FIXED_START, FIXED_START + timedelta(days=1))


def test_an_empty_crl_is_signed_too(team_ca: TeamCa):
    crl = x509.load_pem_x509_crl(
        sign_crl(team_ca, [], this_update=FIXED_START, next_update=FIXED_START + timedelta(days=1), crl_number=0)
    )
    assert len(crl) == 0 and crl.is_signature_valid(team_ca.key.public_key())


def test_signing_the_crl_is_deterministic_whatever_the_order_of_revocations(team_ca: TeamCa):
    revoked = [(11, FIXED_START), (3, FIXED_START + timedelta(hours=2)), (2**100, FIXED_START)]

    def signed(entries: list[tuple[int, datetime]], crl_number: int = 4) -> bytes:
        return sign_crl(
            team_ca,
            entries,
            this_update=FIXED_START,
            next_update=FIXED_START + timedelta(days=7),
            crl_number=crl_number,
        )

    first = signed(revoked)
    assert signed(list(reversed(revoked))) == first
    assert signed(revoked, crl_number=5) != first


def test_a_crl_listing_a_serial_twice_or_ending_before_it_starts_is_refused(team_ca: TeamCa):
    later = FIXED_START + timedelta(days=1)
    with pytest.raises(ValueError, match="listed twice"):
        sign_crl(team_ca, [(7, FIXED_START), (7, later)], this_update=FIXED_START, next_update=later, crl_number=1)
    with pytest.raises(ValueError, match="next_update"):
        sign_crl(team_ca, [], this_update=later, next_update=FIXED_START, crl_number=1)


# --- screening CSRs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("leaf_type", "key_type", "bits"),
    [("ed25519", "ED25519", 256), ("rsa3072", "RSA", 3072), ("ecdsa-p256", "ECDSA", 256)],
)
def test_inspect_csr_accepts_the_supported_keys(leaf_keys, leaf_type: str, key_type: str, bits: int):
    pem = make_csr(leaf_keys[leaf_type])
    info = inspect_csr(pem)
    assert (info.key_type, info.bits, info.pem) == (key_type, bits, pem)


@pytest.mark.parametrize("curve", [ec.SECP384R1(), ec.SECP521R1()])
def test_inspect_csr_accepts_ecdsa_p384_and_p521(curve: ec.EllipticCurve):
    info = inspect_csr(make_csr(ec.generate_private_key(curve)))
    assert (info.key_type, info.bits) == ("ECDSA", curve.key_size)


def test_inspect_csr_reads_der_and_text_alike(leaf_keys):
    pem = make_csr(leaf_keys["ed25519"])
    der = x509.load_pem_x509_csr(pem).public_bytes(serialization.Encoding.DER)
    assert inspect_csr(der).pem == inspect_csr(pem.decode()).pem == pem


def test_inspect_csr_accepts_a_request_for_client_auth_alone(leaf_keys):
    pem = make_csr(leaf_keys["ed25519"], extensions=[x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])])
    assert inspect_csr(pem).key_type == "ED25519"


def refusal(data: bytes | str) -> CsrRefused:
    with pytest.raises(CsrRefused) as caught:
        inspect_csr(data)
    assert str(caught.value)
    return caught.value


@pytest.mark.parametrize(
    "data",
    [
        b"not a csr at all",
        b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        b"",
        "\u00e9t\u00e9",
    ],
)
def test_inspect_csr_refuses_what_is_not_a_csr_as_unreadable(data: bytes | str):
    assert refusal(data).reason == "unreadable"


def test_inspect_csr_refuses_a_certificate_as_unreadable(team_ca: TeamCa):
    assert refusal(team_ca.certificate.public_bytes(serialization.Encoding.PEM)).reason == "unreadable"


@pytest.mark.parametrize("leaf_type", LEAF_KEY_TYPES)
def test_inspect_csr_refuses_a_csr_whose_signature_was_tampered_with(leaf_keys, leaf_type: str):
    der = bytearray(x509.load_pem_x509_csr(make_csr(leaf_keys[leaf_type])).public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01  # the signature BIT STRING is the last element of the DER
    refused = refusal(bytes(der))
    assert refused.reason == "bad_signature"
    assert "generate the CSR again" in str(refused)


def test_inspect_csr_refuses_rsa_2048_as_weak():
    refused = refusal(make_csr(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    assert refused.reason == "weak_key"
    assert "2048 bits" in str(refused) and "3072" in str(refused)


@pytest.mark.parametrize(
    "make_key",
    [
        pytest.param(lambda: dsa.generate_private_key(2048), id="dsa"),
        pytest.param(ed448.Ed448PrivateKey.generate, id="ed448"),
        pytest.param(lambda: ec.generate_private_key(ec.SECP256K1()), id="secp256k1"),
    ],
)
def test_inspect_csr_refuses_other_key_types_as_unsupported(make_key):
    refused = refusal(make_csr(make_key()))
    assert refused.reason == "unsupported_key"
    assert "Ed25519" in str(refused)


def test_inspect_csr_refuses_a_request_to_be_a_ca(leaf_keys):
    pem = make_csr(leaf_keys["ed25519"], extensions=[x509.BasicConstraints(ca=True, path_length=None)])
    assert refusal(pem).reason == "ca_requested"


def test_inspect_csr_accepts_basic_constraints_that_ask_for_no_ca(leaf_keys):
    pem = make_csr(leaf_keys["ed25519"], extensions=[x509.BasicConstraints(ca=False, path_length=None)])
    assert inspect_csr(pem).key_type == "ED25519"


@pytest.mark.parametrize(
    "usages",
    [
        [ExtendedKeyUsageOID.SERVER_AUTH],
        [ExtendedKeyUsageOID.CODE_SIGNING],
        [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
        [ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE],
    ],
)
def test_inspect_csr_refuses_any_extended_key_usage_but_client_auth(leaf_keys, usages):
    pem = make_csr(leaf_keys["ed25519"], extensions=[x509.ExtendedKeyUsage(usages)])
    assert refusal(pem).reason == "extra_eku"


def test_inspect_csr_refuses_a_csr_over_16_kib_before_reading_it(leaf_keys):
    padding = x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.55555.2"), b"x" * 17_000)
    pem = make_csr(leaf_keys["ed25519"], extensions=[padding])
    assert len(pem) > 16 * 1024
    assert refusal(pem).reason == "too_large"


# --- the CA on disk ----------------------------------------------------------------------------------------------


def test_write_ca_stores_the_key_0600_and_the_certificate_0644_in_a_0700_directory(tmp_path: Path):
    directory = tmp_path / "deep" / "ca"
    key_pem, cert_pem = create_ca()
    old_umask = os.umask(0o022)
    try:
        write_ca(directory, key_pem, cert_pem)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "ca.crt").stat().st_mode) == 0o644
    assert (directory / "ca.key").read_bytes() == key_pem
    assert (directory / "ca.crt").read_bytes() == cert_pem
    assert sorted(path.name for path in directory.iterdir()) == ["ca.crt", "ca.key"]


def test_write_ca_then_load_ca_gives_back_the_same_ca(tmp_path: Path):
    key_pem, cert_pem = create_ca(common_name="Round Trip CA")
    write_ca(tmp_path / "ca", key_pem, cert_pem)
    loaded = load_ca(tmp_path / "ca")
    assert loaded.certificate == x509.load_pem_x509_certificate(cert_pem)
    assert (loaded.key_type, loaded.common_name) == ("ed25519", "Round Trip CA")


@pytest.mark.parametrize("existing", ["ca.key", "ca.crt"])
def test_write_ca_never_overwrites_an_existing_ca_file(tmp_path: Path, existing: str):
    directory = tmp_path / "ca"
    directory.mkdir(mode=0o700)
    (directory / existing).write_bytes(b"the old one\n")
    with pytest.raises(CaExists, match="never overwritten"):
        write_ca(directory, *create_ca())
    assert (directory / existing).read_bytes() == b"the old one\n"
    assert [path.name for path in directory.iterdir()] == [existing]


def test_write_ca_over_a_whole_ca_leaves_it_unchanged(tmp_path: Path, other_ed25519_ca):
    directory = tmp_path / "ca"
    write_ca(directory, *other_ed25519_ca)
    with pytest.raises(CaExists):
        write_ca(directory, *create_ca())
    assert (directory / "ca.key").read_bytes() == other_ed25519_ca[0]
    assert (directory / "ca.crt").read_bytes() == other_ed25519_ca[1]


def test_write_ca_removes_the_key_again_when_the_certificate_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    real_link = os.link

    def link_failing_for_the_certificate(source, target, *args, **kwargs):
        if Path(target).name == "ca.crt":
            raise OSError(28, "No space left on device")
        return real_link(source, target, *args, **kwargs)

    monkeypatch.setattr(ca_module.os, "link", link_failing_for_the_certificate)
    directory = tmp_path / "ca"
    with pytest.raises(OSError, match="No space left"):
        write_ca(directory, *create_ca())
    assert list(directory.iterdir()) == []


def test_write_ca_refuses_a_key_and_certificate_that_do_not_match(tmp_path: Path, other_ed25519_ca):
    key_pem, _ = create_ca()
    with pytest.raises(ValueError, match="do not belong together"):
        write_ca(tmp_path / "ca", key_pem, other_ed25519_ca[1])
    assert not (tmp_path / "ca").exists()


def load_reason(directory: Path, **kwargs: datetime) -> CaUnavailable:
    with pytest.raises(CaUnavailable) as caught:
        load_ca(directory, **kwargs)
    return caught.value


def test_load_ca_of_an_empty_or_absent_directory_is_missing(tmp_path: Path):
    assert load_reason(tmp_path / "nowhere").reason == "missing"
    tmp_path.joinpath("ca").mkdir()
    refused = load_reason(tmp_path / "ca")
    assert refused.reason == "missing" and "create one" in str(refused)


def test_load_ca_with_only_the_key_is_missing(tmp_path: Path, other_ed25519_ca):
    (tmp_path / "ca.key").write_bytes(other_ed25519_ca[0])
    refused = load_reason(tmp_path)
    assert refused.reason == "missing" and "ca.crt" in str(refused)


@pytest.mark.parametrize("garbled", ["ca.key", "ca.crt"])
def test_load_ca_with_a_garbled_file_is_unreadable(tmp_path: Path, other_ed25519_ca, garbled: str):
    write_ca(tmp_path / "ca", *other_ed25519_ca)
    (tmp_path / "ca" / garbled).chmod(0o600)
    (tmp_path / "ca" / garbled).write_bytes(b"-----BEGIN garbage-----\nnope\n")
    refused = load_reason(tmp_path / "ca")
    assert refused.reason == "unreadable" and garbled in str(refused)


def test_load_ca_with_an_encrypted_key_is_unreadable(tmp_path: Path, other_ed25519_ca):
    key = serialization.load_pem_private_key(other_ed25519_ca[0], password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
    )
    (tmp_path / "ca.key").write_bytes(encrypted)
    (tmp_path / "ca.crt").write_bytes(other_ed25519_ca[1])
    assert load_reason(tmp_path).reason == "unreadable"


def test_load_ca_with_the_key_of_another_ca_is_a_mismatch(tmp_path: Path, other_ed25519_ca):
    _, cert_pem = create_ca()
    (tmp_path / "ca.key").write_bytes(other_ed25519_ca[0])
    (tmp_path / "ca.crt").write_bytes(cert_pem)
    refused = load_reason(tmp_path)
    assert refused.reason == "mismatch" and "do not belong together" in str(refused)


def test_load_ca_of_a_client_certificate_and_its_key_is_not_a_ca(tmp_path: Path, team_ca: TeamCa):
    member_key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "ca.key").write_bytes(
        member_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (tmp_path / "ca.crt").write_bytes(
        issue_certificate(
            team_ca, inspect_csr(make_csr(member_key)), common_name="eve", serial=1, not_before=FIXED_START, days=1
        )
    )
    assert load_reason(tmp_path).reason == "not_a_ca"


def test_load_ca_after_its_end_is_expired(tmp_path: Path):
    write_ca(tmp_path / "ca", *create_ca(now=datetime.now(UTC) - timedelta(days=3651)))
    refused = load_reason(tmp_path / "ca")
    assert refused.reason == "expired" and "create a new one" in str(refused)


def test_load_ca_is_fine_up_to_the_last_moment_of_the_ca(tmp_path: Path, other_ed25519_ca):
    write_ca(tmp_path / "ca", *other_ed25519_ca)
    end = x509.load_pem_x509_certificate(other_ed25519_ca[1]).not_valid_after_utc
    assert load_ca(tmp_path / "ca", now=end).certificate.not_valid_after_utc == end
    assert load_reason(tmp_path / "ca", now=end + timedelta(seconds=1)).reason == "expired"
