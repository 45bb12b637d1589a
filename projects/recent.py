"""The one in-process cache shape projects/ uses: a few recent values by key, least recently used dropped
first, safe across the threads one process serves requests in.

Parsed documents (`projects.services`, by content fingerprint) and materialized drafts (`projects.drafts`, by
draft revision) are each kept in one. Nothing in them is shared with another process, so a value must be one
that any process can compute again from the database and the file: dropping it is never wrong, only slower.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RecentValues(Generic[K, V]):
    """At most `size` values by key; reading one makes it the most recent, storing a new one past `size` drops
    the least recent."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)

    def clear(self) -> None:
        """Forget every value, as a new process would start."""
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)
