"""`audit_verify` finds what changed behind the model's back and names the event: a row edited, deleted
or given a forged MAC, a mirror that no longer matches the chain, a checkpoint row altered; and
`--rebuild-mirror` repairs a damaged mirror once the chain itself is sound.

Changing a row needs the append-only triggers lifted, which SQLite's schema editor cannot do inside a
transaction, so these tests run with transactional databases.
"""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
from django.db import connection, connections

from audit.models import AuditEvent, EventKind
from audit.services import do_make_checkpoint, event_line, node_key, record
from audit.verify import verify_log
from forge_core.canonical import canonical_json
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import (
    append_events,
    audit_verify,
    audit_verify_failure,
    change_behind_the_models_back,
    mirror_lines,
    write_mirror_lines,
)

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 6


@pytest.fixture
def log() -> list[AuditEvent]:
    return append_events(EVENTS)


# --- a sound log -----------------------------------------------------------------------------------


def test_a_sound_log_verifies_with_its_event_and_checkpoint_counts(log):
    do_make_checkpoint()

    assert audit_verify().strip() == f"ok {EVENTS} events, 1 checkpoints"


# --- rows changed behind the model's back ----------------------------------------------------------


def test_a_row_changed_behind_the_models_back_is_found_by_its_seq(log):
    change_behind_the_models_back("UPDATE audit_auditevent SET outcome = %s WHERE seq = %s", ["denied", 3])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message.startswith("event 3: MAC mismatch")
    assert failure.stdout.startswith("FAILED at event 3: MAC mismatch")


def test_a_deleted_row_is_found_as_a_gap_at_its_seq(log):
    change_behind_the_models_back("DELETE FROM audit_auditevent WHERE seq = %s", [3])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == "event 3: missing: the next event in the log is 4 (a gap)"


def test_a_deleted_last_row_is_found_by_its_leaf_left_in_the_tree(log):
    change_behind_the_models_back("DELETE FROM audit_auditevent WHERE seq = %s", [EVENTS])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == f"event {EVENTS}: the tree has a leaf for this event but the log has no row for it"


def test_a_forged_mac_is_found_at_its_seq(log):
    forged = hashlib.sha256(b"a MAC made without the audit key").hexdigest()
    change_behind_the_models_back("UPDATE audit_auditevent SET mac = %s WHERE seq = %s", [forged, 4])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message.startswith("event 4: MAC mismatch")


def test_a_row_relinked_to_a_forged_previous_mac_is_found_as_a_broken_chain(log):
    forged = hashlib.sha256(b"another previous MAC").hexdigest()
    change_behind_the_models_back("UPDATE audit_auditevent SET prev_mac = %s WHERE seq = %s", [forged, 5])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message.startswith("event 5: its previous MAC does not match")


def test_a_tree_leaf_changed_behind_the_models_back_is_found_at_its_event(log):
    other_leaf = hashlib.sha256(b"another leaf").digest()
    change_behind_the_models_back(
        "UPDATE audit_audittreenode SET hash = %s WHERE key = %s", [other_leaf, node_key(0, 1)]
    )

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == "event 2: its Merkle leaf is missing or does not match the row"


# --- the mirror diverging --------------------------------------------------------------------------


def test_an_edited_mirror_line_is_found_at_its_seq(log, mirror_path):
    lines = mirror_lines(mirror_path)
    lines[2] = canonical_json({**json.loads(lines[2]), "outcome": "denied"})
    write_mirror_lines(mirror_path, lines)

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == "event 3: the mirror differs (line 3)"


def test_a_dropped_mirror_line_is_found_at_its_seq(log, mirror_path):
    lines = mirror_lines(mirror_path)
    write_mirror_lines(mirror_path, lines[:2] + lines[3:])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == "event 3: the mirror differs (line 3)"


def test_a_junk_line_appended_to_the_mirror_is_found_past_the_last_seq(log, mirror_path):
    write_mirror_lines(mirror_path, [*mirror_lines(mirror_path), '{"seq": 7, "kind": "tool_call"}'])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == f"event {EVENTS + 1}: the mirror has a line past the log's end (line {EVENTS + 1})"


def test_a_truncated_mirror_is_found_at_the_first_missing_seq(log, mirror_path):
    write_mirror_lines(mirror_path, mirror_lines(mirror_path)[:4])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == "event 5: the mirror ends before this event"


