"""The runtime monitor: runtime connector tokens, the snapshots they post, and the latest values clients read.

A runtime connector (a gateway beside the PLC) reads variable values from the running controller and posts
them to `POST /api/projects/{slug}/runtime-snapshots` (`access.runtime_api`) with a runtime token (`frt_`,
the third kind of bearer token beside client and operator tokens). A runtime token is bound to exactly one
project when it is made: it posts that project's snapshots and nothing else, and no other credential posts
them. Each snapshot carries a timestamp (when the connector read the values) and, per variable, its value
and whether the runtime forces it. Only the latest value of each variable is kept (one `RuntimeValue` row
per project and variable; a snapshot older than what is stored does not replace it), so what a connector
sends every second stays a bounded table; the audit log holds one row per snapshot, with the values'
digest rather than the values.

`monitor.snapshot` reads them back (`latest_values`). Nothing here, nor anywhere in Forge, changes a value in
the running controller: the monitor only reports, and a registry test keeps any tool from offering to force,
write or pin one.

Every state change is one function that writes its audit row: `do_create_runtime_token`,
`do_revoke_runtime_token`, `do_record_snapshot`.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from access.models import RuntimeToken, RuntimeValue
from access.services import LAST_USED_RESOLUTION, record_refused_token, record_token_event
from audit.models import EventKind
from audit.services import record
from forge_core.canonical import canonical_json
from forge_core.console import is_operator
from forge_core.errors import AuditUnavailable, Refusal
from forge_core.tokens import RUNTIME_TOKEN_PREFIX, mint_token, presented_digest
from projects.models import Project
from projects.rights import can_grant

MAX_VALUES_PER_SNAPSHOT = 500
MAX_VARIABLE_CHARS = 200
MAX_TEXT_VALUE_CHARS = 1000
MAX_VARIABLES_PER_PROJECT = 10_000
MAX_CLOCK_AHEAD = timedelta(minutes=5)  # a connector's clock may run a little ahead of the server's


@dataclass(frozen=True)
class NewRuntimeToken:
    token: RuntimeToken
    raw: str  # shown once, never stored


@dataclass(frozen=True)
class ReportedValue:
    variable: str
    value: bool | int | float | str
    forced: bool


class RuntimeTokenNotAllowed(Exception):
    """The operator who would answer for a runtime token may not say who sees its project; nothing was created."""


def do_create_runtime_token(
    project: Project, label: str, *, created_by: User, acting_user: str = ""
) -> NewRuntimeToken:
    """Create a runtime token bound to `project` and return it with its raw value, shown once.

    The operator who answers for it (`created_by`) must be a console operator with `grant_access` on the project,
    whichever door asks (the console, `manage.py runtime_token`); a refusal is audited and creates nothing."""
    if not (is_operator(created_by) and can_grant(created_by, project)):
        record(
            EventKind.TOKEN_CREATED,
            arguments={"kind": RuntimeToken.kind, "label": label, "project": project.slug},
            outcome="refused: no grant_access permission",
            called_by=acting_user or created_by.get_username(),
            project=project.slug,
        )
        raise RuntimeTokenNotAllowed(
            f"{created_by.get_username()} may not bind a runtime token to {project.slug}: that takes a console "
            "operator with grant_access on the project; name one who has it, or ask the project's owner."
        )
    minted = mint_token(RUNTIME_TOKEN_PREFIX)
    with transaction.atomic():
        token = RuntimeToken.objects.create(
            label=label, project=project, created_by=created_by, digest=minted.digest, prefix=minted.shown
        )
        record_token_event(
            EventKind.TOKEN_CREATED, token, outcome="created", called_by=acting_user or created_by.get_username()
        )
    return NewRuntimeToken(token=token, raw=minted.raw)


def do_revoke_runtime_token(token: RuntimeToken, *, acting_user: str) -> bool:
    """Revoke a runtime token at once: its next snapshot is refused. False when it already was revoked."""
    with transaction.atomic():
        if not token.mark_revoked():
            return False
        record_token_event(EventKind.TOKEN_REVOKED, token, outcome="revoked", called_by=acting_user)
    token.refresh_from_db(fields=["revoked_at"])
    return True


def authenticate_runtime_token(raw: str, path: str) -> RuntimeToken | None:
    """The usable runtime token for a presented `frt_` value, its project and maker loaded; a refused one is
    audited as an attempt."""
    digest = presented_digest(raw, RUNTIME_TOKEN_PREFIX)
    token = None
    if digest is not None:
        token = RuntimeToken.objects.select_related("project", "created_by").filter(digest=digest).first()
    if token is None or not token.is_usable():
        record_refused_token(path, outcome="bad_runtime_token")
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        RuntimeToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def project_of(token: RuntimeToken, slug: str) -> Project:
    """The project a snapshot is posted to: the token's own. Any other slug, whether or not such a project
    exists, is 'not found' for this token, so a connector learns nothing of other projects."""
    if slug.strip().lower() != token.project.slug:
        raise snapshot_refused(
            token,
            Refusal(
                "FORGE_ERR_NOT_FOUND",
                f"This runtime token posts only to project {token.project.slug!r}; there is no project {slug[:100]!r} "
                "for it. Ask an operator for a token bound to the project you mean.",
                status=404,
            ),
        )
    return token.project


def values_digest(values: Sequence[ReportedValue]) -> str:
    """The SHA-256 of a snapshot's values as canonical JSON: what the audit row keeps instead of the values."""
    listed = [{"variable": v.variable, "value": v.value, "forced": v.forced} for v in values]
    return hashlib.sha256(canonical_json(listed).encode()).hexdigest()


