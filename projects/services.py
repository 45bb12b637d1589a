"""Registering projects and reading their files, each state change in one transactional function.

The file is the source of truth that other tools also edit. Before every read (and later every write)
`current_document` compares the file's fingerprint with the recorded one; a difference is an external
change: it becomes a new accepted revision and an `external_change` audit event. Parsed documents are
cached per process by fingerprint, so a read of an unchanged file does not parse it again; and a file whose
status (`read_file`: device, inode, size, modification and change times) is the one it had when it was last
hashed, and had been for longer than any timestamp's granularity, is not read or hashed again either (a
50,000-variable project is 11 MB, 8 ms of hashing on every read). Writes never rely on that: the executor
checks the bytes it replaces (`projects.capability`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import TypeVar

from django.db import transaction

from audit.models import EventKind
from audit.services import record
from projects.files import FileChanged, inside_root, relative_to_root, write_atomically
from projects.models import Project
from projects.plcopen import documents, tc6
from projects.recent import RecentValues

CACHE_SIZE = 8


class ProjectRefused(ValueError):
    """A file that cannot be registered, with a message that says what is wrong and what to do."""


class ProjectUnavailable(Exception):
    """The registered file cannot be read as a project now (removed, unreadable, or broken by another tool)."""


SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")


def clean_slug(slug: str) -> str:
    """Slugs are lowercase, so what project.list shows is what a client types; refuse anything else."""
    cleaned = slug.strip().lower()
    if not SLUG.fullmatch(cleaned):
        raise ProjectRefused(
            f"{slug!r} is not a slug; use lowercase letters, digits, '-' and '_' (up to 100), e.g. line-3-press."
        )
    return cleaned


@dataclass(frozen=True)
class Opened:
    project: Project
    document: documents.ProjectDocument


def checked_document(data: bytes) -> documents.ProjectDocument:
    """Parse and schema-check a project file; refuse it naming the first schema error's line."""
    try:
        document = documents.load(data)
    except documents.ProjectFormatError as exc:
        raise ProjectRefused(f"not a PLCopen TC6 2.01 project: {exc}") from None
    errors = documents.validate(document)
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProjectRefused(
            f"the file is not valid against the TC6 2.01 schema: line {first.line}: {first.message}{more}. "
            "Fix it in the engineering tool and export it again."
        )
    return document


def do_import_project(data: bytes, *, slug: str, name: str = "", acting_user: str) -> Project:
    """Copy a project file under FORGE_PROJECTS_ROOT as `<slug>.xml` and register it."""
    slug = clean_slug(slug)
    document = checked_document(data)
    if Project.objects.filter(slug=slug).exists():
        raise ProjectRefused(f"a project with the slug {slug!r} exists already; choose another slug.")
    path = inside_root(f"{slug}.xml")
    if path.exists():
        raise ProjectRefused(f"{path} exists already; bind it instead, or choose another slug.")
    name = name or _project_name(document) or slug
    with transaction.atomic():
        project = _register(slug, name, path, data, acting_user, how="import")
        write_atomically(path, data)
    return project


def do_bind_project(path: str | Path, *, slug: str, name: str = "", acting_user: str) -> Project:
    """Register a project file that already lies inside FORGE_PROJECTS_ROOT, where it stays."""
    slug = clean_slug(slug)
    resolved = inside_root(path)
    try:
        data = resolved.read_bytes()
    except OSError as exc:
        raise ProjectRefused(f"cannot read {resolved}: {exc.strerror}") from None
    document = checked_document(data)
    if Project.objects.filter(slug=slug).exists():
        raise ProjectRefused(f"a project with the slug {slug!r} exists already; choose another slug.")
    if Project.objects.filter(path=relative_to_root(resolved)).exists():
        raise ProjectRefused(f"{resolved} is registered already.")
    with transaction.atomic():
        return _register(slug, name or _project_name(document) or slug, resolved, data, acting_user, how="bind")


def _register(slug: str, name: str, path: Path, data: bytes, acting_user: str, *, how: str) -> Project:
    project = Project.objects.create(
        slug=slug, name=name, path=relative_to_root(path), fingerprint=documents.fingerprint(data)
    )
    record(
        EventKind.PROJECT_REGISTERED,
        arguments={"how": how, "path": project.path, "fingerprint": project.fingerprint},
        outcome="registered",
        called_by=acting_user,
        project=slug,
    )
    return project


def _project_name(document: documents.ProjectDocument) -> str:
    header = document.root.find(tc6.q("contentHeader"))
    return header.get("name", "") if header is not None else ""


def project_path(project: Project) -> Path:
    return inside_root(project.path)


# How long before it was read a file must have last changed (its modification and change times) for its status
# to stand for its bytes from then on: far longer than any file system's timestamp granularity, so that a write
# in the same tick as the bytes that were hashed, which could leave the status as it was, is not possible.
SETTLED_NS = 2_000_000_000
Status = tuple[int, int, int, int, int]


