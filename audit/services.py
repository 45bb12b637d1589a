"""Writing audit events: the one call site every app uses.

`record()` sanitizes the arguments (secrets redacted, large values replaced by their digest) and
appends the row in the caller's transaction, so a state change and its audit row commit together or
not at all. When the row cannot be written the caller gets `AuditUnavailable` and must not carry out
the action it was about to record (fail closed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from audit.models import AuditEvent, EventKind

MAX_VALUE_CHARS = 1024
SECRET_KEYS = frozenset(
    {"token", "password", "secret", "private_key", "authorization", "api_key", "enrollment_code", "key"}
)
REDACTED = "[redacted]"


class AuditUnavailable(Exception):
    """The audit row could not be written; the recorded action must not happen."""


def sanitize(value: Any, *, secret_keys: Iterable[str] = ()) -> Any:
    """Return `value` fit for the audit log: secrets redacted, long values replaced by a digest."""
    secrets = SECRET_KEYS | {key.lower() for key in secret_keys}
    return _sanitize(value, secrets)


def _sanitize(value: Any, secrets: frozenset[str]) -> Any:
    if isinstance(value, Mapping):
        return {
            str(key): REDACTED if str(key).lower() in secrets else _sanitize(item, secrets)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_sanitize(item, secrets) for item in value]
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return _digest(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    text = json.dumps(value, default=str)
    return _digest(text) if len(text) > MAX_VALUE_CHARS else text


def _digest(text: str) -> dict[str, Any]:
    data = text.encode()
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


def record(
    kind: EventKind | str,
    *,
    tool: str = "",
    arguments: Mapping[str, Any] | None = None,
    secret_keys: Iterable[str] = (),
    outcome: str = "",
    called_by: str = "",
    session: str = "",
    client_label: str = "",
    project: str = "",
) -> AuditEvent:
    """Append one audit event. Raises `AuditUnavailable` when it cannot be written."""
    event = AuditEvent(
        ts=timezone.now(),
        kind=str(kind),
        tool=tool,
        arguments=sanitize(dict(arguments or {}), secret_keys=secret_keys),
        outcome=outcome[:200],
        called_by=called_by[:200],
        session=session,
        client_label=client_label[:200],
        project=project,
    )
    try:
        event.save(force_insert=True)
    except DatabaseError as exc:
        raise AuditUnavailable(str(exc)) from exc
    return event
