"""The projects' in-process cache: a few recent values, the least recently used dropped first."""

from __future__ import annotations

from projects.recent import RecentValues


def test_storing_past_the_size_drops_the_least_recently_used_value():
    recent: RecentValues[str, int] = RecentValues(2)
    recent.put("a", 1)
    recent.put("b", 2)
    assert recent.get("a") == 1  # "b" is now the least recent

    recent.put("c", 3)

    assert (recent.get("a"), recent.get("b"), recent.get("c"), len(recent)) == (1, None, 3, 2)


def test_clear_forgets_every_value():
    recent: RecentValues[str, int] = RecentValues(2)
    recent.put("a", 1)

    recent.clear()

    assert (recent.get("a"), len(recent)) == (None, 0)
