"""Key descriptions a person can check by eye: OpenSSH fingerprint, randomart and memorable ID.

Whenever Forge asks someone to trust a key (a caretaker's SSH key, a certificate, a signing request), it
shows the key the way `ssh-keygen -lv -E sha256` does: the `SHA256:` fingerprint and the "drunken bishop"
randomart box, so what the person sees in Forge can be compared with what their own terminal prints, plus
the key's memorable ID (caretaker.fingerprint). All three come from one digest: SHA-256 of the key's SSH
wire-format public blob. Pure module: `cryptography` only, no Django, so any app may use it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from caretaker.fingerprint import memorable_id_of_digest

SUPPORTED = "Ed25519, RSA or ECDSA (P-256, P-384, P-521)"
ACCEPTED_TEXT = "one PEM block (PUBLIC KEY, CERTIFICATE or CERTIFICATE REQUEST) or one OpenSSH public key line"

# The field OpenSSH draws on: odd both ways, so the walk starts in the exact middle.
FIELD_WIDTH = 17
FIELD_HEIGHT = 9
# Symbols for how often the bishop stood on a square; the last two mark where it started and stopped.
SYMBOLS = " .o+=*BOX@%&#/^SE"
START = len(SYMBOLS) - 2
END = len(SYMBOLS) - 1
# Visits saturate below the start mark, so a busy square never reads as S or E.
MOST_VISITS = START - 1
# OpenSSH formats a border label into a buffer as wide as the field, one byte of which ends the string.
LONGEST_LABEL = FIELD_WIDTH - 1

_CURVE_NAMES: dict[str, str] = {"secp256r1": "nistp256", "secp384r1": "nistp384", "secp521r1": "nistp521"}

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)
_SSH_KEY_NAMES = frozenset({"ssh-ed25519", "ssh-rsa", *(f"ecdsa-sha2-{name}" for name in _CURVE_NAMES.values())})
_CSR_LABELS = frozenset({"CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"})


class UnsupportedKey(ValueError):
    """Something that is not a key Forge can describe, or a key of a type it does not support."""


@dataclass(frozen=True)
class KeyArt:
    """One key as a person sees it: ssh-keygen's type, size, fingerprint and box, and the memorable ID."""

    key_type: str
    bits: int
    digest: bytes
    fingerprint: str
    memorable_id: str
    randomart: str

    def as_dict(self) -> dict[str, object]:
        return {
            "key_type": self.key_type,
            "bits": self.bits,
            "fingerprint": self.fingerprint,
            "memorable_id": self.memorable_id,
            "randomart": self.randomart,
        }


def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _ssh_mpint(value: int) -> bytes:
    # RFC 4251 section 5: a positive mpint is two's complement, so one whose top bit is set gets a zero byte first.
    length = value.bit_length() // 8 + 1 if value else 0
    return _ssh_string(value.to_bytes(length, "big"))


def _unsupported(what: str) -> UnsupportedKey:
    return UnsupportedKey(f"{what} is not supported: Forge describes {SUPPORTED} public keys")


def _unreadable() -> UnsupportedKey:
    return UnsupportedKey(f"this text is not a key Forge can read: give {ACCEPTED_TEXT}, holding an {SUPPORTED} key")


