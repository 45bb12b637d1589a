"""The mirror file a process keeps open between appends (`audit.mirror`): it is trusted only while the path
still names it and it is exactly as this process's last append left it; otherwise the append reads the
file's tail as a fresh one would, so a replaced, deleted or extended file is never written blind."""

from __future__ import annotations

import json
import os

import pytest

from audit.mirror import Mirror
from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import audit_verify, mirror_lines

pytestmark = pytest.mark.django_db


def seqs(path) -> list[int]:
    return [json.loads(line)["seq"] for line in mirror_lines(path)]


def test_appends_go_on_in_the_file_kept_open(mirror_path):
    for number in range(5):
        record(EventKind.TOOL_CALL, tool=f"test.kept.{number}")

    assert seqs(mirror_path) == [1, 2, 3, 4, 5]
    assert audit_verify().startswith("ok")


def test_a_mirror_replaced_between_appends_is_written_in_its_new_file(mirror_path):
    record(EventKind.TOOL_CALL, tool="test.before")
    replacement = mirror_path.with_name("replacement.jsonl")
    replacement.write_bytes(mirror_path.read_bytes())
    os.replace(replacement, mirror_path)  # as `Mirror.rewrite` does: a new file under the same name

    record(EventKind.TOOL_CALL, tool="test.after")

    assert seqs(mirror_path) == [1, 2]
    assert audit_verify().startswith("ok")


def test_a_deleted_mirror_is_made_again_from_the_database(mirror_path):
    record(EventKind.TOOL_CALL, tool="test.first")
    record(EventKind.TOOL_CALL, tool="test.second")
    mirror_path.unlink()

    record(EventKind.TOOL_CALL, tool="test.third")

    assert seqs(mirror_path) == [1, 2, 3]
    assert audit_verify().startswith("ok")


def test_a_file_cut_back_behind_the_process_is_completed_from_the_database(mirror_path):
    for number in range(3):
        record(EventKind.TOOL_CALL, tool=f"test.cut.{number}")
    lines = mirror_path.read_bytes().splitlines(keepends=True)
    with open(mirror_path, "r+b") as handle:  # the same file, shorter: only its size tells
        handle.truncate(len(b"".join(lines[:1])))

    record(EventKind.TOOL_CALL, tool="test.after_the_cut")

    assert seqs(mirror_path) == [1, 2, 3, 4]
    assert audit_verify().startswith("ok")


def test_a_line_another_writer_left_past_the_end_is_found_and_refused(mirror_path):
    record(EventKind.TOOL_CALL, tool="test.first")
    with open(mirror_path, "ab") as handle:  # the same file, longer: not what this process's append left
        handle.write(b'{"seq": 99, "junk": true}\n')

    with pytest.raises(AuditUnavailable, match="do not continue"):
        record(EventKind.TOOL_CALL, tool="test.refused")

    assert seqs(mirror_path) == [1, 99]


def _append(mirror: Mirror, seq: int) -> None:
    line = json.dumps({"mac": f"m{seq}", "prev_mac": f"m{seq - 1}", "seq": seq})
    mirror.append(seq, [line], f"m{seq - 1}", lambda first, last: [], lambda: 0, mac=f"m{seq}", sync=False)
    mirror.sync()


def test_an_append_and_its_sync_look_at_the_path_once_and_sync_the_file_written(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    _append(Mirror(path), 1)
    looked: list[object] = []
    synced: list[int] = []
    real_stat, real_fsync = os.stat, os.fsync
    monkeypatch.setattr(os, "stat", lambda where, *a, **k: looked.append(where) or real_stat(where, *a, **k))
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.fstat(fd).st_ino) or real_fsync(fd))
    mirror = Mirror(path)
    line = json.dumps({"mac": "m2", "prev_mac": "m1", "seq": 2})
    mirror.append(2, [line], "m1", lambda first, last: [], lambda: 0, mac="m2", sync=False)
    written = real_stat(path).st_ino
    replacement = tmp_path / "replacement.jsonl"
    replacement.write_bytes(path.read_bytes())
    os.replace(replacement, path)  # after the append, before its sync: the sync is still of the file written

    mirror.sync()

    assert looked == [path]
    assert synced == [written]
