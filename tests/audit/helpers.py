"""What the audit tests share: appending events, changing rows behind the model's back, running
`audit_verify`, and reading the mirror and the signed checkpoints."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit import keys, services
from audit import mirror as mirror_module
from audit.checkpoint import Checkpoint, parse_and_verify
from audit.models import AuditCheckpoint, AuditEvent, EventKind
from audit.services import record
from tests.conftest import set_append_only_triggers


def append_events(count: int, **fields: Any) -> list[AuditEvent]:
    """Append `count` tool-call events the way every app does, numbered in their arguments."""
    return [
        record(EventKind.TOOL_CALL, tool="test.append", arguments={"number": number}, outcome="ok", **fields)
        for number in range(count)
    ]


def appended_by_another_process(settings: Any, tmp_path: Path, count: int) -> None:
    """`count` events appended as another process appends them: to its own mirror, this process none the wiser (its
    memory of the chain, `_KnownFrontier`, and its open mirror put back as its own last append left them)."""
    remembered = services._FRONTIER.state
    mirror = settings.FORGE_AUDIT_LOG
    held = mirror_module._handles.pop(mirror, None)
    settings.FORGE_AUDIT_LOG = tmp_path / "other" / "audit.jsonl"
    try:
        append_events(count, called_by="another process")
    finally:
        settings.FORGE_AUDIT_LOG = mirror
        services._FRONTIER.state = remembered
        mirror_module._close_handle(tmp_path / "other" / "audit.jsonl")
        if held is not None:
            mirror_module._handles[mirror] = held


def change_behind_the_models_back(sql: str, params: Sequence[Any] = ()) -> None:
    """Run one UPDATE or DELETE on an audit table with its append-only triggers lifted, then put them back.

    The schema editor that drops triggers cannot run inside a transaction on SQLite, so the tests that
    call this run with `django_db(transaction=True)`.
    """
    set_append_only_triggers(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, list(params))
            assert cursor.rowcount == 1, f"{sql} changed {cursor.rowcount} rows"
    finally:
        set_append_only_triggers(True)


def cut_the_log_back_to(size: int) -> None:
    """Delete every event after `size` with its tree nodes and checkpoint rows, with the triggers lifted:
    what restoring a backup taken at `size` does to the database (the files beside it are left alone)."""
    set_append_only_triggers(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM audit_auditevent WHERE seq > %s", [size])
            cursor.execute('DELETE FROM audit_audittreenode WHERE (("index" + 1) << level) > %s', [size])
            cursor.execute("DELETE FROM audit_auditcheckpoint WHERE size > %s", [size])
    finally:
        set_append_only_triggers(True)


@dataclass(frozen=True)
class VerifyFailure:
    error: CommandError
    stdout: str

    @property
    def message(self) -> str:
        return str(self.error)


def audit_verify(*args: str) -> str:
    """Run `manage.py audit_verify` in-process; returns what it printed."""
    out = io.StringIO()
    call_command("audit_verify", *args, stdout=out)
    return out.getvalue()


def audit_verify_failure(*args: str) -> VerifyFailure:
    """Run `manage.py audit_verify` expecting it to fail; returns the error and what it printed."""
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("audit_verify", *args, stdout=out)
    return VerifyFailure(error=raised.value, stdout=out.getvalue())


def mirror_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def write_mirror_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def signed(checkpoint: AuditCheckpoint) -> Checkpoint:
    """What a checkpoint's note commits to, once its signature checks out against the server's key."""
    return parse_and_verify(checkpoint.note, keys.KEY_NAME, keys.public_key(), origin=keys.origin())
