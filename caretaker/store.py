"""The published roster on disk: `peers.toml`, `revoked.toml` and `crl.pem` in `FORGE_ROSTER_DIR`, replaced
together or not at all.

Two files that must match each other (each names the other's hash) cannot be replaced by two renames without
a moment where one is new and the other old. So each roster is written whole into a generation folder of its
own (`.generations/<sequence>-<digest>/`, every file fsynced, the folder renamed into place), and one symbolic
link, `current`, is switched to it with a single atomic rename. The names people and tools use,
`FORGE_ROSTER_DIR/peers.toml` and its siblings, are links through `current`, made once. A process killed at
any moment leaves `current` on the old generation or the new one, each complete and verifying, never a
half-written file. The last few generations are kept; older ones are pruned.

Rosters signed elsewhere are not dropped over these links but into `FORGE_ROSTER_DIR/incoming/`, which the
caretaker follows (`caretaker.services.consider_incoming`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from forge_core.capabilities import Step, no_step

FILES = ("peers.toml", "revoked.toml", "crl.pem")
GENERATIONS = ".generations"
CURRENT = "current"
INCOMING = "incoming"
KEEP_GENERATIONS = 10
_SIGNATURE_LINE = re.compile(rb"^signature_b64 = .*$", re.MULTILINE)


class StoreUnreadable(Exception):
    """The published roster is incomplete or unreadable; the message says what to do."""


@dataclass(frozen=True)
class Published:
    """One roster as published: the three files' bytes (empty before the first roster)."""

    peers_toml: bytes = b""
    revoked_toml: bytes = b""
    crl_pem: bytes = b""

    def files(self) -> dict[str, bytes]:
        return dict(zip(FILES, (self.peers_toml, self.revoked_toml, self.crl_pem), strict=True))

    @property
    def empty(self) -> bool:
        return not (self.peers_toml or self.revoked_toml or self.crl_pem)

    def bundle(self) -> bytes:
        """The three files as one value (what the executor reads, seals and writes)."""
        return json.dumps(
            {name: base64.b64encode(data).decode() for name, data in self.files().items()}, sort_keys=True
        ).encode()

    @classmethod
    def from_bundle(cls, bundle: bytes) -> Published:
        if not bundle:
            return cls()
        try:
            files = json.loads(bundle)
            return cls(*(base64.b64decode(files[name], validate=True) for name in FILES))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreUnreadable(f"not a roster bundle ({type(exc).__name__})") from None


def fingerprint(bundle: bytes) -> str:
    """The SHA-256 of a roster bundle with each file's signature line blanked.

    Everything a person reviews (entries, sequence, times, the CA, the issued certificate inside the CRL and
    roster) is covered; the signatures are not, because an RSA-PSS signature is randomized and a preview and
    the write must agree. The signatures are checked whenever a roster is read for trust (`caretaker.roster`).
    """
    published = Published.from_bundle(bundle)
    blanked = [_SIGNATURE_LINE.sub(b'signature_b64 = ""', data) for data in published.files().values()]
    return hashlib.sha256(b"\0".join(blanked)).hexdigest()


def read_published(folder: Path) -> Published:
    """The roster `current` points at; an empty one when nothing was published yet."""
    current = folder / CURRENT
    if not current.is_symlink() and not current.exists():
        return Published()
    try:
        return Published(*((current / name).read_bytes() for name in FILES))
    except OSError as exc:
        raise StoreUnreadable(
            f"the published roster in {folder} cannot be read ({exc.strerror}: {exc.filename}); restore "
            f"{folder}/{CURRENT} to point at a complete folder under {GENERATIONS}/"
        ) from None


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _link(folder: Path, name: str, target: str) -> None:
    """Make `folder/name` a symbolic link to `target`, atomically replacing what is there."""
    temporary = folder / f".{name}.{secrets.token_hex(4)}"
    os.symlink(target, temporary)
    try:
        os.replace(temporary, folder / name)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


def publish(folder: Path, published: Published, *, sequence: int, step: Step = no_step) -> Path:
    """Make `published` the current roster; returns its generation folder. OSError when it could not (then
    `current` still names the roster it named before)."""
    generations = folder / GENERATIONS
    generations.mkdir(parents=True, exist_ok=True, mode=0o755)
    (folder / INCOMING).mkdir(exist_ok=True, mode=0o700)
    name = f"{sequence:012d}-{fingerprint(published.bundle())[:12]}-{secrets.token_hex(3)}"
    staging = generations / f".{name}.partial"
    staging.mkdir(mode=0o755)
    try:
        for file_name, data in published.files().items():
            _write_file(staging / file_name, data)
        _fsync_folder(staging)
        os.rename(staging, generations / name)
        _fsync_folder(generations)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    step("after_temp_write")
    for file_name in FILES:  # the names people use, made once; dangling until the first `current`
        if not (folder / file_name).is_symlink():
            _link(folder, file_name, f"{CURRENT}/{file_name}")
    _link(folder, CURRENT, f"{GENERATIONS}/{name}")
    _fsync_folder(folder)
    step("after_rename")
    _prune(generations, keep=name)
    return generations / name


def _prune(generations: Path, *, keep: str) -> None:
    """Remove all but the newest generations (never the current one) and any staging folder left by a crash."""
    names = sorted(path.name for path in generations.iterdir() if not path.name.startswith("."))
    for old in [n for n in names[:-KEEP_GENERATIONS] if n != keep]:
        shutil.rmtree(generations / old, ignore_errors=True)
    for partial in generations.glob(".*.partial"):
        with contextlib.suppress(OSError):
            shutil.rmtree(partial)
