"""`python manage.py roster_verify FILE... [--trust PEM ...]`: check a roster's files as any member can, on a
laptop: signed by a trusted CA, unexpired, and (given both) belonging together.

Two files are checked as a pair (peers.toml and revoked.toml, in either order); one file on its own. The CAs
trusted are the trust store's (FORGE_TRUST_DIR), or only those given with `--trust`, so an exported setup can
be checked without a server. Reads files only: no database.
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from django.core.management.base import BaseCommand, CommandError

from caretaker import roster, trust

BAD_ARGUMENT = 2  # the command was not run as asked (a file it cannot read); 1 is a roster refused


class Command(BaseCommand):
    help = (
        "Verify peers.toml and/or revoked.toml against the trust store (or --trust CA files): prints "
        "'OK sequence N, signed by ..., expires ...', or the reason it is refused (exit status 1)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="peers.toml and/or revoked.toml")
        parser.add_argument(
            "--trust",
            dest="trusted_files",
            type=Path,
            action="append",
            default=[],
            metavar="PEM",
            help="a CA certificate to trust instead of the trust store (repeatable)",
        )

    def handle(self, *args, files: list[Path], trusted_files: list[Path], **options) -> None:
        if len(files) > 2:
            raise CommandError("Give one roster file, or the two of a roster (peers.toml revoked.toml).", returncode=2)
        texts = [_read(path, "") for path in files]
        trusted = _certificates(trusted_files) if trusted_files else _trust_store()
        now = datetime.now(UTC)
        try:
            if len(texts) == 2:
                peers_toml, revoked_toml = _as_pair(texts[0], texts[1])
                checked = roster.verify_roster(peers_toml, revoked_toml, trusted=trusted, now=now)
                meta, counts = checked.meta, f"{_peers(len(checked.peers))}, {len(checked.revoked)} revoked"
            else:
                single = roster.verify_file(texts[0], trusted=trusted, now=now)
                meta = single.meta
                counts = _peers(len(single.peers)) if single.kind == "peers" else f"{len(single.revoked)} revoked"
        except roster.RosterRefused as refused:
            raise CommandError(f"REFUSED ({refused.reason}): {refused}", returncode=1) from None
        self.stdout.write(
            f"OK sequence {meta.sequence_number}, signed by {meta.signed_by} (CA {meta.ca_fingerprint_sha256}), "
            f"expires {meta.expires}; {counts}"
        )


def _peers(count: int) -> str:
    return f"{count} peer" if count == 1 else f"{count} peers"


def _read(path: Path, option: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CommandError(f"{option}{path}: cannot read it ({exc.strerror})", returncode=BAD_ARGUMENT) from None


def _certificates(paths: list[Path]) -> list[x509.Certificate]:
    found: list[x509.Certificate] = []
    for path in paths:
        try:
            found.extend(x509.load_pem_x509_certificates(_read(path, "--trust ")))
        except ValueError:
            raise CommandError(
                f"--trust {path}: not a PEM certificate; give the CA's certificate (-----BEGIN CERTIFICATE-----).",
                returncode=BAD_ARGUMENT,
            ) from None
    return found


def _trust_store() -> list[x509.Certificate]:
    found = trust.trusted_certificates()
    if not found:
        raise CommandError(
            f"The trust store ({trust.folder()}) holds no CA certificate: add the team CA's certificate there, or "
            "pass it with --trust ca.crt.",
            returncode=1,
        )
    return found


def _as_pair(first: bytes, second: bytes) -> tuple[bytes, bytes]:
    """(peers.toml, revoked.toml), whichever order they were given in: peers.toml's meta names revoked_sha256."""
    if _names_companion(second, roster.COMPANION_KEYS["peers"]) and not _names_companion(
        first, roster.COMPANION_KEYS["peers"]
    ):
        return second, first
    return first, second


def _names_companion(text: bytes, key: str) -> bool:
    try:
        meta = tomllib.loads(text.decode()).get("meta")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # verify_roster says what is wrong with it
    return isinstance(meta, dict) and key in meta