def test_a_damaged_mirror_is_not_reported_when_verifying_the_database_only(log, mirror_path):
    write_mirror_lines(mirror_path, mirror_lines(mirror_path)[:4])

    assert audit_verify("--no-mirror").strip() == f"ok {EVENTS} events, 0 checkpoints"


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="SQLite's in-memory test database locks the table against an append while a read is open",
)
def test_an_event_appended_while_the_log_is_verified_is_no_finding(log, mirror_path):
    appended: list[AuditEvent] = []

    def append_elsewhere() -> None:
        try:
            appended.append(record(EventKind.TOOL_CALL, tool="test.meanwhile"))
        except AuditUnavailable:
            pass
        finally:
            connections.close_all()

    def append_once_the_events_are_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not appended and sql.startswith("SELECT") and "audit_auditevent" in sql and "ORDER BY" in sql:
            # A server keeps appending while an operator verifies: one event commits meanwhile.
            other = threading.Thread(target=append_elsewhere)
            other.start()
            other.join()
        return result

    with connection.execute_wrapper(append_once_the_events_are_read):
        report = verify_log(mirror_path)

    assert [event.seq for event in appended] == [EVENTS + 1]
    assert report.ok, str(report)


# --- repairing the mirror --------------------------------------------------------------------------


def test_rebuild_mirror_repairs_a_damaged_mirror_when_the_chain_is_sound(log, mirror_path):
    lines = mirror_lines(mirror_path)
    write_mirror_lines(mirror_path, [*lines[:2], "not json", *lines[4:]])

    output = audit_verify("--rebuild-mirror")

    assert output.splitlines() == [f"rebuilt {mirror_path} with {EVENTS} lines", f"ok {EVENTS} events, 0 checkpoints"]
    assert mirror_lines(mirror_path) == [event_line(event) for event in AuditEvent.objects.all()]
    assert audit_verify().strip() == f"ok {EVENTS} events, 0 checkpoints"


def test_rebuild_mirror_refuses_and_leaves_the_mirror_alone_when_the_chain_is_broken(log, mirror_path):
    change_behind_the_models_back("UPDATE audit_auditevent SET outcome = %s WHERE seq = %s", ["denied", 2])
    damaged = mirror_lines(mirror_path)[:3]
    write_mirror_lines(mirror_path, damaged)

    failure = audit_verify_failure("--rebuild-mirror")

    assert failure.error.returncode == 1
    assert failure.message.startswith("event 2: MAC mismatch")
    assert mirror_lines(mirror_path) == damaged


def test_appending_after_a_rebuilt_mirror_continues_it(log, mirror_path):
    write_mirror_lines(mirror_path, mirror_lines(mirror_path)[:3])
    audit_verify("--rebuild-mirror")

    append_events(2)

    assert audit_verify().strip() == f"ok {EVENTS + 2} events, 0 checkpoints"


# --- checkpoints changed behind the model's back ---------------------------------------------------


def test_a_checkpoint_whose_note_was_altered_is_found_at_its_size(log):
    checkpoint = do_make_checkpoint()
    altered = checkpoint.note.replace(f"\n{EVENTS}\n", f"\n{EVENTS - 1}\n", 1)
    assert altered != checkpoint.note
    change_behind_the_models_back("UPDATE audit_auditcheckpoint SET note = %s WHERE size = %s", [altered, EVENTS])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message.startswith(f"event {EVENTS}: checkpoint {EVENTS} is not validly signed")


def test_a_checkpoint_whose_root_was_altered_is_found_at_its_size(log):
    do_make_checkpoint()
    other_root = hashlib.sha256(b"another root").digest()
    change_behind_the_models_back("UPDATE audit_auditcheckpoint SET root = %s WHERE size = %s", [other_root, EVENTS])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == f"event {EVENTS}: checkpoint {EVENTS}'s signed note does not match its row"


def test_a_checkpoint_moved_past_the_end_of_the_log_is_found(log):
    do_make_checkpoint()
    change_behind_the_models_back("UPDATE audit_auditcheckpoint SET size = %s WHERE size = %s", [EVENTS + 1, EVENTS])

    failure = audit_verify_failure()

    assert failure.error.returncode == 1
    assert failure.message == f"event {EVENTS + 1}: checkpoint {EVENTS + 1} is past the end of the log"
