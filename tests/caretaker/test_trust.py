"""The trust store read (`caretaker.trust.trusted`): every MCP call's `server_info` asks, so a store found as it was
last read is not listed again; a CA file added, removed or replaced is seen at the very next read."""

from __future__ import annotations

import os
import time
import types

import pytest

from caretaker import trust
from tests.caretaker.rosters import Elsewhere

HOUR_NS = 3600 * 10**9


@pytest.fixture
def store(settings, tmp_path):
    settings.FORGE_TRUST_DIR = tmp_path / "trust"
    settings.FORGE_TRUST_DIR.mkdir()
    return settings.FORGE_TRUST_DIR


@pytest.fixture
def later(monkeypatch):
    """Reads made an hour after the files' times: long enough that any later change shows a time of its own."""
    monkeypatch.setattr(trust, "time", types.SimpleNamespace(time_ns=lambda: time.time_ns() + HOUR_NS))


@pytest.fixture
def listings(monkeypatch) -> list[object]:
    """Every listing of a folder, counted."""
    made: list[object] = []
    real = os.scandir

    def scandir(where):
        made.append(where)
        return real(where)

    monkeypatch.setattr(os, "scandir", scandir)
    return made


def back_date(*paths) -> None:
    """The files' and folder's modification times an hour back, as a store untouched for an hour has them."""
    for path in paths:
        past = time.time_ns() - HOUR_NS
        os.utime(path, ns=(past, past))


def fingerprints() -> list[str]:
    return [entry.fingerprint_sha256 for entry in trust.trusted()]


def test_a_store_as_it_was_last_read_is_not_listed_again(store, later, listings):
    first = Elsewhere.create("First CA")
    (store / "first.pem").write_bytes(first.pem)
    back_date(store / "first.pem", store)
    assert fingerprints() == [trust.ca.cert_fingerprint(first.certificate)]
    listings.clear()

    assert fingerprints() == [trust.ca.cert_fingerprint(first.certificate)]
    assert listings == []


def test_a_ca_file_added_to_a_store_read_before_is_seen_at_once(store, later):
    first, second = Elsewhere.create("First CA"), Elsewhere.create("Second CA")
    (store / "first.pem").write_bytes(first.pem)
    back_date(store / "first.pem", store)
    assert fingerprints() == [trust.ca.cert_fingerprint(first.certificate)]

    (store / "second.pem").write_bytes(second.pem)

    assert fingerprints() == [trust.ca.cert_fingerprint(c.certificate) for c in (first, second)]


def test_a_ca_file_rewritten_in_place_or_removed_is_seen_at_once(store, later):
    first, second, third = (Elsewhere.create(name) for name in ("First CA", "Second CA", "Third CA"))
    (store / "first.pem").write_bytes(first.pem)
    (store / "second.pem").write_bytes(second.pem)
    back_date(store / "first.pem", store / "second.pem", store)
    assert len(fingerprints()) == 2

    with open(store / "first.pem", "r+b") as handle:  # the same file and folder entry, another CA in it
        handle.write(third.pem)
        handle.truncate()
    assert fingerprints() == [trust.ca.cert_fingerprint(c.certificate) for c in (third, second)]

    (store / "second.pem").unlink()
    assert fingerprints() == [trust.ca.cert_fingerprint(third.certificate)]


def test_a_store_changed_within_the_clock_step_of_its_read_is_listed_on_every_read(store, listings):
    (store / "first.pem").write_bytes(Elsewhere.create("First CA").pem)
    fingerprints()
    fingerprints()

    assert listings == [store, store]


def test_a_missing_store_trusts_nothing(settings, tmp_path):
    settings.FORGE_TRUST_DIR = tmp_path / "nowhere"

    assert trust.trusted() == []


def test_a_ca_file_rewritten_to_the_same_size_with_its_modification_time_put_back_is_seen(store, later):
    first, other = Elsewhere.create("First CA"), Elsewhere.create("Other CA")
    size = max(len(first.pem), len(other.pem))
    path = store / "first.pem"
    path.write_bytes(first.pem.ljust(size, b"\n"))
    back_date(path, store)
    assert fingerprints() == [trust.ca.cert_fingerprint(first.certificate)]
    before = os.stat(path)

    with open(path, "r+b") as handle:  # another CA in the same file, the same size, the old time put back
        handle.write(other.pem.ljust(size, b"\n"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (before.st_size, before.st_mtime_ns)

    assert fingerprints() == [trust.ca.cert_fingerprint(other.certificate)]
