"""Atomic file writes: the step boundaries the crash test stops at, and no temporary file left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from projects.files import write_atomically


def test_a_write_marks_its_two_boundaries_in_order(tmp_path: Path):
    steps: list[str] = []
    write_atomically(tmp_path / "p.xml", b"new", steps.append)
    assert steps == ["after_temp_write", "after_rename"]
    assert (tmp_path / "p.xml").read_bytes() == b"new"


def test_a_temporary_file_left_by_a_killed_writer_is_cleared_by_the_next_write(tmp_path: Path):
    target = tmp_path / "p.xml"
    target.write_bytes(b"old")
    (tmp_path / ".p.xml.0123456789ab.tmp").write_bytes(b"half")
    (tmp_path / ".other.xml.0123456789ab.tmp").write_bytes(b"another file's")
    write_atomically(target, b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.xml.0123456789ab.tmp", "p.xml"]
    assert target.read_bytes() == b"new"


def test_a_file_the_service_creates_is_0600_whatever_the_umask(tmp_path: Path):
    previous = os.umask(0o022)
    try:
        write_atomically(tmp_path / "new.xml", b"new")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.xml").stat().st_mode) == 0o600


def test_a_replaced_file_keeps_the_mode_its_owner_gave_it(tmp_path: Path):
    # A project bound from an operator's own file: their IDE and tools keep the access they had.
    target = tmp_path / "bound.xml"
    target.write_bytes(b"old")
    target.chmod(0o644)
    write_atomically(target, b"new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert target.read_bytes() == b"new"
