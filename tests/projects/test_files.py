"""Atomic file writes: the step boundaries the crash test stops at, and no temporary file left behind."""

from __future__ import annotations

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
