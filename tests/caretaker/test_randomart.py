"""Key descriptions (caretaker.randomart): the fingerprint and randomart box must be exactly what the
real `ssh-keygen -lv -E sha256` prints for the same key, whatever form the key arrives in; boxes drawn by
hand pin the walk's corner cases; anything that is not a supported key is refused with a useful sentence."""

from __future__ import annotations

import base64
import datetime
import hashlib
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x25519
from cryptography.x509.oid import NameOID

from caretaker.fingerprint import memorable_id_of_digest
from caretaker.randomart import KeyArt, UnsupportedKey, key_art, randomart, ssh_public_blob

SUPPORTED_SENTENCE = "Ed25519, RSA or ECDSA (P-256, P-384, P-521)"
RSA_SIZES = [2048] * 10 + [3072] * 7 + [4096] * 3
EC_CURVES = [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()]


def openssh_line(key: object) -> bytes:
    public = key.public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)


def ssh_keygen() -> str:
    path = shutil.which("ssh-keygen")
    if path is None:
        pytest.fail(
            "ssh-keygen is not installed, and these tests cross-check against it: "
            "`python3 forge.py test` installs Debian's openssh-client"
        )
    return path


def ssh_keygen_descriptions(keys: list[object], tmp_path: Path) -> list[tuple[str, str, str, str]]:
    """(bits, fingerprint, type, box) for each key, from one `ssh-keygen -lv -E sha256` run over all of them."""
    listing = tmp_path / "keys.pub"
    listing.write_bytes(b"".join(openssh_line(key) + f" key-{n}\n".encode() for n, key in enumerate(keys)))
    run = subprocess.run(
        [ssh_keygen(), "-lv", "-E", "sha256", "-f", str(listing)], capture_output=True, text=True, check=True
    )
    lines = run.stdout.splitlines()
    assert len(lines) == 12 * len(keys), run.stdout
    descriptions = []
    for n in range(len(keys)):
        summary, *box = lines[12 * n : 12 * n + 12]
        bits, fingerprint, comment, key_type = summary.split()
        assert comment == f"key-{n}"
        descriptions.append((bits, fingerprint, key_type.strip("()"), "\n".join(box)))
    return descriptions


def assert_same_as_ssh_keygen(keys: list[object], tmp_path: Path) -> None:
    for key, (bits, fingerprint, key_type, box) in zip(keys, ssh_keygen_descriptions(keys, tmp_path), strict=True):
        art = key_art(key)
        assert (str(art.bits), art.fingerprint, art.key_type) == (bits, fingerprint, key_type)
        assert art.randomart == box, f"ours:\n{art.randomart}\nssh-keygen:\n{box}"


def test_ed25519_fingerprints_and_boxes_are_those_of_ssh_keygen(tmp_path):
    assert_same_as_ssh_keygen([ed25519.Ed25519PrivateKey.generate() for _ in range(50)], tmp_path)


def test_rsa_fingerprints_and_boxes_are_those_of_ssh_keygen(tmp_path):
    assert_same_as_ssh_keygen([rsa.generate_private_key(65537, size) for size in RSA_SIZES], tmp_path)


def test_ecdsa_fingerprints_and_boxes_are_those_of_ssh_keygen(tmp_path):
    keys = [ec.generate_private_key(EC_CURVES[n % 3]) for n in range(20)]
    assert_same_as_ssh_keygen(keys, tmp_path)


@pytest.mark.parametrize(
    "private_key",
    [ed25519.Ed25519PrivateKey.generate(), rsa.generate_private_key(65537, 2048)]
    + [ec.generate_private_key(curve) for curve in EC_CURVES],
    ids=["ed25519", "rsa", "p256", "p384", "p521"],
)
def test_the_ssh_public_blob_is_the_one_in_the_openssh_public_key_line(private_key):
    encoded = openssh_line(private_key).split()[1]
    assert ssh_public_blob(private_key.public_key()) == base64.b64decode(encoded)


def test_an_rsa_modulus_with_its_top_bit_set_is_written_with_a_leading_zero_byte():
    public = rsa.generate_private_key(65537, 2048).public_key()
    blob = ssh_public_blob(public)
    # string "ssh-rsa", mpint e = 65537 (3 bytes), then n: 2048 bits with the top bit set need 257 bytes.
    assert blob[:11] == b"\x00\x00\x00\x07ssh-rsa"
    assert blob[11:18] == b"\x00\x00\x00\x03\x01\x00\x01"
    assert blob[18:23] == b"\x00\x00\x01\x01\x00"
    assert len(blob) == 23 + 256


