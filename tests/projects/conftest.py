"""The PLCopen TC6 2.01 projects the tests run over: fixtures written for this repository, in
tests/fixtures/plcopen (its README says what each covers). They are part of every clone, so a missing
one is an error in the test that reads it, never a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "plcopen"
# Named here rather than globbed, so that a lost file fails the tests instead of shrinking them.
FIXTURES = (
    "batch_records.xml",
    "conveyor_tasks.xml",
    "dosing_line.xml",
    "gate_sequence.xml",
    "legacy_habits.xml",
    "press_io.xml",
    "signal_tower.xml",
    "uptime_pragma.xml",
)
# The schema-invalid fixture (pre-2.0 habits, see the README).
INVALID_FIXTURES = frozenset({"legacy_habits.xml"})

# The projects most tests use, by role.
MAIN = "dosing_line.xml"  # every language; the project the write, draft and confirmation tests edit
INVALID = "legacy_habits.xml"
CRLF = "batch_records.xml"  # CRLF, data types, more than two export chunks
SMALL = "press_io.xml"  # one export chunk
PRAGMAS = "uptime_pragma.xml"  # CRLF, ST with pragmas and comments
LATIN1 = "signal_tower.xml"  # ISO-8859-1, CRLF


def fixture_path(name: str) -> Path:
    return FIXTURES_DIR / name


def fixture_bytes(name: str) -> bytes:
    """The bytes of one fixture; FileNotFoundError (a failure) when it is missing."""
    return fixture_path(name).read_bytes()


def fixture_params(*, valid_only: bool = False) -> list:
    """One pytest param per fixture file (its path), named after the file."""
    chosen = [name for name in FIXTURES if not (valid_only and name in INVALID_FIXTURES)]
    return [pytest.param(fixture_path(name), id=Path(name).stem) for name in chosen]