def _status(stat: os.stat_result) -> Status:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@dataclass(frozen=True)
class _Hashed:
    status: Status
    fingerprint: str


class ProjectFile:
    """A project file's fingerprint, and its bytes. When the fingerprint was known from the file's unchanged
    status, the bytes are read only if asked for, and FileChanged is raised if they no longer have it."""

    def __init__(self, project: Project, fingerprint: str, data: bytes | None = None) -> None:
        self.project = project
        self.fingerprint = fingerprint
        self._data = data

    @property
    def data(self) -> bytes:
        if self._data is None:
            with _opened_file(self.project, project_path(self.project)) as handle:
                data = handle.read()
            if documents.fingerprint(data) != self.fingerprint:
                raise FileChanged(f"the file of project {self.project.slug} changed while it was being read")
            self._data = data
        return self._data


def read_file(project: Project, *, fresh: bool = False) -> ProjectFile:
    """The project's file as it is now, not parsed; ProjectUnavailable if it cannot be read. Its bytes are read and
    hashed unless its status is the one it had when they last were, settled then (`SETTLED_NS`), or if `fresh`.

    The file is opened before its status is read: opening is what makes a network file system check its cached
    attributes with the server."""
    path = project_path(project)
    with _opened_file(project, path) as handle:
        before = _status(os.fstat(handle.fileno()))
        known = _hashed.get(path)
        if known is not None and known.status == before and not fresh:
            return ProjectFile(project, known.fingerprint)
        now = time.time_ns()  # before the bytes are read: the file must have settled by then
        data = handle.read()
        after = _status(os.fstat(handle.fileno()))
    fingerprint = documents.fingerprint(data)
    if before == after and now - max(before[3], before[4]) >= SETTLED_NS:
        _hashed.put(path, _Hashed(before, fingerprint))
    return ProjectFile(project, fingerprint, data)


def _opened_file(project: Project, path: Path) -> BufferedReader:
    try:
        return path.open("rb")
    except OSError as exc:
        raise ProjectUnavailable(
            f"the file of project {project.slug} cannot be read ({exc.strerror}); an operator must restore "
            f"{project.path} under the projects root"
        ) from None


T = TypeVar("T")


def with_file(project: Project, use: Callable[[ProjectFile], T]) -> T:
    """`use(read_file(project))`, once more on bytes read afresh if the file was written while it was in use."""
    try:
        return use(read_file(project))
    except FileChanged:
        return use(read_file(project, fresh=True))


def not_a_project(project: Project, exc: documents.ProjectFormatError) -> ProjectUnavailable:
    """What a read says of a file that no longer parses (not recorded as a revision: no tool can read it)."""
    return ProjectUnavailable(
        f"the file of project {project.slug} was changed by another tool and is no longer a PLCopen "
        f"project ({exc}); fix or restore {project.path}"
    )


def accepted(project: Project, fingerprint: str) -> Project:
    """The project with the file of this fingerprint, which parsed, as its accepted state: an external change
    is recorded first (new accepted revision)."""
    if fingerprint != project.fingerprint:
        return do_record_external_change(project, fingerprint)
    return project


def current_document(project: Project) -> Opened:
    """The project as its file is now; an external change is recorded first (new accepted revision)."""
    return with_file(project, lambda file: _opened(project, file))


def _opened(project: Project, file: ProjectFile) -> Opened:
    try:
        document = _cached(file.fingerprint, lambda: file.data)
    except documents.ProjectFormatError as exc:
        raise not_a_project(project, exc) from None
    return Opened(project=accepted(project, file.fingerprint), document=document)


def do_record_external_change(project: Project, fingerprint: str) -> Project:
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        if locked.fingerprint == fingerprint:
            return locked  # another request recorded it first
        previous = locked.fingerprint
        locked.advance_revision(fingerprint)
        record(
            EventKind.EXTERNAL_CHANGE,
            arguments={"previous": previous, "fingerprint": fingerprint, "revision": locked.accepted_revision},
            outcome="new accepted revision",
            called_by="file",
            project=locked.slug,
        )
    return locked


def export_bytes(project: Project) -> bytes:
    """The project's file as the service writes it (deterministic)."""
    return documents.serialize(current_document(project).document)


_cache: RecentValues[str, documents.ProjectDocument] = RecentValues(CACHE_SIZE)
# The fingerprint of each project file last hashed, with the file's status then (`read_file`).
_hashed: RecentValues[Path, _Hashed] = RecentValues(64)


def clear_cache() -> None:
    """Forget every parsed document and file fingerprint, as a restart does (tests and benchmarks)."""
    _cache.clear()
    _hashed.clear()


def _cached(fingerprint: str, data: Callable[[], bytes]) -> documents.ProjectDocument:
    """Parsed documents by content fingerprint; readers must not modify them (operations copy first)."""
    document = _cache.get(fingerprint)
    if document is None:
        document = documents.load(data())
        _cache.put(fingerprint, document)
    return document