def certificate_and_request(private_key: object) -> tuple[x509.Certificate, x509.CertificateSigningRequest]:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "caretaker")])
    algorithm = None if isinstance(private_key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) else hashes.SHA256()
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(private_key, algorithm)
    )
    request = x509.CertificateSigningRequestBuilder().subject_name(name).sign(private_key, algorithm)
    return certificate, request


@pytest.mark.parametrize(
    "private_key",
    [
        ed25519.Ed25519PrivateKey.generate(),
        rsa.generate_private_key(65537, 2048),
        ec.generate_private_key(EC_CURVES[1]),
    ],
    ids=["ed25519", "rsa", "p384"],
)
def test_a_certificate_a_request_and_the_public_key_of_one_key_pair_are_described_identically(private_key):
    certificate, request = certificate_and_request(private_key)
    pem = serialization.Encoding.PEM
    public_pem = private_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    request_pem = request.public_bytes(pem)
    forms = [
        private_key,
        private_key.public_key(),
        certificate,
        request,
        public_pem,
        public_pem.decode(),
        certificate.public_bytes(pem),
        certificate.public_bytes(pem).decode(),
        request_pem,
        request_pem.replace(b"CERTIFICATE REQUEST", b"NEW CERTIFICATE REQUEST").decode(),
        openssh_line(private_key) + b" someone@laptop\n",
    ]
    descriptions = [key_art(form) for form in forms]
    assert all(description == descriptions[0] for description in descriptions)


def test_an_openssh_line_with_a_comment_and_surrounding_blanks_is_read():
    key = ed25519.Ed25519PrivateKey.generate()
    assert key_art(f"  {openssh_line(key).decode()} alice@example.org  \n") == key_art(key)


def test_the_description_fields_fit_together():
    key = ec.generate_private_key(ec.SECP521R1())
    art = key_art(key)
    assert art.digest == hashlib.sha256(ssh_public_blob(key.public_key())).digest()
    assert art.fingerprint == "SHA256:" + base64.b64encode(art.digest).decode().rstrip("=")
    assert len(art.fingerprint) == len("SHA256:") + 43
    assert art.memorable_id == memorable_id_of_digest(art.digest)
    assert art.randomart == randomart(art.digest, "ECDSA 521")
    assert art.as_dict() == {
        "key_type": "ECDSA",
        "bits": 521,
        "fingerprint": art.fingerprint,
        "memorable_id": art.memorable_id,
        "randomart": art.randomart,
    }
    assert isinstance(art, KeyArt)


def test_every_box_is_eleven_lines_of_nineteen_with_one_start_and_one_end():
    generator = random.Random(20261202)
    for _ in range(500):
        lines = randomart(generator.randbytes(32), "ED25519 256").split("\n")
        assert len(lines) == 11 and all(len(line) == 19 for line in lines)
        assert lines[0] == "+--[ED25519 256]--+" and lines[-1] == "+----[SHA256]-----+"
        field = "".join(line[1:-1] for line in lines[1:-1])
        assert all(line[0] == line[-1] == "|" for line in lines[1:-1])
        assert field.count("E") == 1
        assert field.count("S") == 1 or field[4 * 17 + 8] == "E"
        assert set(field) <= set(" .o+=*BOX@%&#/^SE")


def test_a_walk_that_ends_where_it_started_shows_only_the_end():
    # 0x33 moves down-right, up-left, down-right, up-left: every byte brings the bishop back to the middle.
    rows = randomart(b"\x33" * 32, "ED25519 256").split("\n")[1:-1]
    assert "S" not in "".join(rows)
    assert rows[4] == "|        E        |"
    assert rows[5] == "|         ^       |"


def test_a_walk_up_and_left_slides_into_the_corner_and_ends_there():
    # Four moves reach the top wall, eight the corner; the other 120 moves stay in the corner.
    assert randomart(bytes(32), "ED25519 256") == "\n".join(
        [
            "+--[ED25519 256]--+",
            "|E....            |",
            "|     .           |",
            "|      .          |",
            "|       .         |",
            "|        S        |",
            "|                 |",
            "|                 |",
            "|                 |",
            "|                 |",
            "+----[SHA256]-----+",
        ]
    )


def test_a_square_visited_more_than_fourteen_times_shows_the_last_visit_symbol():
    # 31 bytes of up-left moves park the bishop in the corner; 0xff then walks it down-right to (4, 4).
    assert randomart(bytes(31) + b"\xff", "RSA 2048").split("\n")[1:6] == [
        "|^....            |",
        "| .   .           |",
        "|  .   .          |",
        "|   .   .         |",
        "|    E   S        |",
    ]


