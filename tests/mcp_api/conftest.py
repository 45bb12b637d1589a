"""Fixtures of the in-process transport tests: the asyncio backend, a fresh channel layer, fast hashing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from channels.layers import channel_layers


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    # The in-memory layer is a process-wide singleton; a group joined in one test must not receive
    # the events of the next, so each test starts from a new layer.
    channel_layers.backends.pop("default", None)
    yield
    channel_layers.backends.pop("default", None)
