"""The benches are scripts that import each other by module name (``import mcp_load as ml``), as they do when
run from bench/; their tests put that folder on the path the same way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
