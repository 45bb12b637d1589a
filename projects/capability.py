"""The executor's adapter for project files (capability `project.file`, target kind `project_file`).

The executor (confirmations) holds no project logic: it reaches project files only through this class,
named in `FORGE_CAPABILITIES`. A target's natural identity is the project's slug and its file path under
the projects root; the one method, `apply_operations`, turns the file's current bytes and an intent
(`operations` in the vocabulary of `projects.operations`, and the `modified_at` stamp chosen when the
change was previewed) into the new bytes, deterministically, so the operator approves exactly what is
written. Settling a written file records it as the project's next accepted revision.

The steps of one change (its identity, the reads before and after the write, the write) each check that the
project is still registered at the identity's path; inside `one_change` they check it against the project's
row as that change read it, once, rather than reading it again before every step. Each change reads it anew.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.models import EventKind
from audit.together import audit_row
from forge_core.canonical import canonical_json
from forge_core.capabilities import IntentRefused, Observation, Step, TargetMissing
from projects import drafts, operations
from projects.files import PathOutsideRoot, inside_root, write_atomically
from projects.models import Project, project_by_slug, project_by_slug_locked
from projects.plcopen import documents
from projects.recent import RecentValues

APPLY_OPERATIONS = "apply_operations"
ACCEPT_DRAFT = "accept_draft"  # the same transformation, and the draft's groups become accepted


# The registrations (slug, path) read in the change under way, by slug; None outside `one_change`.
_registrations: ContextVar[dict[str, list[tuple[str, str]]] | None] = ContextVar("registrations", default=None)


def _registered(slug: str) -> list[tuple[str, str]]:
    """The (slug, path) of the project registered under `slug` (none or one: slugs are unique), as the change under
    way first read them; read now outside a change."""
    seen = _registrations.get()
    if seen is not None and slug in seen:
        return seen[slug]
    found = [(project.slug, project.path) for project in project_by_slug(slug)]
    if seen is not None:
        seen[slug] = found
    return found


class ProjectFileCapability:
    name = "project.file"
    target_kind = "project_file"

    @contextmanager
    def one_change(self) -> Iterator[None]:
        """The steps of one change: the project's row is read by the first that needs it, and the others check
        the identity against that row. Inside a change already under way, its reads serve."""
        if _registrations.get() is not None:
            yield
            return
        token = _registrations.set({})
        try:
            yield
        finally:
            _registrations.reset(token)

    def identity(self, target: Mapping[str, Any]) -> dict[str, Any]:
        slug = str(target.get("project", ""))
        matches = _registered(slug)
        if len(matches) != 1:
            raise TargetMissing(f"there is no project {slug!r}")
        return {"project": matches[0][0], "path": matches[0][1]}

    def _path(self, identity: Mapping[str, Any]) -> Path:
        # The executor holds the identity in canonical form (NFC); the file keeps the name it has on disk,
        # which may be decomposed (as macOS writes names), so compare the registered path canonically.
        matches = [
            path
            for _slug, path in _registered(identity["project"])
            if unicodedata.normalize("NFC", path) == unicodedata.normalize("NFC", identity["path"])
        ]
        if len(matches) != 1:
            raise TargetMissing(f"project {identity['project']} is no longer registered at that path")
        try:
            return inside_root(matches[0])
        except PathOutsideRoot as exc:
            raise TargetMissing(str(exc)) from None

    def read(self, identity: Mapping[str, Any]) -> Observation:
        path = self._path(identity)
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise TargetMissing(f"the project file cannot be read ({exc.strerror})") from None
        return Observation(content=content, fingerprint=documents.fingerprint(content))

    def fingerprint(self, content: bytes) -> str:
        return documents.fingerprint(content)

    def forward(self, identity: Mapping[str, Any], method: str, current: bytes, intent: Mapping[str, Any]) -> bytes:
        if method not in (APPLY_OPERATIONS, ACCEPT_DRAFT):
            raise IntentRefused(f"project files have no method {method!r}")
        return apply_intent(current, intent)

    def write(self, identity: Mapping[str, Any], content: bytes, step: Step) -> None:
        write_atomically(self._path(identity), content, step)

    def settle(
        self,
        identity: Mapping[str, Any],
        fingerprint: str,
        *,
        actor: str,
        label: str,
        method: str,
        intent: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        revision = do_record_written(identity["project"], fingerprint, actor=actor, label=label)
        if method == ACCEPT_DRAFT and intent is not None:
            drafts.do_settle_accepted(identity["project"], intent, actor=actor)
        return {"accepted_revision": revision}


def intent_for(ops: list[dict[str, Any]], modified_at: datetime | None = None) -> dict[str, Any]:
    """An intent for `apply_operations`: the operations, and the modification stamp the result carries."""
    stamp = (modified_at or timezone.now()).replace(microsecond=0).isoformat()
    return {"operations": ops, "modified_at": stamp}


def applied(document: documents.ProjectDocument, intent: Mapping[str, Any]) -> tuple[operations.ApplyResult, bytes]:
    """Apply an intent to a parsed document: the result and its bytes; OperationRefused when it does not apply."""
    result = operations.apply(document, intent["operations"], now=datetime.fromisoformat(intent["modified_at"]))
    return result, documents.serialize(result.doc)


RESULTS_KEPT = 4
# The bytes an intent makes of a file, by the file's fingerprint and the intent. A proposal's preview makes
# them and the executor carrying out its approval needs exactly them again: an apply and a serialization,
# costly on a large project. The executor still compares their fingerprint with the one the operator
# reviewed, and they are in this process's memory only.
_results: RecentValues[tuple[str, str], bytes] = RecentValues(RESULTS_KEPT)


def _result_key(current: bytes, intent: Mapping[str, Any]) -> tuple[str, str]:
    return documents.fingerprint(current), canonical_json(intent)


def remember_result(current: bytes, intent: Mapping[str, Any], result: bytes) -> None:
    """Keep what `applied` made of `current`, for `apply_intent` on the same bytes and intent."""
    _results.put(_result_key(current, intent), result)


def apply_intent(current: bytes, intent: Mapping[str, Any]) -> bytes:
    """The file's new bytes: the same for the same input, so a preview and the write agree exactly."""
    key = _result_key(current, intent)
    kept = _results.get(key)
    if kept is not None:
        return kept
    try:
        result = applied(documents.load(current), intent)[1]
    except (documents.ProjectFormatError, operations.OperationRefused, KeyError, ValueError) as exc:
        raise IntentRefused(f"the change no longer applies: {exc}") from None
    _results.put(key, result)
    return result


def do_record_written(slug: str, fingerprint: str, *, actor: str, label: str) -> int:
    """The file now holds a change the executor wrote: that is the project's next accepted revision. Inside the
    executor's VERIFIED transaction it takes no savepoint: a failure here fails that transaction as a whole."""
    with transaction.atomic(savepoint=False):
        locked = project_by_slug_locked(slug)
        if not locked:
            raise Project.DoesNotExist(f"there is no project {slug!r}")
        project = locked[0]
        if project.fingerprint != fingerprint:
            project.advance_revision(fingerprint)
        # Kept for the transaction's batch of audit rows when it has one (the executor's VERIFIED move: after the
        # contract's row, before the confirmation's), so it costs no chain head read and INSERTs of its own.
        audit_row(
            kind=EventKind.PROJECT_WRITTEN,
            arguments={"fingerprint": fingerprint, "revision": project.accepted_revision, "change": label},
            outcome="new accepted revision",
            called_by=actor,
            project=slug,
        )
    return project.accepted_revision
