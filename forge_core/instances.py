"""Instance records: how a local client finds the running server, and how two servers learn they share a file.

A running server (`manage.py runmcp`) publishes two small JSON files, each written atomically, 0600, in a 0700
folder, and removes both when it stops cleanly:

- its **instance record**, `FORGE_DATA_DIR/instances/<pid>.json`: the URLs it serves, its pid, when it started
  and a fingerprint of the data folder (a SHA-256 of its resolved path). `manage.py mcp_stdio` without `--url`
  reads these to find the server of its data folder. The record never holds a token or a project path.
- its **binding record**, in the per-user runtime folder shared by every deployment of this user on this
  machine (`FORGE_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/forge-mcp`, else `<tmp>/forge-mcp-<uid>`): the data
  folder's fingerprint, the pid, and a SHA-256 of the resolved path of each project file it binds. Two data
  folders are two deployments; a digest that appears under two fingerprints is one file with two writers,
  which the console's dashboard warns about. A marker beside the project file would put machine state into
  the operator's project folder (and its version control), so the runtime folder holds it instead.

Liveness is the pid: a record whose process is gone is stale, and whoever reads it first deletes it. A
crashed server therefore never keeps a client from finding the next one, nor trips a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT = 1
INSTANCES = "instances"


@dataclass(frozen=True)
class Instance:
    """A live server's instance record."""

    pid: int
    urls: tuple[str, ...]
    data_fingerprint: str
    started_at: str

    @property
    def mcp_url(self) -> str:
        """The first served URL's MCP endpoint (plain HTTP first when the server serves both)."""
        return f"{self.urls[0]}/mcp"


@dataclass(frozen=True)
class Binding:
    """Another live server's binding record: which project files (by digest) it writes."""

    pid: int
    data_fingerprint: str
    files: frozenset[str]


class UnsafeFolder(Exception):
    """A record folder that is not this user's own private folder."""


def data_fingerprint(data_dir: Path) -> str:
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()


def file_digest(path: Path) -> str:
    """A project file as the binding records name it: the digest of its resolved path, never the path."""
    return hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()


def runtime_dir() -> Path:
    configured = os.environ.get("FORGE_RUNTIME_DIR", "").strip()
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if xdg:
        return Path(xdg) / "forge-mcp"
    return Path(tempfile.gettempdir()) / f"forge-mcp-{os.getuid()}"


def private_folder(folder: Path) -> Path:
    """`folder`, created 0700 if missing; refused when it belongs to another user or others may enter it
    (a shared temporary folder could hold one planted there)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise UnsafeFolder(f"{folder} is not a folder of this user; remove it or set FORGE_RUNTIME_DIR.")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UnsafeFolder(f"{folder} may be opened by other users; run chmod 700 {folder}.")
    return folder


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process of another user: alive, though not ours
    return True


def write_record(path: Path, content: dict[str, Any]) -> None:
    """Temporary file (0600) beside the target, then rename over it: a reader sees all of it or none."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(content, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _live_records(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """The records in `folder` whose process lives; unreadable or stale ones are deleted on the way."""
    found: list[dict[str, Any]] = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob(pattern)):
        try:
            content = json.loads(path.read_text())
            pid = int(content["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            content, pid = None, 0
        if content is None or not alive(pid):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        found.append(content)
    return found


# --- the instance record (discovery) ------------------------------------------------------------------


def instance_path(data_dir: Path, pid: int | None = None) -> Path:
    return Path(data_dir) / INSTANCES / f"{pid or os.getpid()}.json"


def publish_instance(data_dir: Path, urls: list[str]) -> Path:
    folder = private_folder(Path(data_dir) / INSTANCES)
    path = folder / f"{os.getpid()}.json"
    write_record(
        path,
        {
            "format": FORMAT,
            "pid": os.getpid(),
            "urls": list(urls),
            "data_fingerprint": data_fingerprint(data_dir),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    return path


def live_instances(data_dir: Path) -> list[Instance]:
    """The live servers of this data folder, oldest pid first; stale records are pruned."""
    fingerprint = data_fingerprint(data_dir)
    instances = []
    for content in _live_records(Path(data_dir) / INSTANCES, "*.json"):
        urls = content.get("urls")
        if content.get("data_fingerprint") != fingerprint or not isinstance(urls, list) or not urls:
            continue  # copied from another data folder, or a server serving nothing here
        instances.append(
            Instance(
                pid=int(content["pid"]),
                urls=tuple(str(url) for url in urls),
                data_fingerprint=fingerprint,
                started_at=str(content.get("started_at", "")),
            )
        )
    return instances


# --- the binding record (two writers on one file) ----------------------------------------------------


def binding_path(data_dir: Path, pid: int | None = None) -> Path:
    return runtime_dir() / f"{data_fingerprint(data_dir)[:32]}-{pid or os.getpid()}.json"


def publish_binding(data_dir: Path, files: list[Path]) -> Path:
    private_folder(runtime_dir())
    path = binding_path(data_dir)
    write_record(
        path,
        {
            "format": FORMAT,
            "pid": os.getpid(),
            "data_fingerprint": data_fingerprint(data_dir),
            "files": sorted({file_digest(file) for file in files}),
        },
    )
    return path


def other_bindings(data_dir: Path) -> list[Binding]:
    """The live servers of other data folders of this user, with the files they bind; [] when the runtime
    folder is missing or not private (nothing trustworthy to compare with)."""
    folder = runtime_dir()
    try:
        if folder.exists():
            private_folder(folder)
    except UnsafeFolder:
        return []
    own = data_fingerprint(data_dir)
    bindings = []
    for content in _live_records(folder, "*.json"):
        fingerprint = content.get("data_fingerprint")
        files = content.get("files")
        if fingerprint == own or not isinstance(fingerprint, str) or not isinstance(files, list):
            continue
        bindings.append(
            Binding(pid=int(content["pid"]), data_fingerprint=fingerprint, files=frozenset(map(str, files)))
        )
    return bindings


def withdraw(data_dir: Path) -> None:
    """Remove this process's records (a clean stop)."""
    for path in (instance_path(data_dir), binding_path(data_dir)):
        with contextlib.suppress(OSError):
            path.unlink()


# --- the client's token file --------------------------------------------------------------------------


class LooseTokenFile(Exception):
    """A token file others may read."""


def read_token_file(path: Path) -> str:
    """The token in `path`, refused unless only its owner may read it (OSError when it cannot be read)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise LooseTokenFile(
            f"{path} may be read by other users (mode {mode:04o}); run chmod 600 {path} and start again."
        )
    return path.read_text().strip()