def do_record_snapshot(
    token: RuntimeToken, project: Project, taken_at: datetime, values: Sequence[ReportedValue]
) -> dict[str, Any]:
    """Store a snapshot's values as the latest of their variables (unless a newer snapshot already reported
    one) and audit it; refused when it is from the future or would take the project past its variable cap."""
    now = timezone.now()
    if taken_at > now + MAX_CLOCK_AHEAD:
        raise snapshot_refused(
            token,
            Refusal(
                "FORGE_ERR_RUNTIME_CLOCK",
                f"taken_at {taken_at.isoformat()} is more than {int(MAX_CLOCK_AHEAD.total_seconds() // 60)} minutes "
                "ahead of the server's clock; set the connector's clock (NTP) and send the time it read the values.",
                status=400,
            ),
        )
    try:
        summary = _store_latest(token, project, taken_at, values, now)
    except AuditUnavailable:
        raise
    except Refusal as refused:
        # Audited after the transaction that refused it has rolled back, so the row stays.
        raise snapshot_refused(token, refused) from None
    return {"project": project.slug, "taken_at": taken_at.isoformat(), **summary}


def _store_latest(
    token: RuntimeToken, project: Project, taken_at: datetime, values: Sequence[ReportedValue], now: datetime
) -> dict[str, int]:
    """The values stored as their variables' latest, and the snapshot's audit row, in one transaction."""
    names = [v.variable for v in values]
    with transaction.atomic():
        stored = {
            row.variable: row
            for row in RuntimeValue.objects.select_for_update().filter(project=project, variable__in=names)
        }
        new_names = len(names) - len(stored)
        if new_names and RuntimeValue.objects.filter(project=project).count() + new_names > MAX_VARIABLES_PER_PROJECT:
            raise Refusal(
                "FORGE_ERR_RUNTIME_TOO_MANY_VARIABLES",
                f"Project {project.slug} would hold more than {MAX_VARIABLES_PER_PROJECT} monitored variables; "
                "post only the variables clients need to see.",
                status=409,
            )
        created: list[RuntimeValue] = []
        updated: list[RuntimeValue] = []
        older = 0
        for reported in values:
            row = stored.get(reported.variable)
            if row is None:
                row = RuntimeValue(project=project, variable=reported.variable)
                created.append(row)
            elif row.observed_at <= taken_at:
                updated.append(row)
            else:
                older += 1
                continue
            row.value = reported.value
            row.forced = reported.forced
            row.observed_at = taken_at
            row.received_at = now
            row.token = token
        # Two snapshots naming a new variable at once (a connector's retry) must not end in an error: the
        # first insert stands, as if the other had arrived a moment earlier.
        RuntimeValue.objects.bulk_create(created, ignore_conflicts=True)
        RuntimeValue.objects.bulk_update(updated, ["value", "forced", "observed_at", "received_at", "token"])
        summary = {"stored": len(created) + len(updated), "older_than_stored": older}
        record(
            EventKind.RUNTIME_SNAPSHOT,
            arguments={
                **token.audit_identity(),
                "taken_at": taken_at.isoformat(),
                "count": len(values),
                "forced": sum(v.forced for v in values),
                "values_sha256": values_digest(values),
                **summary,
            },
            outcome="stored",
            called_by=token.principal,
            client_label=token.label,
            project=project.slug,
        )
    return summary


def snapshot_refused(token: RuntimeToken, refusal: Refusal) -> Refusal:
    """Audit a refused snapshot and return the refusal to raise."""
    record_snapshot_refusal(token, refusal.code)
    return refusal


def record_snapshot_refusal(token: RuntimeToken, code: str) -> None:
    """The audit row of an authenticated connector's refused snapshot (an attempt); the refusal stands even
    when its row cannot be written."""
    with contextlib.suppress(AuditUnavailable):
        record(
            EventKind.RUNTIME_SNAPSHOT,
            arguments={**token.audit_identity(), "code": code},
            outcome=f"refused: {code}",
            called_by=token.principal,
            client_label=token.label,
            project=token.project.slug,
        )


def latest_values(project: Project, variables: Sequence[str], *, now: datetime | None = None) -> dict[str, Any]:
    """The latest reported value of each named variable, in the order asked, each with `forced`, when it was
    read and its age in whole seconds; the names no connector has reported are listed as `unknown`."""
    now = now or timezone.now()
    wanted = list(dict.fromkeys(variables))
    found = {row.variable: row for row in RuntimeValue.objects.filter(project=project, variable__in=wanted)}
    values = [
        {
            "variable": name,
            "value": found[name].value,
            "forced": found[name].forced,
            "observed_at": found[name].observed_at.isoformat(),
            "age_seconds": max(0, int((now - found[name].observed_at).total_seconds())),
        }
        for name in wanted
        if name in found
    ]
    return {"project": project.slug, "values": values, "unknown": [name for name in wanted if name not in found]}
