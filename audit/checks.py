"""Start-up checks of the audit log against what is kept outside the database.

They read the database, so they are tagged `database` (and `audit`): `runmcp` runs them before it serves,
`migrate` and `check --database default` run them too. Each is an Error: a server that recorded on top
of a database that lost events would give their numbers to other events.

- audit.E001: the database is behind (or not the log of) the checkpoint kept beside the mirror.
- audit.E002: the mirror holds events past the database's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.db import DEFAULT_DB_ALIAS, DatabaseError

from audit import merkle
from audit.checkpoint import CheckpointError
from audit.kept import SavedCheckpoint, kept_path, read_kept
from audit.services import DatabaseNodeStore, past_the_end, signed_checkpoint, tree_size

TAG = "audit"
RESOLVE = (
    "Run `python manage.py audit_verify`, which names what differs. Restore a database at least as new as the "
    "kept checkpoint; or, if losing those events is accepted, move {path} aside (keep it as evidence). "
    "`migrate --skip-checks` migrates meanwhile."
)


@register(Tags.database, TAG)
def check_log_not_rolled_back(
    app_configs: Sequence[Any] | None = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    mirror = settings.FORGE_AUDIT_LOG
    try:
        size = tree_size()
    except DatabaseError:
        return []  # not migrated yet: nothing recorded to compare
    try:
        kept = read_kept(mirror)
        _, _, past = past_the_end(mirror)
    except OSError as exc:
        return [
            Error(
                f"Cannot read the audit mirror {mirror} or the checkpoint kept beside it: {exc.strerror}.",
                hint="Give the server's user access to that folder (mode 0700, owned by it).",
                id="audit.E001",
            )
        ]
    problems: list[CheckMessage] = []
    behind = _behind_kept(kept, size) if kept is not None else None
    if behind is not None:
        problems.append(Error(f"{behind}.", hint=RESOLVE.format(path=kept_path(mirror)), id="audit.E001"))
    if past is not None:
        problems.append(Error(f"The audit mirror {mirror} {past}.", hint=RESOLVE.format(path=mirror), id="audit.E002"))
    return problems


def _behind_kept(kept: SavedCheckpoint, size: int) -> str | None:
    """How the database's log falls short of the kept checkpoint, or None when it holds it."""
    try:
        signed = signed_checkpoint(kept.note)
    except CheckpointError as exc:
        return f"{kept.describe()} is not a checkpoint this server signed ({exc})"
    lost = "the database was rolled back (an old backup restored) or its tail deleted"
    if signed.size > size:
        return f"The audit log in the database holds {size} events but {kept.describe()} saw {signed.size}: {lost}"
    try:
        root = merkle.root(signed.size, DatabaseNodeStore())
    except merkle.MissingNodeError:
        return f"The audit tree in the database lacks nodes up to event {signed.size}, which {kept.describe()} saw"
    if root != signed.root:
        return f"The audit log's first {signed.size} events do not hash to the root {kept.describe()} signed"
    return None
