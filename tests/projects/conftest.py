"""The PLCopen samples every projects test runs over (test fixtures from ../shared, see its SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "plcopen" / "samples"
SAMPLES = sorted(SAMPLES_DIR.glob("*.xml")) if SAMPLES_DIR.is_dir() else []
# Known schema-invalid fixture (old PLCOpenEditor habits, see FORMAT.md and SOURCES.md).
INVALID_SAMPLES = {"iec-checker-example.xml"}
NO_SAMPLES = f"PLCopen samples not found at {SAMPLES_DIR}"


def sample_params(*, valid_only: bool = False) -> list:
    chosen = [path for path in SAMPLES if not (valid_only and path.name in INVALID_SAMPLES)]
    if not chosen:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_SAMPLES), id="no-samples")]
    return [pytest.param(path, id=path.stem) for path in chosen]


def sample_bytes(name: str) -> bytes:
    path = SAMPLES_DIR / name
    if not path.is_file():
        pytest.skip(NO_SAMPLES)
    return path.read_bytes()
