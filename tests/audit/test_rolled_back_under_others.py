"""A transaction that appended and rolled back leaves its lines in this process's mirror, numbered on from the chain
head it saw. When another process then commits events of those numbers, the lines stand where the database holds
others: the next append judges the mirror's tail by its MACs, sets the rolled-back lines aside from the last line the
database agrees with, and copies the committed ones in, whether the other process appended fewer events, as many, or
more. Another process is played by appends to another mirror (`appended_by_another_process`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db import transaction

from audit import mirror as mirror_module
from audit.models import AuditEvent, EventKind
from audit.services import _stored_line, record
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import (
    append_events,
    appended_by_another_process,
    audit_verify,
    mirror_lines,
    write_mirror_lines,
)

pytestmark = pytest.mark.django_db(transaction=True)


class RolledBack(Exception):
    """Raised inside a transaction to roll it back after its appends wrote their mirror lines."""


def rolled_back(mirror_path: Path, count: int) -> list[str]:
    """Append `count` events in a transaction that then rolls back; the lines it left in the mirror."""
    with pytest.raises(RolledBack), transaction.atomic():
        for number in range(count):
            record(EventKind.TOOL_CALL, tool=f"test.rolled_back_{number}")
        raise RolledBack
    return [line for line in mirror_lines(mirror_path) if json.loads(line)["tool"].startswith("test.rolled_back")]


def committed_lines() -> list[str]:
    return [_stored_line(event) for event in AuditEvent.objects.order_by("seq")]


def set_aside(mirror_path: Path) -> list[str]:
    return mirror_lines(mirror_path.with_name(mirror_path.name + mirror_module.ROLLED_BACK_SUFFIX))


@pytest.mark.parametrize("chunk", [mirror_module.TAIL_CHUNK, 97], ids=["one-read", "lines-cut-by-reads"])
@pytest.mark.parametrize("others", [1, 2, 5], ids=["fewer", "as-many", "more"])
def test_rolled_back_lines_where_another_process_committed_since_are_set_aside_and_the_committed_copied_in(
    settings, tmp_path, mirror_path, monkeypatch, chunk, others
):
    monkeypatch.setattr(mirror_module, "TAIL_CHUNK", chunk)
    append_events(3)
    left = rolled_back(mirror_path, 2)
    assert [json.loads(line)["seq"] for line in left] == [4, 5]
    appended_by_another_process(settings, tmp_path, others)

    record(EventKind.TOOL_CALL, tool="test.after")

    assert mirror_lines(mirror_path) == committed_lines()
    assert AuditEvent.objects.count() == 3 + others + 1
    assert set_aside(mirror_path) == left
    assert audit_verify().startswith(f"ok {3 + others + 1} events")


def test_an_append_right_after_its_own_rollback_sets_the_lines_aside_without_reading_the_database(
    mirror_path, monkeypatch
):
    append_events(3)
    left = rolled_back(mirror_path, 2)
    read: list[tuple[int, int]] = []
    real = mirror_module.Mirror._last_agreed
    monkeypatch.setattr(mirror_module.Mirror, "_last_agreed", lambda *a: read.append(a) or real(*a))

    record(EventKind.TOOL_CALL, tool="test.after")

    assert read == []  # the tail's line 3 is the head the database gave: nothing to search for
    assert mirror_lines(mirror_path) == committed_lines()
    assert set_aside(mirror_path) == left


def test_the_first_events_rolled_back_under_another_processs_are_set_aside_too(settings, tmp_path, mirror_path):
    left = rolled_back(mirror_path, 2)
    appended_by_another_process(settings, tmp_path, 3)

    record(EventKind.TOOL_CALL, tool="test.after")

    assert mirror_lines(mirror_path) == committed_lines()
    assert set_aside(mirror_path) == left


def test_a_mirror_whose_last_lines_are_not_the_databases_events_stops_appends_and_is_left_as_it_is(
    mirror_path, monkeypatch
):
    monkeypatch.setattr(mirror_module, "DIVERGED_LINES", 3)
    append_events(5)
    lines = [json.dumps({**json.loads(line), "mac": "0" * 64}) for line in mirror_lines(mirror_path)]
    write_mirror_lines(mirror_path, lines)  # a mirror of another database's events of these numbers

    with pytest.raises(AuditUnavailable, match="does not hold the database's events in its last 3 lines"):
        record(EventKind.TOOL_CALL, tool="test.refused")

    assert mirror_lines(mirror_path) == lines
    assert AuditEvent.objects.count() == 5


def test_after_another_processs_appends_the_file_this_process_left_is_continued_without_reading_its_tail(
    settings, tmp_path, mirror_path, monkeypatch
):
    append_events(3)
    appended_by_another_process(settings, tmp_path, 2)
    read: list[object] = []
    real = mirror_module.Mirror._tail
    monkeypatch.setattr(mirror_module.Mirror, "_tail", lambda *a: read.append(a) or real(*a))

    record(EventKind.TOOL_CALL, tool="test.after")

    assert read == []  # its last line is the one this process wrote, of the seq and MAC it remembers
    assert mirror_lines(mirror_path) == committed_lines()
