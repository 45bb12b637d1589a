"""Fixtures of the audit tests: a mirror of its own for every test, no remembered full check, fast hashing, the
asyncio backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.cache import cache

from audit.admin import LAST_FULL_CHECK


@pytest.fixture(autouse=True)
def mirror_path(settings, tmp_path) -> Path:
    # The test database starts each test empty, so the mirror must too: one left by an earlier test
    # would hold lines past the log's end, which `verify_log` rightly reports.
    settings.FORGE_AUDIT_LOG = tmp_path / "audit" / "audit.jsonl"
    return settings.FORGE_AUDIT_LOG


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_full_check_remembered():
    """The console remembers its last full verification in Django's cache, which outlives a test: each audit test
    starts with none."""
    cache.delete(LAST_FULL_CHECK)
