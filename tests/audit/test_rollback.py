"""A log that cannot be rolled back: a database cut back to before a signed checkpoint (an old backup
restored, the tail deleted with its tree nodes) is caught by `audit_verify --against` a saved checkpoint,
by the checkpoint the server keeps beside the mirror, and by the start-up check; mirror lines past the
database's end are reported and never cut off by the next append; and a tree node that is not the hash
of the nodes beneath it is found.

Cutting the log back needs the append-only triggers lifted, which SQLite's schema editor cannot do inside
a transaction, so these tests run with transactional databases (which also run on-commit work: the kept
checkpoint is written once its transaction commits).
"""

from __future__ import annotations

import hashlib
import json
import re
import stat

import pytest
from django.core.checks import run_checks
from rest_framework.test import APIClient

from audit import merkle
from audit.kept import kept_path
from audit.models import AuditEvent, EventKind
from audit.services import DatabaseNodeStore, do_make_checkpoint, node_key, record, signed_checkpoint
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import (
    append_events,
    audit_verify,
    audit_verify_failure,
    change_behind_the_models_back,
    cut_the_log_back_to,
    mirror_lines,
)

pytestmark = pytest.mark.django_db(transaction=True)

SIGNED = 10  # the checkpoint's size
KEPT = 4  # where the log is cut back to


@pytest.fixture
def signed_log(mirror_path):
    append_events(SIGNED)
    checkpoint = do_make_checkpoint()
    assert checkpoint is not None and kept_path(mirror_path).read_text() == checkpoint.note
    return checkpoint


def audit_check_messages() -> dict[str, str]:
    """What the start-up check (as runmcp runs it) reports, by id."""
    return {m.id: f"{m.msg} {m.hint}" for m in run_checks(tags=["audit"], databases=["default"])}


# --- audit_verify --against a checkpoint saved earlier ---------------------------------------------


def test_a_log_cut_back_before_a_saved_checkpoint_fails_audit_verify_against_it_naming_both_sizes(
    signed_log, mirror_path, tmp_path
):
    saved = tmp_path / "saved.note"
    saved.write_text(signed_log.note)
    cut_the_log_back_to(KEPT)
    kept_path(mirror_path).unlink()  # the database and the files beside it restored from the same old backup
    mirror_path.write_text("".join(f"{line}\n" for line in mirror_lines(mirror_path)[:KEPT]))
    assert audit_verify().strip() == f"ok {KEPT} events, 0 checkpoints"  # what it said before --against

    failure = audit_verify_failure("--against", str(saved))

    assert failure.error.returncode == 1
    assert failure.message.startswith(f"event {KEPT + 1}: the log holds {KEPT} events but {saved} (saved ")
    assert failure.message.endswith(
        f"saw {SIGNED}: the database was rolled back (an old backup restored) or its tail deleted"
    )
    assert AuditEvent.objects.count() == KEPT


def test_the_checkpoint_body_served_by_the_api_is_a_checkpoint_to_verify_against(cast, mirror_path, tmp_path):
    append_events(SIGNED)
    signed = do_make_checkpoint()
    assert signed is not None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {cast.caretaker.raw_token}")
    saved = tmp_path / "served.json"
    saved.write_bytes(client.get("/api/audit/checkpoint").content)
    assert json.loads(saved.read_bytes())["note"] == signed.note
    append_events(3)

    assert audit_verify("--against", str(saved)).strip() == f"ok {signed.size + 3} events, 1 checkpoints"

    cut_the_log_back_to(KEPT)
    kept_path(mirror_path).unlink()
    assert (
        f"the log holds {KEPT} events but {saved}"
        in audit_verify_failure("--no-mirror", "--against", str(saved)).message
    )


def test_a_saved_checkpoint_of_another_tree_of_that_size_fails_audit_verify(signed_log, mirror_path, tmp_path):
    saved = tmp_path / "saved.note"
    saved.write_text(signed_log.note)
    cut_the_log_back_to(KEPT)
    kept_path(mirror_path).unlink()
    mirror_path.unlink()
    append_events(SIGNED - KEPT)  # the same size again, other events

    failure = audit_verify_failure("--no-mirror", "--against", str(saved))

    assert failure.message.startswith(
        f"event {SIGNED}: the log's first {SIGNED} events do not hash to the root {saved}"
    )


def test_a_file_that_is_not_a_checkpoint_this_server_signed_is_refused_by_audit_verify(signed_log, tmp_path):
    forged = tmp_path / "forged.note"
    forged.write_text(signed_log.note.replace(f"\n{SIGNED}\n", f"\n{SIGNED + 5}\n", 1))

    failure = audit_verify_failure("--against", str(forged))

    assert failure.error.returncode == 1
    assert failure.message.startswith(f"{forged} is not a checkpoint this server signed: signature by key")


def test_an_against_file_that_cannot_be_read_is_refused_with_exit_status_2(signed_log, tmp_path):
    failure = audit_verify_failure("--against", str(tmp_path / "absent.note"))

    assert failure.error.returncode == 2
    assert failure.message == f"--against {tmp_path / 'absent.note'}: cannot read it (No such file or directory)"


# --- the checkpoint kept beside the mirror ---------------------------------------------------------


def test_each_checkpoint_is_kept_beside_the_mirror_private_and_only_a_larger_one_replaces_it(signed_log, mirror_path):
    kept = kept_path(mirror_path)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert signed_checkpoint(kept.read_bytes()).size == SIGNED

    append_events(2)
    newer = do_make_checkpoint()

    assert newer is not None and kept.read_text() == newer.note