@pytest.mark.parametrize(
    ("header", "border"),
    [
        ("ED25519 256", "+--[ED25519 256]--+"),
        ("RSA 2048", "+---[RSA 2048]----+"),
        ("ECDSA 384", "+---[ECDSA 384]---+"),
        ("RSA 16384", "+---[RSA 16384]---+"),
        ("", "+-------[]--------+"),
        ("ED25519-CERT 256", "+[ED25519-CERT 25-+"),
    ],
)
def test_the_header_is_centered_with_the_odd_dash_on_the_right_and_cut_at_sixteen_characters(header, border):
    assert randomart(bytes(32), header).split("\n")[0] == border


def test_the_footer_names_the_digest():
    assert randomart(bytes(32), "RSA 2048", footer="MD5").split("\n")[-1] == "+------[MD5]------+"


def ed25519_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def pem_public(key: object) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def ssh_dss_line(key: dsa.DSAPublicKey) -> str:
    """An OpenSSH ssh-dss line written out here (RFC 4253 section 6.6), as cryptography is dropping DSA."""
    numbers = key.public_numbers()
    fields = [b"ssh-dss"] + [
        value.to_bytes(value.bit_length() // 8 + 1, "big")
        for value in (numbers.parameter_numbers.p, numbers.parameter_numbers.q, numbers.parameter_numbers.g, numbers.y)
    ]
    blob = b"".join(len(field).to_bytes(4, "big") + field for field in fields)
    return f"ssh-dss {base64.b64encode(blob).decode()} old@laptop"


def unsupported_inputs() -> list[object]:
    ed25519_pem = pem_public(ed25519.Ed25519PrivateKey.generate().public_key())
    dsa_key = dsa.generate_private_key(1024)
    ed448_key = ed448.Ed448PrivateKey.generate()
    return [
        pytest.param(dsa_key, id="dsa private key"),
        pytest.param(dsa_key.public_key(), id="dsa public key"),
        pytest.param(ssh_dss_line(dsa_key.public_key()), id="dsa openssh line"),
        pytest.param(ed448_key.public_key(), id="ed448 key"),
        pytest.param(pem_public(ed448_key.public_key()), id="ed448 pem"),
        pytest.param(certificate_and_request(ed448_key)[0], id="ed448 certificate"),
        pytest.param(x25519.X25519PrivateKey.generate().public_key(), id="x25519 key"),
        pytest.param(pem_public(x25519.X25519PrivateKey.generate().public_key()).decode(), id="x25519 pem"),
        pytest.param(ec.generate_private_key(ec.SECP256K1()).public_key(), id="secp256k1 key"),
        pytest.param(pem_public(ec.generate_private_key(ec.BrainpoolP256R1()).public_key()), id="brainpool pem"),
        pytest.param("this is not a key", id="garbage text"),
        pytest.param(b"\x00\xff\x10", id="garbage bytes"),
        pytest.param("", id="empty text"),
        pytest.param(42, id="a number"),
        pytest.param(None, id="nothing"),
        pytest.param(ed25519_pem + ed25519_pem, id="two pem blocks"),
        pytest.param(ed25519_pem.replace(b"MC", b"!!"), id="a pem block with a broken body"),
        pytest.param(b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI", id="an openssh line cut short"),
        pytest.param(
            b"ssh-rsa " + openssh_line(ed25519_key()).split()[1], id="an openssh line whose name is not its key"
        ),
        pytest.param(openssh_line(ed25519_key()) + b"\n" + openssh_line(ed25519_key()), id="two openssh lines"),
        pytest.param(b"-----BEGIN PARAMETERS-----\nAAAA\n-----END PARAMETERS-----\n", id="an unknown pem label"),
    ]


@pytest.mark.parametrize("subject", unsupported_inputs())
def test_anything_but_a_supported_key_is_refused_naming_the_supported_types(subject):
    with pytest.raises(UnsupportedKey, match=re.escape(SUPPORTED_SENTENCE)):
        key_art(subject)


def test_a_private_key_in_text_is_refused_asking_for_its_public_key():
    private_pem = ed25519_key().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(UnsupportedKey, match="private key: give its public key"):
        key_art(private_pem)


def test_unsupported_key_is_a_value_error():
    assert issubclass(UnsupportedKey, ValueError)