def _describe(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return f"an ECDSA key on {key.curve.name}"
    return type(key).__name__.removeprefix("_")


def ssh_public_blob(key: object) -> bytes:
    """The key's SSH wire-format public blob (RFC 8709, RFC 4253, RFC 5656): the bytes OpenSSH fingerprints."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return _ssh_string(b"ssh-ed25519") + _ssh_string(raw)
    if isinstance(key, rsa.RSAPublicKey):
        numbers = key.public_numbers()
        return _ssh_string(b"ssh-rsa") + _ssh_mpint(numbers.e) + _ssh_mpint(numbers.n)
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _CURVE_NAMES:
        curve = _CURVE_NAMES[key.curve.name].encode()
        point = key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return _ssh_string(b"ecdsa-sha2-" + curve) + _ssh_string(curve) + _ssh_string(point)
    raise _unsupported(_describe(key))


def _border(label: str) -> str:
    """A top or bottom border with `[label]` centered the way OpenSSH rounds (the extra dash goes right)."""
    text = f"[{label}]"[:LONGEST_LABEL]
    left = (FIELD_WIDTH - len(text)) // 2
    return "+" + "-" * left + text + "-" * (FIELD_WIDTH - left - len(text)) + "+"


def _walk(digest: bytes) -> tuple[list[list[int]], tuple[int, int]]:
    """The bishop's walk: every byte is four moves, low bits first; bit 0 says right, bit 1 says down."""
    visits = [[0] * FIELD_WIDTH for _ in range(FIELD_HEIGHT)]
    x, y = FIELD_WIDTH // 2, FIELD_HEIGHT // 2
    for byte in digest:
        for shift in range(0, 8, 2):
            move = byte >> shift
            # A move into a wall is dropped in that direction only; the bishop slides along the wall.
            x = min(max(x + (1 if move & 1 else -1), 0), FIELD_WIDTH - 1)
            y = min(max(y + (1 if move & 2 else -1), 0), FIELD_HEIGHT - 1)
            visits[y][x] = min(visits[y][x] + 1, MOST_VISITS)
    return visits, (x, y)


def randomart(digest: bytes, header: str, footer: str = "SHA256") -> str:
    """OpenSSH's randomart of a digest: the 11-line box, `[header]` on top and `[footer]` below.

    A bracketed label longer than 16 characters is cut there, as OpenSSH's fixed buffer cuts it.
    """
    field, (end_x, end_y) = _walk(digest)
    field[FIELD_HEIGHT // 2][FIELD_WIDTH // 2] = START
    field[end_y][end_x] = END
    rows = ["|" + "".join(SYMBOLS[count] for count in row) + "|" for row in field]
    return "\n".join([_border(header), *rows, _border(footer)])


def _public_key_of(subject: object) -> object:
    """The public key inside a key object, private key, certificate or signing request."""
    if isinstance(subject, ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        return subject.public_key()
    if isinstance(subject, x509.Certificate | x509.CertificateSigningRequest):
        try:
            return subject.public_key()
        except (UnsupportedAlgorithm, ValueError) as error:
            raise _unsupported("the key in this certificate or request") from error
    return subject


def _load_pem(label: str, block: bytes) -> object:
    if label == "PUBLIC KEY":
        return serialization.load_pem_public_key(block)
    if label == "CERTIFICATE":
        return x509.load_pem_x509_certificate(block)
    if label in _CSR_LABELS:
        return x509.load_pem_x509_csr(block)
    if "PRIVATE KEY" in label:
        raise UnsupportedKey("this is a private key: give its public key (a PUBLIC KEY PEM or an OpenSSH line) instead")
    raise _unsupported(f"a PEM block labelled {label}")


def _load_openssh_line(line: str) -> object:
    # Other names (ssh-dss, sk-*, certificates) are refused here, before cryptography reads what it may still parse.
    name = line.split()[0]
    if name not in _SSH_KEY_NAMES:
        raise _unsupported(f"an OpenSSH {name} key")
    return serialization.load_ssh_public_key(line.encode())


def _parse_text(data: bytes | str) -> object:
    """One PEM block (public key, certificate or signing request) or one OpenSSH public key line, parsed."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    blocks = list(_PEM_BLOCK.finditer(text))
    try:
        if len(blocks) == 1:
            return _public_key_of(_load_pem(blocks[0].group(1), blocks[0].group(0).encode()))
        if not blocks and "-----BEGIN" not in text and len(text.strip().splitlines()) == 1:
            return _load_openssh_line(text.strip())
    except UnsupportedKey:
        raise
    except (UnsupportedAlgorithm, ValueError) as error:
        raise _unreadable() from error
    raise _unreadable()


def _type_and_bits(key: object) -> tuple[str, int]:
    """The key type and size as ssh-keygen's randomart header names them."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ED25519", 256
    if isinstance(key, rsa.RSAPublicKey):
        return "RSA", key.key_size
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "ECDSA", key.curve.key_size
    raise _unsupported(_describe(key))


def key_art(subject: object) -> KeyArt:
    """Describe a key for a person: a key object, certificate, signing request, PEM block or OpenSSH line."""
    key = _parse_text(subject) if isinstance(subject, bytes | str) else _public_key_of(subject)
    blob = ssh_public_blob(key)
    key_type, bits = _type_and_bits(key)
    digest = hashlib.sha256(blob).digest()
    return KeyArt(
        key_type=key_type,
        bits=bits,
        digest=digest,
        fingerprint="SHA256:" + base64.b64encode(digest).decode().rstrip("="),
        memorable_id=memorable_id_of_digest(digest),
        randomart=randomart(digest, f"{key_type} {bits}"),
    )