def test_a_database_behind_the_kept_checkpoint_is_reported_by_audit_verify(signed_log, mirror_path):
    cut_the_log_back_to(KEPT)

    failure = audit_verify_failure("--no-mirror")

    assert failure.message.startswith(f"event {KEPT + 1}: the log holds {KEPT} events but the kept checkpoint ")
    assert f"{kept_path(mirror_path)} (saved " in failure.message
    assert failure.message.endswith(
        f"saw {SIGNED}: the database was rolled back (an old backup restored) or its tail deleted"
    )


def test_a_database_behind_the_kept_checkpoint_is_reported_by_the_start_up_check(signed_log, mirror_path):
    assert audit_check_messages() == {}
    cut_the_log_back_to(KEPT)

    messages = audit_check_messages()

    assert messages["audit.E001"].startswith(f"The audit log in the database holds {KEPT} events but the kept")
    assert f"saw {SIGNED}: the database was rolled back" in messages["audit.E001"]
    assert f"move {kept_path(mirror_path)} aside" in messages["audit.E001"]


# --- mirror lines past the database's end ----------------------------------------------------------


def test_mirror_lines_past_the_database_end_that_the_kept_checkpoint_saw_are_reported_by_the_start_up_check(
    signed_log, mirror_path
):
    cut_the_log_back_to(KEPT)

    messages = audit_check_messages()

    assert messages["audit.E002"].startswith(
        f"The audit mirror {mirror_path} holds events {KEPT + 1}..{SIGNED} past the database's last event {KEPT}, "
        f"and the checkpoint kept beside it saw {SIGNED}: the database was rolled back"
    )


def test_the_next_append_refuses_to_cut_off_mirror_lines_past_the_database_end_that_the_kept_checkpoint_saw(
    signed_log, mirror_path
):
    cut_the_log_back_to(KEPT)
    lines = mirror_lines(mirror_path)

    with pytest.raises(AuditUnavailable, match=f"holds events {KEPT + 1}..{SIGNED} past the database's last event"):
        record(EventKind.TOOL_CALL, tool="test.after_the_restore")

    assert mirror_lines(mirror_path) == lines
    assert AuditEvent.objects.count() == KEPT


def test_mirror_lines_past_the_database_end_that_no_checkpoint_saw_are_named_and_moved_aside_not_lost(mirror_path):
    append_events(SIGNED)
    cut_the_log_back_to(KEPT)
    lines = mirror_lines(mirror_path)

    assert audit_verify().strip() == (
        f"ok {KEPT} events, 0 checkpoints; the mirror holds {SIGNED - KEPT} lines past the database's last event "
        f"{KEPT} that continue its chain: appends that rolled back, which the next append moves to "
        "audit.jsonl.rolled-back (or events lost since the last kept checkpoint)"
    )
    event = record(EventKind.TOOL_CALL, tool="test.after")

    assert event.seq == KEPT + 1
    assert mirror_lines(mirror_path) == [*lines[:KEPT], mirror_lines(mirror_path)[KEPT]]
    assert mirror_lines(mirror_path.with_name("audit.jsonl.rolled-back")) == lines[KEPT:]


def test_mirror_lines_past_the_database_end_that_do_not_continue_its_chain_stop_appends_and_fail_the_checks(
    mirror_path,
):
    append_events(KEPT)
    stray = '{"seq": 9, "kind": "tool_call"}'
    lines = [*mirror_lines(mirror_path), stray]
    mirror_path.write_text("".join(f"{line}\n" for line in lines))
    past = f"holds 1 line past the database's last event {KEPT} (events 9..9) that do not continue its chain"

    with pytest.raises(AuditUnavailable, match=re.escape(past)):
        record(EventKind.TOOL_CALL, tool="test.after_the_edit")

    assert mirror_lines(mirror_path) == lines
    assert (
        audit_verify_failure().message
        == f"event {KEPT + 1}: the mirror has a line past the log's end (line {KEPT + 1})"
    )
    assert audit_check_messages()["audit.E002"].startswith(f"The audit mirror {mirror_path} {past}")
    rebuild = audit_verify_failure("--rebuild-mirror")
    assert (
        rebuild.message == f"{mirror_path} {past}: the database was rolled back or replaced, or the file was "
        "edited; move it aside (keep it as evidence), then rebuild"
    )
    assert mirror_lines(mirror_path) == lines


# --- the tree's internal nodes ---------------------------------------------------------------------


def test_a_corrupted_internal_merkle_node_is_found_by_audit_verify(signed_log):
    corrupt = hashlib.sha256(b"not the hash of the two beneath").digest()
    change_behind_the_models_back("UPDATE audit_audittreenode SET hash = %s WHERE key = %s", [corrupt, node_key(1, 0)])
    store = DatabaseNodeStore()
    leaf = store.get_many([(0, 2)])[(0, 2)]
    served = merkle.inclusion_proof(2, SIGNED, store)
    assert not merkle.verify_inclusion(leaf, 2, SIGNED, served, bytes(signed_log.root))  # what a client sees

    failure = audit_verify_failure("--no-mirror")

    assert failure.error.returncode == 1
    assert failure.message == (
        "event 2: tree node 1/0 (over events 1..2) is missing or is not the hash of the nodes beneath it: "
        "proofs served from it would not verify"
    )


def test_tree_nodes_left_over_events_past_the_log_end_are_found_by_audit_verify(mirror_path):
    append_events(6)
    change_behind_the_models_back("DELETE FROM audit_auditevent WHERE seq = %s", [6])
    change_behind_the_models_back("DELETE FROM audit_audittreenode WHERE key = %s", [node_key(0, 5)])

    failure = audit_verify_failure("--no-mirror")

    assert failure.message == (
        "event 6: the tree holds 1 node over events past the log's last event 5: its tail was deleted"
    )
