"""Signed checkpoints: the C2SP signed-note wire form, checked independently and against notes and
keys published by Go's sumdb/note and sum.golang.org, and refused whenever anything is off."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.checkpoint import Checkpoint, CheckpointError, parse_and_verify, sign, verifier_key_string

KEY_NAME = "forge-mcp.example/audit"
ORIGIN = "forge-mcp/audit/test-instance"
PRIVATE_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC_KEY = PRIVATE_KEY.public_key()
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
CHECKPOINT = Checkpoint(origin=ORIGIN, size=1234, root=hashlib.sha256(b"a root").digest())

# golang.org/x/mod/sumdb/note, package documentation: the example signer and verifier keys.
GO_SIGNER_SEED = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
GO_VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"

# A checkpoint signed by sum.golang.org, as quoted in google/trillian-examples' formats/log tests
# (TestSumDBNoteParsing), with the Go checksum database's published verifier key.
SUMDB_VERIFIER_KEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_NOTE = (
    "go.sum database tree\n"
    "6476701\n"
    "mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=\n"
    "\n"
    "— sum.golang.org Az3grsLX85Gz+s1SiTbgkuqxgItqFq7gsMUEyVnrsa9LM7Us9S+1xbFIGu95949rj4nPRYfvimWEPWL+o3GeoWwOoAw=\n"
)


def signed_note(body: str, key: Ed25519PrivateKey = PRIVATE_KEY, name: str = KEY_NAME) -> str:
    """A note signed over any body, built from the spec rather than from the module under test."""
    raw = key.public_key().public_bytes_raw()
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + raw).digest()[:4]
    blob = base64.b64encode(key_id + key.sign(body.encode())).decode()
    return f"{body}\n— {name} {blob}\n"


def signature_line(note: str) -> str:
    return note.rstrip("\n").rsplit("\n", 1)[1]


def _signature_blob(line: str) -> bytes:
    return base64.b64decode(line.split(" ")[2])


def test_signed_checkpoint_parses_back_to_the_same_checkpoint() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    assert parse_and_verify(note, KEY_NAME, PUBLIC_KEY) == CHECKPOINT
    assert parse_and_verify(note.encode(), KEY_NAME, PUBLIC_KEY, origin=ORIGIN) == CHECKPOINT


def test_note_is_body_blank_line_and_one_em_dash_signature_line() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    root_b64 = base64.b64encode(CHECKPOINT.root).decode()
    assert CHECKPOINT.body() == f"{ORIGIN}\n1234\n{root_b64}\n".encode()
    assert note.startswith(CHECKPOINT.body().decode() + "\n\u2014 " + KEY_NAME + " ")
    assert note.endswith("\n") and note.count("\n") == 5


def test_signature_is_the_key_hash_then_an_ed25519_signature_over_the_exact_body() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    blob = base64.b64decode(signature_line(note).split(" ")[2], validate=True)
    raw = PUBLIC_KEY.public_bytes_raw()
    assert len(blob) == 4 + 64
    assert blob[:4] == hashlib.sha256(KEY_NAME.encode() + b"\n" + b"\x01" + raw).digest()[:4]
    Ed25519PublicKey.from_public_bytes(raw).verify(blob[4:], CHECKPOINT.body())


def test_verifier_key_string_matches_the_go_sumdb_note_example() -> None:
    public_key = Ed25519PrivateKey.from_private_bytes(GO_SIGNER_SEED).public_key()
    assert verifier_key_string("PeterNeumann", public_key) == GO_VERIFIER_KEY


def test_verifier_key_string_names_our_key_and_its_hash() -> None:
    name, key_id, material = verifier_key_string(KEY_NAME, PUBLIC_KEY).split("+", 2)
    assert name == KEY_NAME
    assert bytes.fromhex(key_id) == _signature_blob(signature_line(sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)))[:4]
    assert base64.b64decode(material) == b"\x01" + PUBLIC_KEY.public_bytes_raw()


def test_a_checkpoint_signed_by_sum_golang_org_verifies() -> None:
    public_key = Ed25519PublicKey.from_public_bytes(base64.b64decode(SUMDB_VERIFIER_KEY.split("+", 2)[2])[1:])
    assert verifier_key_string("sum.golang.org", public_key) == SUMDB_VERIFIER_KEY
    checkpoint = parse_and_verify(SUMDB_NOTE, "sum.golang.org", public_key, origin="go.sum database tree")
    assert (checkpoint.origin, checkpoint.size) == ("go.sum database tree", 6476701)
    assert checkpoint.root == base64.b64decode("mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=")
    with pytest.raises(CheckpointError, match="does not verify"):
        parse_and_verify(SUMDB_NOTE.replace("6476701", "6476702"), "sum.golang.org", public_key)


def test_a_witness_cosignature_beside_ours_is_ignored() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    cosigned = note + signature_line(sign(CHECKPOINT, "witness.example", OTHER_KEY)) + "\n"
    assert parse_and_verify(cosigned, KEY_NAME, PUBLIC_KEY) == CHECKPOINT


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("\n1234\n", "\n1235\n"),
        ("\n1234\n", "\n12345\n"),
        (ORIGIN, ORIGIN.replace("test-instance", "other-instance")),
        (base64.b64encode(CHECKPOINT.root).decode()[:10], "A" * 10),
    ],
    ids=["size", "size-longer", "origin", "root"],
)
def test_a_tampered_body_fails_the_signature(old: str, new: str) -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    assert old in note
    with pytest.raises(CheckpointError, match="does not verify"):
        parse_and_verify(note.replace(old, new, 1), KEY_NAME, PUBLIC_KEY)


def test_a_note_signed_by_another_key_is_refused() -> None:
    note = sign(CHECKPOINT, KEY_NAME, OTHER_KEY)
    with pytest.raises(CheckpointError, match="not signed by key"):
        parse_and_verify(note, KEY_NAME, PUBLIC_KEY)


def test_a_note_signed_under_another_key_name_is_refused() -> None:
    note = sign(CHECKPOINT, "someone-else", PRIVATE_KEY)
    with pytest.raises(CheckpointError, match="not signed by key"):
        parse_and_verify(note, KEY_NAME, PUBLIC_KEY)


def test_a_forged_signature_under_our_key_hash_is_refused() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    line = signature_line(note)
    blob = bytearray(_signature_blob(line))
    blob[10] ^= 1
    forged = note.replace(line, f"— {KEY_NAME} {base64.b64encode(bytes(blob)).decode()}")
    with pytest.raises(CheckpointError, match="does not verify"):
        parse_and_verify(forged, KEY_NAME, PUBLIC_KEY)


@pytest.mark.parametrize(
    ("truncate", "message"),
    [
        (lambda line: line[:-4], "does not verify"),
        (lambda line: line[:-1], "not base64"),
        (lambda line: f"— {KEY_NAME} " + base64.b64encode(_signature_blob(line)[:4]).decode(), "too short"),
        (lambda line: f"— {KEY_NAME} ", "not base64|too short"),
        (lambda line: f"— {KEY_NAME}", "no valid key name"),
    ],
    ids=["three-bytes-short", "broken-padding", "key-hash-only", "empty-signature", "no-signature"],
)
def test_a_truncated_signature_is_refused(truncate, message: str) -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    line = signature_line(note)
    with pytest.raises(CheckpointError, match=message):
        parse_and_verify(note.replace(line, truncate(line)), KEY_NAME, PUBLIC_KEY)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda note: note + "trailing junk\n", "does not start with an em dash"),
        (lambda note: note + "trailing junk", "does not end with a newline"),
        (lambda note: note + "\n", "no signature lines"),
        (
            lambda note: note + "\n" + signature_line(sign(CHECKPOINT, "witness.example", OTHER_KEY)) + "\n",
            "not signed by key",
        ),
        (lambda note: note.replace("\n\n", "\n"), "no blank line"),
        (lambda note: note.replace("\u2014", "-"), "does not start with an em dash"),
        (lambda note: note.replace(f"— {KEY_NAME} ", f"— {KEY_NAME}  "), "not base64"),
        (lambda note: note.replace("\n1234\n", "\n1234\r\n"), "control character"),
        (lambda note: note.rstrip("\n"), "does not end with a newline"),
        (lambda note: "", "does not end with a newline"),
    ],
    ids=[
        "junk-line-after-signatures",
        "junk-without-newline",
        "extra-blank-line-at-end",
        "signature-block-after-a-second-blank-line",
        "no-blank-line",
        "hyphen-instead-of-em-dash",
        "double-space",
        "carriage-return",
        "no-final-newline",
        "empty",
    ],
)
def test_a_malformed_note_is_refused(mangle, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        parse_and_verify(mangle(sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)), KEY_NAME, PUBLIC_KEY)


ROOT_B64 = base64.b64encode(CHECKPOINT.root).decode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (f"{ORIGIN}\n1234\n{ROOT_B64}\nan extension line\n", "extension lines"),
        (f"{ORIGIN}\n1234\n", "three lines"),
        (f"{ORIGIN}\n01234\n{ROOT_B64}\n", "leading zeros"),
        (f"{ORIGIN}\n-1\n{ROOT_B64}\n", "decimal"),
        (f"{ORIGIN}\n１２\n{ROOT_B64}\n", "decimal"),
        (f"{ORIGIN}\n{2**64}\n{ROOT_B64}\n", "tree size"),
        (f"{ORIGIN}\n1234\n{ROOT_B64[:-1]}\n", "not base64"),
        (f"{ORIGIN}\n1234\n{base64.b64encode(CHECKPOINT.root[:31]).decode()}\n", "32 bytes"),
        (f"{ORIGIN}\n1234\n{ROOT_B64[:-2]}B=\n", "canonical"),
        (f"\n1234\n{ROOT_B64}\n", "origin"),
    ],
    ids=[
        "extension-line",
        "missing-root",
        "leading-zero",
        "negative-size",
        "fullwidth-digits",
        "size-overflow",
        "root-bad-base64",
        "root-short",
        "root-non-canonical",
        "empty-origin",
    ],
)
def test_a_validly_signed_but_malformed_body_is_refused(body: str, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        parse_and_verify(signed_note(body), KEY_NAME, PUBLIC_KEY)


def test_the_independent_note_builder_agrees_with_sign() -> None:
    assert signed_note(CHECKPOINT.body().decode()) == sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)


def test_a_checkpoint_for_another_origin_is_refused_when_the_origin_is_pinned() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY)
    with pytest.raises(CheckpointError, match="expected 'forge-mcp/audit/other'"):
        parse_and_verify(note, KEY_NAME, PUBLIC_KEY, origin="forge-mcp/audit/other")


def test_a_note_that_is_not_utf8_is_refused() -> None:
    note = sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY).encode().replace(b"forge-mcp", b"forge\xff", 1)
    with pytest.raises(CheckpointError, match="UTF-8"):
        parse_and_verify(note, KEY_NAME, PUBLIC_KEY)


@pytest.mark.parametrize(
    "fields",
    [
        {"origin": "", "size": 1, "root": CHECKPOINT.root},
        {"origin": "two\nlines", "size": 1, "root": CHECKPOINT.root},
        {"origin": ORIGIN, "size": -1, "root": CHECKPOINT.root},
        {"origin": ORIGIN, "size": True, "root": CHECKPOINT.root},
        {"origin": ORIGIN, "size": 1, "root": CHECKPOINT.root[:31]},
    ],
    ids=["empty-origin", "multi-line-origin", "negative-size", "bool-size", "short-root"],
)
def test_a_checkpoint_with_bad_fields_cannot_be_built(fields: dict) -> None:
    with pytest.raises(CheckpointError):
        Checkpoint(**fields)


@pytest.mark.parametrize("name", ["", "has space", "has+plus", "tab\tname"])
def test_key_names_with_spaces_or_pluses_are_refused(name: str) -> None:
    with pytest.raises(CheckpointError, match="key name"):
        sign(CHECKPOINT, name, PRIVATE_KEY)
    with pytest.raises(CheckpointError, match="key name"):
        parse_and_verify(sign(CHECKPOINT, KEY_NAME, PRIVATE_KEY), name, PUBLIC_KEY)
