"""Signed checkpoints of the audit log's Merkle tree, in the C2SP signed-note "checkpoint" form.

A checkpoint commits the server to the root of its audit tree at one size. Its body is three lines:
the origin (for us ``forge-mcp/audit/<instance-id>``), the tree size in decimal and the base64 root
hash; it is followed by a blank line and one line per signature, ``— <key name> <base64(4-byte key
hash || Ed25519 signature)>``, the signature covering the body bytes (c2sp.org/signed-note,
c2sp.org/tlog-checkpoint). Any tool that speaks that format (Go's ``sumdb/note``, witnesses) can check
ours, and an auditor who keeps one holds the server to it through consistency proofs
(``audit.merkle``). Free of Django: signing keys and storage belong to the callers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM_ED25519 = b"\x01"
SIGNATURE_PREFIX = "— "
HASH_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
KEY_HASH_SIZE = 4
# The note spec lets verifiers refuse notes with too many signatures; Go's sumdb/note uses 100.
MAX_SIGNATURES = 100
MAX_TREE_SIZE = 2**64 - 1

_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


class CheckpointError(ValueError):
    """A checkpoint or signed note that is malformed, unsigned by the expected key, or forged."""


def _is_key_name(name: object) -> bool:
    return isinstance(name, str) and name != "" and "+" not in name and not any(ch.isspace() for ch in name)


def _check_key_name(name: str) -> None:
    if not _is_key_name(name):
        raise CheckpointError(f"key name {name!r} must be non-empty, without spaces or '+'")


@dataclass(frozen=True)
class Checkpoint:
    """The tree head a checkpoint commits to: ``size`` leaves under ``root``, for log ``origin``."""

    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin or _CONTROL.search(self.origin):
            raise CheckpointError(f"origin {self.origin!r} must be one non-empty line without control characters")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointError(f"tree size {self.size!r} must be an integer in [0, 2**64)")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise CheckpointError(f"root hash must be {HASH_SIZE} bytes")

    def body(self) -> bytes:
        """The signed text: origin, size and root, each line ending in a newline."""
        root = base64.b64encode(self.root).decode("ascii")
        return f"{self.origin}\n{self.size}\n{root}\n".encode()


def key_hash(key_name: str, public_key: Ed25519PublicKey) -> bytes:
    """The 4-byte id signature lines carry: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    _check_key_name(key_name)
    material = ALGORITHM_ED25519 + public_key.public_bytes_raw()
    return hashlib.sha256(key_name.encode() + b"\n" + material).digest()[:KEY_HASH_SIZE]


def verifier_key_string(key_name: str, public_key: Ed25519PublicKey) -> str:
    """The note verifier key ``<name>+<hex key hash>+<base64(0x01 || public key)>`` auditors pin."""
    material = base64.b64encode(ALGORITHM_ED25519 + public_key.public_bytes_raw()).decode("ascii")
    return f"{key_name}+{key_hash(key_name, public_key).hex()}+{material}"


def sign(checkpoint: Checkpoint, key_name: str, private_key: Ed25519PrivateKey) -> str:
    """The full signed note for ``checkpoint``: body, blank line, one signature line."""
    body = checkpoint.body()
    blob = key_hash(key_name, private_key.public_key()) + private_key.sign(body)
    return f"{body.decode()}\n{SIGNATURE_PREFIX}{key_name} {base64.b64encode(blob).decode('ascii')}\n"


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise CheckpointError(f"{what} is not base64") from None


def _split_note(note_text: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The signed body and the (name, decoded signature) pairs of a signed note."""
    if _CONTROL.search(note_text):
        raise CheckpointError("note contains a control character other than newline")
    if not note_text.endswith("\n"):
        raise CheckpointError("note does not end with a newline")
    split = note_text.rfind("\n\n")
    if split < 0:
        raise CheckpointError("note has no blank line between its body and its signatures")
    body, signature_block = note_text[: split + 1], note_text[split + 2 :]
    lines = signature_block.split("\n")[:-1]
    if not lines:
        raise CheckpointError("note has no signature lines")
    if len(lines) > MAX_SIGNATURES:
        raise CheckpointError(f"note has more than {MAX_SIGNATURES} signatures")
    signatures = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise CheckpointError(f"signature line {number} does not start with an em dash and a space")
        name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        if not space or not _is_key_name(name):
            raise CheckpointError(f"signature line {number} has no valid key name")
        blob = _b64decode(encoded, f"signature on line {number}")
        if len(blob) <= KEY_HASH_SIZE:
            raise CheckpointError(f"signature on line {number} is too short")
        signatures.append((name, blob))
    return body.encode(), signatures


def _parse_body(body: bytes) -> Checkpoint:
    lines = body.decode().split("\n")[:-1]
    if len(lines) < 3:
        raise CheckpointError("checkpoint body must be three lines: origin, tree size, root hash")
    if len(lines) > 3:
        # C2SP allows extension lines; we never write them, so one here was not written by us.
        raise CheckpointError("checkpoint body has unexpected extension lines")
    origin, size_text, root_text = lines
    if not _DECIMAL.fullmatch(size_text):
        raise CheckpointError(f"tree size {size_text!r} is not a decimal number without leading zeros")
    root = _b64decode(root_text, "root hash")
    if base64.b64encode(root).decode("ascii") != root_text:
        raise CheckpointError("root hash is not canonical base64")
    return Checkpoint(origin=origin, size=int(size_text), root=root)


def parse_and_verify(
    note_text: str | bytes, key_name: str, public_key: Ed25519PublicKey, *, origin: str | None = None
) -> Checkpoint:
    """The checkpoint in ``note_text`` once a signature by ``key_name``/``public_key`` checks out.

    Signatures by other keys (witness cosignatures) are ignored, as the note spec requires, but a
    signature that claims our key and does not verify is refused. With ``origin``, the checkpoint
    must be for that log.
    """
    _check_key_name(key_name)
    if isinstance(note_text, bytes):
        try:
            note_text = note_text.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError("note is not valid UTF-8") from None
    if not isinstance(note_text, str):
        raise CheckpointError("note must be text")
    try:
        body, signatures = _split_note(note_text)
    except UnicodeEncodeError:
        raise CheckpointError("note is not valid UTF-8") from None
    expected_hash = key_hash(key_name, public_key)
    ours = [
        blob[KEY_HASH_SIZE:] for name, blob in signatures if name == key_name and blob[:KEY_HASH_SIZE] == expected_hash
    ]
    if not ours:
        raise CheckpointError(f"note is not signed by key {key_name}+{expected_hash.hex()}")
    for signature in ours:
        try:
            if len(signature) != ED25519_SIGNATURE_SIZE:
                raise InvalidSignature
            public_key.verify(signature, body)
        except InvalidSignature:
            raise CheckpointError(f"signature by key {key_name}+{expected_hash.hex()} does not verify") from None
    checkpoint = _parse_body(body)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointError(f"checkpoint is for origin {checkpoint.origin!r}, expected {origin!r}")
    return checkpoint
