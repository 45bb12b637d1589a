"""The team roster as two signed TOML files: who the peers are (`peers.toml`) and whose certificates are
revoked (`revoked.toml`).

A caretaker publishes the roster with `sign_roster`; another caretaker takes it in only after
`verify_roster` has found both files authentic, consistent and unexpired, and `evaluate` has found them
newer than what it holds. The protection follows TUF's metadata: a signature by a trusted CA over each
file, a sequence number that only grows (an older roster is a replay), an expiry date (a frozen roster
dies), and a hash of each file's body in the other, so a current `peers.toml` cannot be paired with a stale
`revoked.toml`. The signed payload of a file is its bytes without its one `signature_b64` line; its *body*
also leaves out its companion-hash line, which breaks the circle of each file naming the other's hash.

The layout is fixed and written here by hand (keys in a fixed order, entries sorted, TOML basic strings,
one blank line between tables), so the same roster always gives the same bytes; files are read with
`tomllib`. Pure module: no Django, no shell-out, only `cryptography` and the standard library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from cryptography.x509.oid import NameOID

from caretaker.ca import cert_fingerprint

Kind = Literal["peers", "revoked"]
Reason = Literal["malformed", "missing_signature", "untrusted_ca", "bad_signature", "mixed", "expired", "replayed"]
Verdict = Literal["accept", "same", "conflict"]
CaPrivateKey = Ed25519PrivateKey | RSAPrivateKey

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# RSA-PSS salt length fixed at the digest size, so every caretaker signs and verifies the same way.
PSS_SALT_LENGTH = 32
MAX_SEQUENCE_NUMBER = 2**63 - 1

FILE_NAMES: dict[Kind, str] = {"peers": "peers.toml", "revoked": "revoked.toml"}
ENTRY_TABLES: dict[Kind, str] = {"peers": "peer", "revoked": "revoked"}
# Each file carries the hash of the *other* file's body.
COMPANION_KEYS: dict[Kind, str] = {"peers": "revoked_sha256", "revoked": "peers_sha256"}
META_KEYS = ("sequence_number", "signed_ts", "signed_by", "ca_fingerprint_sha256", "expires")
PEER_KEYS = ("name", "fingerprint_sha256", "role", "endpoint")
REVOKED_KEYS = ("name", "fingerprint_sha256", "serial", "reason", "revoked_ts")

FINGERPRINT = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){31}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
SERIAL = re.compile(r"[0-9a-f]+")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
# Any line that TOML could read as a `signature_b64` key counts, however it is spelled; only the exact
# form the writer emits is accepted, so the one unsigned line of a file cannot change what the rest says.
SIGNATURE_LINE_LOOSE = re.compile(rb"""[ \t]*["']?signature_b64["']?[ \t]*=""")
SIGNATURE_LINE = re.compile(rb'signature_b64 = "([A-Za-z0-9+/]*={0,2})"\n')

# TOML basic strings may not hold U+0000..U+001F or U+007F raw; these have short escapes.
SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


@dataclass(frozen=True)
class Peer:
    name: str
    fingerprint_sha256: str
    role: str
    endpoint: str


@dataclass(frozen=True)
class Revoked:
    name: str
    fingerprint_sha256: str
    serial: str
    reason: str
    revoked_ts: str


@dataclass(frozen=True)
class Meta:
    """A file's [meta] table. `companion_sha256` is the other file's body hash: `revoked_sha256` in
    peers.toml, `peers_sha256` in revoked.toml."""

    sequence_number: int
    signed_ts: str
    signed_by: str
    ca_fingerprint_sha256: str
    expires: str
    companion_sha256: str


@dataclass(frozen=True)
class Roster:
    """A signed roster: both files' bytes and what they say. `meta` is peers.toml's (so its
    `companion_sha256` is `revoked_sha256`); the rest of the two files' meta is the same."""

    meta: Meta
    peers: tuple[Peer, ...]
    revoked: tuple[Revoked, ...]
    peers_toml: bytes
    revoked_toml: bytes

    @property
    def digest(self) -> str:
        """What "the same roster" means: SHA-256 hex over both files' exact bytes."""
        return hashlib.sha256(self.peers_toml + b"\0" + self.revoked_toml).hexdigest()


@dataclass(frozen=True)
class RosterFile:
    """One verified file on its own (`verify_file`); `body_sha256` is what the other file must name."""

    kind: Kind
    meta: Meta
    peers: tuple[Peer, ...]
    revoked: tuple[Revoked, ...]
    body_sha256: str


class RosterRefused(Exception):
    """A roster (or one of its files) that must not be taken in. `reason` is a stable slug for code and
    audit rows; the message says what is wrong and what to do."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason


# Writing


def sign_roster(
    peers: Iterable[Peer],
    revoked: Iterable[Revoked],
    *,
    sequence_number: int,
    signed_ts: datetime,
    expires: datetime,
    ca_key: CaPrivateKey,
    ca_certificate: x509.Certificate,
) -> Roster:
    """Write and sign both files of a roster with the CA's key (Ed25519 signatures are deterministic, so
    the same input gives the same bytes; RSA-PSS ones are not). Raises ValueError on input that would make
    a file other caretakers refuse."""
    _check_sequence_number(sequence_number)
    signed_text, expires_text = _timestamp(signed_ts), _timestamp(expires)
    if expires <= signed_ts:
        raise ValueError("a roster must expire after it is signed: pass an `expires` later than `signed_ts`")
    _check_key_matches_certificate(ca_key, ca_certificate)
    peer_list, revoked_list = list(peers), list(revoked)
    for peer in peer_list:
        _check_peer(peer)
    for entry in revoked_list:
        _check_revoked(entry)
    peer_entries = tuple(sorted(peer_list, key=lambda p: (p.name, p.fingerprint_sha256)))
    # Serials sort by value, so "a" (10) comes before "10" (16).
    revoked_entries = tuple(sorted(revoked_list, key=lambda r: (int(r.serial, 16), r.serial)))
    meta_values: dict[str, int | str] = {
        "sequence_number": sequence_number,
        "signed_ts": signed_text,
        "signed_by": _common_name(ca_certificate),
        "ca_fingerprint_sha256": certificate_fingerprint(ca_certificate),
        "expires": expires_text,
    }
    peer_tables = [_entry_table("peer", PEER_KEYS, peer) for peer in peer_entries]
    revoked_tables = [_entry_table("revoked", REVOKED_KEYS, entry) for entry in revoked_entries]
    peers_body = _render(meta_values, None, None, peer_tables)
    revoked_body = _render(meta_values, None, None, revoked_tables)
    peers_companion = ("revoked_sha256", _sha256_hex(revoked_body))
    revoked_companion = ("peers_sha256", _sha256_hex(peers_body))
    peers_toml = _signed_file(ca_key, meta_values, peers_companion, peer_tables)
    revoked_toml = _signed_file(ca_key, meta_values, revoked_companion, revoked_tables)
    meta = Meta(
        sequence_number=sequence_number,
        signed_ts=signed_text,
        signed_by=str(meta_values["signed_by"]),
        ca_fingerprint_sha256=str(meta_values["ca_fingerprint_sha256"]),
        expires=expires_text,
        companion_sha256=peers_companion[1],
    )
    return Roster(
        meta=meta, peers=peer_entries, revoked=revoked_entries, peers_toml=peers_toml, revoked_toml=revoked_toml
    )


# SHA-256 of a certificate's DER as lowercase colon hex, the form every fingerprint in a roster takes.
certificate_fingerprint = cert_fingerprint


def toml_string(value: str) -> str:
    """`value` as a TOML basic string: quotes, backslashes and control characters escaped, the rest as is."""
    escaped = []
    for char in value:
        if char in SHORT_ESCAPES:
            escaped.append(SHORT_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04X}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _render(
    meta_values: dict[str, int | str], companion: tuple[str, str] | None, signature: str | None, entry_tables: list[str]
) -> bytes:
    """A whole file; leaving out the companion and signature lines gives its body, the signature alone its
    payload (the same bytes a verifier gets by deleting those lines)."""
    meta_lines = ["[meta]\n"]
    meta_lines += [f"{key} = {_toml_value(meta_values[key])}\n" for key in META_KEYS]
    if companion is not None:
        meta_lines.append(f"{companion[0]} = {toml_string(companion[1])}\n")
    if signature is not None:
        meta_lines.append(f"signature_b64 = {toml_string(signature)}\n")
    return "\n".join(["".join(meta_lines), *entry_tables]).encode()


def _signed_file(
    key: CaPrivateKey, meta_values: dict[str, int | str], companion: tuple[str, str], entry_tables: list[str]
) -> bytes:
    signature = _sign(key, _render(meta_values, companion, None, entry_tables))
    return _render(meta_values, companion, signature, entry_tables)


def _entry_table(table: str, keys: tuple[str, ...], entry: Peer | Revoked) -> str:
    return f"[[{table}]]\n" + "".join(f"{key} = {toml_string(getattr(entry, key))}\n" for key in keys)


def _toml_value(value: int | str) -> str:
    return str(value) if isinstance(value, int) else toml_string(value)


def _sign(key: CaPrivateKey, payload: bytes) -> str:
    if isinstance(key, Ed25519PrivateKey):
        return base64.b64encode(key.sign(payload)).decode("ascii")
    return base64.b64encode(key.sign(payload, _pss(), hashes.SHA256())).decode("ascii")


def _pss() -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=PSS_SALT_LENGTH)


def _check_key_matches_certificate(key: CaPrivateKey, certificate: x509.Certificate) -> None:
    if not isinstance(key, Ed25519PrivateKey | RSAPrivateKey):
        raise ValueError("a roster is signed with an Ed25519 or RSA CA key; this key is neither")
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != certificate.public_key().public_bytes(*spki):
        raise ValueError("the CA key does not belong to the CA certificate: pass the certificate of the key that signs")


def _common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        raise ValueError("the CA certificate's subject has no common name (CN); a roster names its signer by it")
    value = names[0].value
    return value if isinstance(value, str) else value.decode()


def _timestamp(moment: datetime) -> str:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("roster times must be timezone-aware datetimes (use datetime.now(UTC))")
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


# Rules the writer and the reader both apply: the writer raises ValueError, the reader turns it into "malformed".


def _check_sequence_number(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEQUENCE_NUMBER:
        raise ValueError(f"sequence_number must be an integer from 0 to {MAX_SEQUENCE_NUMBER}")


def _check_text(field: str, value: str, *, required: bool = True) -> None:
    if required and not value:
        raise ValueError(f"{field} must not be empty")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError(f"{field} is not valid Unicode text (it holds a lone surrogate)") from None


def _check_fingerprint(field: str, value: str) -> None:
    if not FINGERPRINT.fullmatch(value):
        raise ValueError(f"{field} must be a SHA-256 fingerprint as 32 lowercase hex pairs joined by colons")


def _check_timestamp(field: str, value: str) -> datetime:
    if not TIMESTAMP.fullmatch(value):
        raise ValueError(f"{field} must be a UTC time written as YYYY-MM-DDTHH:MM:SSZ")
    try:
        return datetime.strptime(value, TIMESTAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"{field} is not a real date and time") from None


def _check_peer(peer: Peer) -> None:
    _check_text("a peer's name", peer.name)
    _check_fingerprint(f"the fingerprint of peer {peer.name!r}", peer.fingerprint_sha256)
    _check_text(f"the role of peer {peer.name!r}", peer.role)
    _check_text(f"the endpoint of peer {peer.name!r}", peer.endpoint, required=False)


def _check_revoked(entry: Revoked) -> None:
    _check_text("a revoked entry's name", entry.name)
    _check_fingerprint(f"the fingerprint of revoked {entry.name!r}", entry.fingerprint_sha256)
    if not SERIAL.fullmatch(entry.serial):
        raise ValueError(f"the serial of revoked {entry.name!r} must be lowercase hex without separators")
    _check_text(f"the reason of revoked {entry.name!r}", entry.reason, required=False)
    _check_timestamp(f"the revoked_ts of revoked {entry.name!r}", entry.revoked_ts)


# Reading


def verify_roster(
    peers_toml: bytes, revoked_toml: bytes, *, trusted: Sequence[x509.Certificate], now: datetime
) -> Roster:
    """Both files of a roster, checked: each well formed and signed by a trusted CA, the two from one
    signing (same meta, each naming the other's body hash), and not expired at `now`. Raises
    RosterRefused otherwise; nothing of a refused roster should be used."""
    peers_file = _verify_signed(peers_toml, trusted, expected=("peers",))
    revoked_file = _verify_signed(revoked_toml, trusted, expected=("revoked",))
    _check_same_signing(peers_file, revoked_file)
    _check_unexpired(peers_file.meta, now, "the roster")
    return Roster(
        meta=peers_file.meta,
        peers=peers_file.peers,
        revoked=revoked_file.revoked,
        peers_toml=peers_toml,
        revoked_toml=revoked_toml,
    )


def verify_file(text: bytes, *, trusted: Sequence[x509.Certificate], now: datetime) -> RosterFile:
    """One file on its own (peers.toml or revoked.toml, told apart by its companion key): well formed,
    signed by a trusted CA, unexpired. Whether it belongs with its companion takes `verify_roster`."""
    verified = _verify_signed(text, trusted, expected=("peers", "revoked"))
    _check_unexpired(verified.meta, now, FILE_NAMES[verified.kind])
    return verified


def evaluate(candidate: Roster, *, last_sequence: int | None, last_digest: str | None) -> Verdict:
    """What to do with a verified roster given the last one accepted: "accept" a newer one (or the first),
    "same" for the one already held, "conflict" for a different roster under the same number (two
    caretakers signed different rosters; a person must decide). An older one raises RosterRefused
    ("replayed")."""
    if (last_sequence is None) != (last_digest is None):
        raise ValueError("pass both last_sequence and last_digest of the roster held, or neither if none is held")
    if last_sequence is None:
        return "accept"
    sequence = candidate.meta.sequence_number
    if sequence > last_sequence:
        return "accept"
    if sequence < last_sequence:
        raise RosterRefused(
            "replayed",
            f"This roster is number {sequence}, older than number {last_sequence} already accepted; it may be a "
            "replay of an old roster. Keep the current one, and ask the caretaker for the latest roster.",
        )
    if candidate.digest == last_digest:
        return "same"
    return "conflict"


def _verify_signed(text: bytes, trusted: Sequence[x509.Certificate], *, expected: tuple[Kind, ...]) -> RosterFile:
    label = FILE_NAMES[expected[0]] if len(expected) == 1 else "the roster file"
    document = _parse(text, label)
    signature_line, signature = _signature_line(text, document, label)
    kind = _kind(document, expected, label)
    label = FILE_NAMES[kind]
    meta, entries = _read_document(document, kind, label)
    payload = text.replace(signature_line, b"", 1)
    body = _without_companion_line(payload, kind, label)
    certificate = _trusted_certificate(meta, trusted, label)
    _check_signature(certificate, payload, signature, label)
    return RosterFile(
        kind=kind,
        meta=meta,
        peers=tuple(entry for entry in entries if isinstance(entry, Peer)),
        revoked=tuple(entry for entry in entries if isinstance(entry, Revoked)),
        body_sha256=_sha256_hex(body),
    )


def _malformed(label: str, problem: str) -> RosterRefused:
    return RosterRefused(
        "malformed",
        f"{label} is not a well-formed roster file: {problem}. Discard it and fetch the file again from the "
        "caretaker who signed it.",
    )


def _parse(text: bytes, label: str) -> dict[str, Any]:
    try:
        document = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise _malformed(label, "it is not UTF-8 text") from None
    except tomllib.TOMLDecodeError:
        raise _malformed(label, "it is not valid TOML") from None
    if not isinstance(document.get("meta"), dict):
        raise _malformed(label, "it has no [meta] table")
    return document


def _lines(text: bytes) -> list[bytes]:
    """The lines of a file as TOML sees them: ended by \\n only (each keeps its \\n)."""
    parts = text.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _signature_line(text: bytes, document: dict[str, Any], label: str) -> tuple[bytes, bytes]:
    """The one signature line, exactly as written, and the signature it carries."""
    candidates = [line for line in _lines(text) if SIGNATURE_LINE_LOOSE.match(line)]
    if len(candidates) > 1:
        raise _malformed(label, f"it has {len(candidates)} signature_b64 lines where one belongs")
    if not candidates:
        if "signature_b64" in document["meta"]:
            raise _malformed(label, 'its signature_b64 is not on a line of its own in the form signature_b64 = "..."')
        raise _missing_signature(label)
    line = candidates[0]
    match = SIGNATURE_LINE.fullmatch(line)
    if match is None:
        raise _malformed(label, 'its signature line is not of the form signature_b64 = "<base64>"')
    if document["meta"].get("signature_b64") != match.group(1).decode("ascii"):
        raise _malformed(label, "its signature_b64 line is not in the [meta] table")
    if not match.group(1):
        raise _missing_signature(label)
    try:
        signature = base64.b64decode(match.group(1), validate=True)
    except binascii.Error:
        raise _malformed(label, "its signature_b64 is not valid base64") from None
    return line, signature


def _missing_signature(label: str) -> RosterRefused:
    return RosterRefused(
        "missing_signature",
        f"{label} carries no signature (signature_b64 is missing or empty), so nothing in it can be trusted. "
        "Ask the caretaker for the signed file.",
    )


def _kind(document: dict[str, Any], expected: tuple[Kind, ...], label: str) -> Kind:
    meta = document["meta"]
    kinds: list[Kind] = [kind for kind, key in COMPANION_KEYS.items() if key in meta]
    if len(kinds) != 1:
        raise _malformed(
            label, "its [meta] must carry exactly one of revoked_sha256 (peers.toml) or peers_sha256 (revoked.toml)"
        )
    if kinds[0] not in expected:
        raise _malformed(label, f"it is a {FILE_NAMES[kinds[0]]}; pass each file in its own place")
    return kinds[0]


def _read_document(document: dict[str, Any], kind: Kind, label: str) -> tuple[Meta, list[Peer | Revoked]]:
    table = ENTRY_TABLES[kind]
    unexpected = set(document) - {"meta", table}
    if unexpected:
        raise _malformed(label, f"it has unexpected top-level keys {sorted(unexpected)}")
    raw_entries = document.get(table, [])
    if not isinstance(raw_entries, list) or not all(isinstance(entry, dict) for entry in raw_entries):
        raise _malformed(label, f"its {table} entries must be [[{table}]] tables")
    try:
        meta = _read_meta(document["meta"], kind)
        entries = [_read_entry(entry, kind) for entry in raw_entries]
    except ValueError as problem:
        raise _malformed(label, str(problem)) from None
    return meta, entries


def _read_meta(raw: dict[str, Any], kind: Kind) -> Meta:
    companion_key = COMPANION_KEYS[kind]
    _check_keys("[meta]", raw, (*META_KEYS, companion_key, "signature_b64"))
    _check_sequence_number(raw["sequence_number"])
    for key in ("signed_ts", "signed_by", "ca_fingerprint_sha256", "expires", companion_key):
        if not isinstance(raw[key], str):
            raise ValueError(f"meta {key} must be a string")
    _check_text("meta signed_by", raw["signed_by"])
    _check_fingerprint("meta ca_fingerprint_sha256", raw["ca_fingerprint_sha256"])
    _check_timestamp("meta signed_ts", raw["signed_ts"])
    _check_timestamp("meta expires", raw["expires"])
    if not SHA256_HEX.fullmatch(raw[companion_key]):
        raise ValueError(f"meta {companion_key} must be 64 lowercase hex digits")
    return Meta(
        sequence_number=raw["sequence_number"],
        signed_ts=raw["signed_ts"],
        signed_by=raw["signed_by"],
        ca_fingerprint_sha256=raw["ca_fingerprint_sha256"],
        expires=raw["expires"],
        companion_sha256=raw[companion_key],
    )


def _read_entry(raw: dict[str, Any], kind: Kind) -> Peer | Revoked:
    keys = PEER_KEYS if kind == "peers" else REVOKED_KEYS
    where = f"a [[{ENTRY_TABLES[kind]}]] entry"
    _check_keys(where, raw, keys)
    if not all(isinstance(raw[key], str) for key in keys):
        raise ValueError(f"every field of {where} must be a string")
    if kind == "peers":
        peer = Peer(**raw)
        _check_peer(peer)
        return peer
    entry = Revoked(**raw)
    _check_revoked(entry)
    return entry


def _check_keys(where: str, raw: dict[str, Any], keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if key not in raw]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    unexpected = sorted(set(raw) - set(keys))
    if unexpected:
        raise ValueError(f"{where} has unexpected keys {', '.join(unexpected)}")


def _without_companion_line(payload: bytes, kind: Kind, label: str) -> bytes:
    key = COMPANION_KEYS[kind].encode()
    lines = [line for line in _lines(payload) if re.match(rb"[ \t]*[\"']?" + key + rb"[\"']?[ \t]*=", line)]
    if len(lines) != 1 or not re.fullmatch(key + rb' = "[0-9a-f]{64}"\n', lines[0]):
        raise _malformed(label, f'its {key.decode()} must be one line of the form {key.decode()} = "<hex>"')
    return payload.replace(lines[0], b"", 1)


def _trusted_certificate(meta: Meta, trusted: Sequence[x509.Certificate], label: str) -> x509.Certificate:
    for certificate in trusted:
        if certificate_fingerprint(certificate) == meta.ca_fingerprint_sha256:
            return certificate
    raise RosterRefused(
        "untrusted_ca",
        f"{label} names the CA {meta.ca_fingerprint_sha256}, which is not one of the CAs trusted here. If that "
        "CA really is your team's, import its certificate first; otherwise discard the file.",
    )


def _check_signature(certificate: x509.Certificate, payload: bytes, signature: bytes, label: str) -> None:
    public_key = certificate.public_key()
    try:
        if isinstance(public_key, Ed25519PublicKey):
            public_key.verify(signature, payload)
        elif isinstance(public_key, RSAPublicKey):
            public_key.verify(signature, payload, _pss(), hashes.SHA256())
        else:
            raise InvalidSignature
    except InvalidSignature:
        raise RosterRefused(
            "bad_signature",
            f"{label}'s signature does not verify with the key of the CA it names: the file was changed after "
            "signing, or signed by another key. Discard it and fetch the roster again from its caretaker.",
        ) from None


def _check_same_signing(peers_file: RosterFile, revoked_file: RosterFile) -> None:
    peers_meta, revoked_meta = peers_file.meta, revoked_file.meta
    differing = [key for key in META_KEYS if getattr(peers_meta, key) != getattr(revoked_meta, key)]
    if differing:
        problem = f"their meta differ in {', '.join(differing)}"
    elif peers_meta.companion_sha256 != revoked_file.body_sha256:
        problem = "peers.toml's revoked_sha256 does not match this revoked.toml"
    elif revoked_meta.companion_sha256 != peers_file.body_sha256:
        problem = "revoked.toml's peers_sha256 does not match this peers.toml"
    else:
        return
    raise RosterRefused(
        "mixed",
        f"peers.toml and revoked.toml come from different signings ({problem}); an old revoked list must not "
        "travel with a new peer list. Fetch both files of the latest roster together.",
    )


def _check_unexpired(meta: Meta, now: datetime, label: str) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("`now` must be a timezone-aware datetime (use datetime.now(UTC))")
    if now >= _check_timestamp("meta expires", meta.expires):
        raise RosterRefused(
            "expired",
            f"{label} expired at {meta.expires}; an expired roster may hide later revocations. Ask a caretaker "
            "to sign a fresh roster.",
        )


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
