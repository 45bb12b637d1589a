"""Fixtures of the audit tests: a mirror of its own for every test, fast hashing, the asyncio backend."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def mirror_path(settings, tmp_path) -> Path:
    # The test database starts each test empty, so the mirror must too: one left by an earlier test
    # would hold lines past the log's end, which `verify_log` rightly reports.
    settings.FORGE_AUDIT_LOG = tmp_path / "audit" / "audit.jsonl"
    return settings.FORGE_AUDIT_LOG


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
