"""The signed roster files (caretaker.roster): the exact layout of peers.toml and revoked.toml, signing and
verifying with Ed25519 and RSA-PSS CA keys (cross-checked by `openssl`), and each attack refused with its
own reason: tampering, a foreign CA, a replay, an expired roster, mixed files, a missing or doubled
signature line, garbage. Pure: keys and self-signed CA certificates are made here with cryptography."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from caretaker.roster import (
    Peer,
    Revoked,
    Roster,
    RosterRefused,
    certificate_fingerprint,
    evaluate,
    sign_roster,
    toml_string,
    verify_file,
    verify_roster,
)

SIGNED = datetime(2026, 5, 12, 18, 0, tzinfo=UTC)
EXPIRES = datetime(2026, 8, 10, 18, 0, tzinfo=UTC)
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
FP_A = ":".join(["ab"] * 32)
FP_B = ":".join(["cd"] * 32)
FP_C = ":".join(["ef"] * 32)

ALICE = Peer(name="alice@team", fingerprint_sha256=FP_A, role="author", endpoint="https://alice-ws.factory:7531")
BOB = Peer(name="bob@team", fingerprint_sha256=FP_B, role="caretaker", endpoint="https://bob-ws.factory:7531")
CAROL = Revoked(
    name="carol@team", fingerprint_sha256=FP_C, serial="1f", reason="key lost", revoked_ts="2026-05-01T09:30:00Z"
)


def make_ca(key: Ed25519PrivateKey | rsa.RSAPrivateKey, common_name: str) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime(2026, 1, 1, tzinfo=UTC))
        .not_valid_after(datetime(2036, 1, 1, tzinfo=UTC))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    return builder.sign(key, None) if isinstance(key, Ed25519PrivateKey) else builder.sign(key, hashes.SHA256())


@pytest.fixture(scope="module")
def team_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


@pytest.fixture(scope="module")
def team_ca(team_key: Ed25519PrivateKey) -> x509.Certificate:
    return make_ca(team_key, "Forge Team CA")


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=3072)


@pytest.fixture(scope="module")
def rsa_ca(rsa_key: rsa.RSAPrivateKey) -> x509.Certificate:
    return make_ca(rsa_key, "Forge RSA CA")


@pytest.fixture(scope="module")
def rogue_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def rogue_ca(rogue_key: Ed25519PrivateKey) -> x509.Certificate:
    return make_ca(rogue_key, "Forge Team CA")


def signed(key, ca, *, peers=(ALICE, BOB), revoked=(CAROL,), sequence=5, expires=EXPIRES) -> Roster:
    return sign_roster(
        peers, revoked, sequence_number=sequence, signed_ts=SIGNED, expires=expires, ca_key=key, ca_certificate=ca
    )


def refusal(peers_toml: bytes, revoked_toml: bytes, trusted: list[x509.Certificate], now: datetime = NOW) -> str:
    with pytest.raises(RosterRefused) as refused:
        verify_roster(peers_toml, revoked_toml, trusted=trusted, now=now)
    assert str(refused.value)
    return refused.value.reason


def signature_line(text: bytes) -> bytes:
    match = re.search(rb"^signature_b64 = .*\n", text, re.MULTILINE)
    assert match is not None
    return match.group(0)


def resigned(text: bytes, key: Ed25519PrivateKey) -> bytes:
    """What an attacker holding some other key can do: sign the edited payload and put the line back."""
    payload = text.replace(signature_line(text), b"")
    new_line = b'signature_b64 = "' + base64.b64encode(key.sign(payload)) + b'"\n'
    return text.replace(signature_line(text), new_line)


# Layout


def test_a_small_peers_toml_is_written_exactly_in_the_fixed_layout(team_key, team_ca):
    roster = signed(team_key, team_ca, peers=(BOB, ALICE), revoked=(CAROL,), sequence=17)
    revoked_text = (
        "[meta]\n"
        "sequence_number = 17\n"
        'signed_ts = "2026-05-12T18:00:00Z"\n'
        'signed_by = "Forge Team CA"\n'
        f'ca_fingerprint_sha256 = "{certificate_fingerprint(team_ca)}"\n'
        'expires = "2026-08-10T18:00:00Z"\n'
        "\n"
        "[[revoked]]\n"
        'name = "carol@team"\n'
        f'fingerprint_sha256 = "{FP_C}"\n'
        'serial = "1f"\n'
        'reason = "key lost"\n'
        'revoked_ts = "2026-05-01T09:30:00Z"\n'
    )
    revoked_sha256 = hashlib.sha256(revoked_text.encode()).hexdigest()
    signature = signature_line(roster.peers_toml).decode()
    assert roster.peers_toml.decode() == (
        "[meta]\n"
        "sequence_number = 17\n"
        'signed_ts = "2026-05-12T18:00:00Z"\n'
        'signed_by = "Forge Team CA"\n'
        f'ca_fingerprint_sha256 = "{certificate_fingerprint(team_ca)}"\n'
        'expires = "2026-08-10T18:00:00Z"\n'
        f'revoked_sha256 = "{revoked_sha256}"\n'
        f"{signature}"
        "\n"
        "[[peer]]\n"
        'name = "alice@team"\n'
        f'fingerprint_sha256 = "{FP_A}"\n'
        'role = "author"\n'
        'endpoint = "https://alice-ws.factory:7531"\n'
        "\n"
        "[[peer]]\n"
        'name = "bob@team"\n'
        f'fingerprint_sha256 = "{FP_B}"\n'
        'role = "caretaker"\n'
        'endpoint = "https://bob-ws.factory:7531"\n'
    )
    payload = roster.peers_toml.replace(signature.encode(), b"")
    raw_signature = base64.b64decode(signature.split('"')[1], validate=True)
    team_key.public_key().verify(raw_signature, payload)


def test_the_ca_fingerprint_is_the_sha256_of_the_certificate_der_in_colon_hex(team_ca):
    digest = hashlib.sha256(team_ca.public_bytes(serialization.Encoding.DER)).hexdigest()
    assert certificate_fingerprint(team_ca) == ":".join(digest[i : i + 2] for i in range(0, 64, 2))


def test_each_file_names_the_sha256_of_the_other_files_body(team_key, team_ca):
    roster = signed(team_key, team_ca)

    def body(text: bytes) -> bytes:
        return b"".join(
            line
            for line in text.splitlines(keepends=True)
            if not line.startswith((b"signature_b64 =", b"peers_sha256 =", b"revoked_sha256 ="))
        )

    peers_meta = tomllib.loads(roster.peers_toml.decode())["meta"]
    revoked_meta = tomllib.loads(roster.revoked_toml.decode())["meta"]
    assert peers_meta["revoked_sha256"] == hashlib.sha256(body(roster.revoked_toml)).hexdigest()
    assert revoked_meta["peers_sha256"] == hashlib.sha256(body(roster.peers_toml)).hexdigest()


def test_revoked_entries_are_sorted_by_serial_value_and_peers_by_name(team_key, team_ca):
    late = Revoked(name="zed", fingerprint_sha256=FP_A, serial="10", reason="left", revoked_ts="2026-05-02T00:00:00Z")
    early = Revoked(name="amy", fingerprint_sha256=FP_B, serial="a", reason="left", revoked_ts="2026-05-02T00:00:00Z")
    roster = signed(team_key, team_ca, peers=(BOB, ALICE), revoked=(late, early))
    assert [entry.serial for entry in roster.revoked] == ["a", "10"]
    assert [peer.name for peer in roster.peers] == ["alice@team", "bob@team"]
    assert roster.revoked_toml.index(b'serial = "a"') < roster.revoked_toml.index(b'serial = "10"')


def test_ed25519_signing_is_deterministic(team_key, team_ca):
    assert signed(team_key, team_ca).digest == signed(team_key, team_ca).digest


# Round trips


def test_an_ed25519_roster_round_trips_through_verify(team_key, team_ca):
    roster = signed(team_key, team_ca)
    verified = verify_roster(roster.peers_toml, roster.revoked_toml, trusted=[team_ca], now=NOW)
    assert verified == roster
    assert verified.peers == (ALICE, BOB) and verified.revoked == (CAROL,)
    assert verified.meta.sequence_number == 5 and verified.meta.signed_by == "Forge Team CA"
    assert verified.meta.ca_fingerprint_sha256 == certificate_fingerprint(team_ca)


def test_an_rsa_roster_round_trips_through_verify_with_pss(rsa_key, rsa_ca, team_ca):
    roster = signed(rsa_key, rsa_ca)
    verified = verify_roster(roster.peers_toml, roster.revoked_toml, trusted=[team_ca, rsa_ca], now=NOW)
    assert verified.peers == (ALICE, BOB) and verified.meta.signed_by == "Forge RSA CA"
    assert len(base64.b64decode(tomllib.loads(roster.peers_toml.decode())["meta"]["signature_b64"])) == 384


def test_openssl_verifies_the_ed25519_signature(team_key, team_ca, tmp_path: Path):
    roster = signed(team_key, team_ca)
    public = tmp_path / "ca.pem"
    public.write_bytes(team_ca.public_bytes(serialization.Encoding.PEM))
    assert openssl_verifies(roster.peers_toml, public, tmp_path, ["pkeyutl", "-verify", "-rawin", "-certin"])


def test_openssl_verifies_the_rsa_pss_signature_with_salt_length_32(rsa_key, rsa_ca, tmp_path: Path):
    roster = signed(rsa_key, rsa_ca)
    public = tmp_path / "ca.pub"
    public.write_bytes(
        rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    options = ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:32", "-sigopt", "rsa_mgf1_md:sha256"]
    assert openssl_verifies(roster.revoked_toml, public, tmp_path, ["dgst", "-sha256", *options, "-verify"])


def openssl_verifies(text: bytes, public: Path, tmp_path: Path, command: list[str]) -> bool:
    line = signature_line(text)
    (tmp_path / "payload").write_bytes(text.replace(line, b""))
    (tmp_path / "sig").write_bytes(base64.b64decode(line.split(b'"')[1]))
    if command[0] == "pkeyutl":
        args = [*command, "-inkey", str(public), "-in", "payload", "-sigfile", "sig"]
    else:
        args = [*command, str(public), "-signature", "sig", "payload"]
    result = subprocess.run(["openssl", *args], cwd=tmp_path, capture_output=True, check=False)
    return result.returncode == 0 and b"Verified" in result.stdout + result.stderr


def test_names_with_quotes_backslashes_controls_and_unicode_round_trip(team_key, team_ca):
    odd = Peer(
        name='Zoë "the" \\admin\\ 東京 🚀\t\x01\x7f',
        fingerprint_sha256=FP_C,
        role='role "x"',
        endpoint="https://ü.example:1/\\path",
    )
    odd_revoked = Revoked(
        name='"\\\n"', fingerprint_sha256=FP_A, serial="0", reason="line\r\nbreak", revoked_ts="2026-05-01T00:00:00Z"
    )
    roster = signed(team_key, team_ca, peers=(odd, ALICE), revoked=(odd_revoked,))
    verified = verify_roster(roster.peers_toml, roster.revoked_toml, trusted=[team_ca], now=NOW)
    assert odd in verified.peers and verified.revoked == (odd_revoked,)
    assert roster.peers_toml.count(b"\n") == roster.peers_toml.decode().count("\n")
    assert b"\r" not in roster.revoked_toml


def test_every_character_of_the_first_planes_reads_back_as_written():
    text = "".join(chr(code) for code in range(0x2100) if not 0xD800 <= code < 0xE000) + "\U0001f600"
    assert tomllib.loads(f"value = {toml_string(text)}\n")["value"] == text


# Attacks on one file


def test_a_tampered_peer_role_is_a_bad_signature(team_key, team_ca):
    roster = signed(team_key, team_ca)
    tampered = roster.peers_toml.replace(b'role = "author"', b'role = "caretaker"')
    assert tampered != roster.peers_toml
    assert refusal(tampered, roster.revoked_toml, [team_ca]) == "bad_signature"


@pytest.mark.parametrize(
    ("before", "after"),
    [(b"sequence_number = 5\n", b"sequence_number = 6\n"), (b'expires = "2026-08', b'expires = "2027-08')],
)
def test_tampered_meta_is_a_bad_signature(team_key, team_ca, before, after):
    roster = signed(team_key, team_ca)
    peers, revoked = roster.peers_toml.replace(before, after), roster.revoked_toml.replace(before, after)
    assert peers != roster.peers_toml and revoked != roster.revoked_toml
    assert refusal(peers, revoked, [team_ca]) == "bad_signature"


def test_a_tampered_signature_is_a_bad_signature(team_key, team_ca):
    roster = signed(team_key, team_ca)
    line = signature_line(roster.peers_toml)
    raw = bytearray(base64.b64decode(line.split(b'"')[1]))
    raw[0] ^= 1
    forged = roster.peers_toml.replace(line, b'signature_b64 = "' + base64.b64encode(bytes(raw)) + b'"\n')
    assert refusal(forged, roster.revoked_toml, [team_ca]) == "bad_signature"


def test_a_roster_signed_by_another_ca_is_untrusted(team_ca, rogue_key, rogue_ca):
    roster = signed(rogue_key, rogue_ca)
    assert refusal(roster.peers_toml, roster.revoked_toml, [team_ca]) == "untrusted_ca"


def test_a_roster_naming_the_trusted_ca_but_signed_by_another_key_is_a_bad_signature(team_ca, rogue_key, rogue_ca):
    roster = signed(rogue_key, rogue_ca)
    rogue_fp, team_fp = certificate_fingerprint(rogue_ca).encode(), certificate_fingerprint(team_ca).encode()
    peers = resigned(roster.peers_toml.replace(rogue_fp, team_fp), rogue_key)
    revoked = resigned(roster.revoked_toml.replace(rogue_fp, team_fp), rogue_key)
    assert tomllib.loads(peers.decode())["meta"]["ca_fingerprint_sha256"] == team_fp.decode()
    assert refusal(peers, revoked, [team_ca]) == "bad_signature"


def test_a_missing_signature_line_is_refused(team_key, team_ca):
    roster = signed(team_key, team_ca)
    unsigned = roster.peers_toml.replace(signature_line(roster.peers_toml), b"")
    assert refusal(unsigned, roster.revoked_toml, [team_ca]) == "missing_signature"


def test_an_empty_signature_is_refused_as_missing(team_key, team_ca):
    roster = signed(team_key, team_ca)
    empty = roster.revoked_toml.replace(signature_line(roster.revoked_toml), b'signature_b64 = ""\n')
    assert refusal(roster.peers_toml, empty, [team_ca]) == "missing_signature"


def test_two_signature_lines_are_malformed(team_key, team_ca):
    roster = signed(team_key, team_ca)
    line = signature_line(roster.peers_toml)
    in_a_peer_table = roster.peers_toml + line
    assert tomllib.loads(in_a_peer_table.decode())["peer"][-1]["signature_b64"]
    assert refusal(in_a_peer_table, roster.revoked_toml, [team_ca]) == "malformed"
    assert refusal(roster.peers_toml.replace(line, line + line), roster.revoked_toml, [team_ca]) == "malformed"


def test_a_signature_line_in_another_form_is_malformed(team_key, team_ca):
    roster = signed(team_key, team_ca)
    line = signature_line(roster.peers_toml)
    spaced = roster.peers_toml.replace(line, line.replace(b" = ", b"  =  "))
    assert tomllib.loads(spaced.decode())["meta"]["signature_b64"]
    assert refusal(spaced, roster.revoked_toml, [team_ca]) == "malformed"


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\xff\xfe garbage \x80", b"", b"not = [toml", b"[meta\n", '[meta]\nname = "\u00e9\n'.encode()],
)
def test_garbage_is_malformed(team_key, team_ca, garbage):
    roster = signed(team_key, team_ca)
    assert refusal(garbage, roster.revoked_toml, [team_ca]) == "malformed"
    with pytest.raises(RosterRefused) as refused:
        verify_file(garbage + signature_line(roster.peers_toml), trusted=[team_ca], now=NOW)
    assert refused.value.reason == "malformed"


def test_a_meta_table_without_any_signature_is_missing_its_signature(team_key, team_ca):
    roster = signed(team_key, team_ca)
    assert refusal(b"[meta]\nsequence_number = 1\n", roster.revoked_toml, [team_ca]) == "missing_signature"


def test_a_bad_fingerprint_format_is_malformed(team_key, team_ca):
    roster = signed(team_key, team_ca)
    upper = roster.peers_toml.replace(FP_A.encode(), FP_A.upper().encode())
    assert refusal(upper, roster.revoked_toml, [team_ca]) == "malformed"


def test_an_unexpected_key_is_malformed(team_key, team_ca):
    roster = signed(team_key, team_ca)
    extra = roster.peers_toml.replace(b'role = "author"\n', b'role = "author"\nadmin = "yes"\n')
    assert refusal(extra, roster.revoked_toml, [team_ca]) == "malformed"


def test_the_two_files_swapped_are_malformed(team_key, team_ca):
    roster = signed(team_key, team_ca)
    assert refusal(roster.revoked_toml, roster.peers_toml, [team_ca]) == "malformed"


# The two files together, and time


def test_a_peers_toml_with_an_older_revoked_toml_is_mixed(team_key, team_ca):
    older = signed(team_key, team_ca, sequence=5)
    newer = signed(team_key, team_ca, peers=(ALICE,), revoked=(), sequence=6)
    verify_roster(older.peers_toml, older.revoked_toml, trusted=[team_ca], now=NOW)
    assert refusal(newer.peers_toml, older.revoked_toml, [team_ca]) == "mixed"


def test_files_of_two_rosters_with_one_sequence_number_are_mixed(team_key, team_ca):
    one = signed(team_key, team_ca, revoked=(CAROL,))
    other = signed(team_key, team_ca, revoked=())
    assert refusal(one.peers_toml, other.revoked_toml, [team_ca]) == "mixed"


def test_an_expired_roster_is_refused_from_its_expiry_on(team_key, team_ca):
    roster = signed(team_key, team_ca)
    assert refusal(roster.peers_toml, roster.revoked_toml, [team_ca], now=EXPIRES) == "expired"
    just_before = EXPIRES - timedelta(seconds=1)
    assert verify_roster(roster.peers_toml, roster.revoked_toml, trusted=[team_ca], now=just_before) == roster


def test_verify_file_checks_one_file_and_tells_which_it_is(team_key, team_ca):
    roster = signed(team_key, team_ca)
    peers_file = verify_file(roster.peers_toml, trusted=[team_ca], now=NOW)
    revoked_file = verify_file(roster.revoked_toml, trusted=[team_ca], now=NOW)
    assert (peers_file.kind, peers_file.peers, peers_file.revoked) == ("peers", (ALICE, BOB), ())
    assert (revoked_file.kind, revoked_file.revoked) == ("revoked", (CAROL,))
    assert peers_file.meta.companion_sha256 == revoked_file.body_sha256
    with pytest.raises(RosterRefused) as refused:
        verify_file(roster.peers_toml, trusted=[team_ca], now=EXPIRES)
    assert refused.value.reason == "expired"


# Sequence decisions


def test_the_first_roster_and_a_newer_one_are_accepted(team_key, team_ca):
    first, second = signed(team_key, team_ca, sequence=5), signed(team_key, team_ca, sequence=6)
    assert evaluate(first, last_sequence=None, last_digest=None) == "accept"
    assert evaluate(second, last_sequence=5, last_digest=first.digest) == "accept"


def test_the_same_roster_again_is_same(team_key, team_ca):
    roster = signed(team_key, team_ca)
    again = verify_roster(roster.peers_toml, roster.revoked_toml, trusted=[team_ca], now=NOW)
    assert evaluate(again, last_sequence=5, last_digest=roster.digest) == "same"


def test_a_different_roster_under_the_same_number_is_a_conflict(team_key, team_ca):
    one = signed(team_key, team_ca, peers=(ALICE, BOB))
    fork = signed(team_key, team_ca, peers=(ALICE,))
    assert fork.meta.sequence_number == one.meta.sequence_number and fork.digest != one.digest
    assert evaluate(fork, last_sequence=5, last_digest=one.digest) == "conflict"


def test_an_older_sequence_is_refused_as_replayed(team_key, team_ca):
    old, current = signed(team_key, team_ca, sequence=4), signed(team_key, team_ca, sequence=5)
    with pytest.raises(RosterRefused) as refused:
        evaluate(old, last_sequence=5, last_digest=current.digest)
    assert refused.value.reason == "replayed" and "4" in str(refused.value)


def test_evaluate_wants_both_or_neither_of_the_last_sequence_and_digest(team_key, team_ca):
    with pytest.raises(ValueError, match="both"):
        evaluate(signed(team_key, team_ca), last_sequence=5, last_digest=None)


# The writer refuses what others would refuse


def test_signing_with_a_key_that_is_not_the_certificates_is_refused(team_key, rogue_ca):
    with pytest.raises(ValueError, match="does not belong"):
        signed(team_key, rogue_ca)


@pytest.mark.parametrize(
    "peer",
    [
        Peer(name="x", fingerprint_sha256="AB" * 32, role="author", endpoint=""),
        Peer(name="", fingerprint_sha256=FP_A, role="author", endpoint=""),
        Peer(name="x", fingerprint_sha256=FP_A, role="", endpoint=""),
        Peer(name="\ud800", fingerprint_sha256=FP_A, role="author", endpoint=""),
    ],
)
def test_signing_a_bad_peer_entry_is_refused(team_key, team_ca, peer):
    with pytest.raises(ValueError):
        signed(team_key, team_ca, peers=(peer,))


def test_signing_with_naive_times_or_an_expiry_before_signing_is_refused(team_key, team_ca):
    with pytest.raises(ValueError, match="timezone"):
        signed(team_key, team_ca, expires=datetime(2026, 8, 10))
    with pytest.raises(ValueError, match="expire after"):
        signed(team_key, team_ca, expires=SIGNED)


def test_a_signature_line_moved_out_of_meta_is_malformed(team_key, team_ca):
    roster = signed(team_key, team_ca)
    line = signature_line(roster.peers_toml)
    moved = roster.peers_toml.replace(line, b"") + line
    assert "signature_b64" not in tomllib.loads(moved.decode())["meta"]
    assert refusal(moved, roster.revoked_toml, [team_ca]) == "malformed"
