"""The watcher of FORGE_ROSTER_DIR/incoming/: a pair dropped there while it runs is considered once the folder
has settled, accepted when it verifies and is newer, moved to refused/ with the verdict otherwise (tampered,
replayed), and an equal-sequence fork is flagged as a conflict; a failure is one line in the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from caretaker import services, store, trust, watch
from caretaker.models import RosterConflict
from tests.caretaker.rosters import Elsewhere, tampered_peer, write_pair

BOUND = 10.0  # seconds; the watcher takes about 0.2-0.7 s to notice a pair


def watch_until_considered(
    make_consider: Callable[[Callable[[], None]], Callable[[], list[services.Verdict]]],
    until: Callable[[], bool] = lambda: True,
):
    """Run the watcher on an event loop of this test until the consideration made by `make_consider` signals
    (it is given the signal) and then `until()` holds, or fail after BOUND seconds."""

    async def running() -> None:
        loop = asyncio.get_running_loop()
        considered = asyncio.Event()
        task = asyncio.create_task(
            watch.watch_incoming(consider=make_consider(lambda: loop.call_soon_threadsafe(considered.set)))
        )
        try:
            async with asyncio.timeout(BOUND):
                await considered.wait()
                while not until():
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(running())


def verdicts_of_the_watcher() -> list[services.Verdict]:
    """Run the watcher with its real consideration until it has considered a pair; the verdicts it reached."""
    verdicts: list[services.Verdict] = []

    def make_consider(signal: Callable[[], None]) -> Callable[[], list[services.Verdict]]:
        def consider() -> list[services.Verdict]:
            found = services.consider_incoming(actor="roster-watcher")
            verdicts.extend(found)
            if found:
                signal()
            return found

        return consider

    watch_until_considered(make_consider)
    return verdicts


@pytest.fixture
def other_ca(team) -> Elsewhere:
    other = Elsewhere.create()
    trust.install(other.pem, actor="cora", why="the other site's CA")
    return other


@pytest.fixture
def incoming(settings) -> Path:
    return settings.FORGE_ROSTER_DIR / store.INCOMING


def bucket(incoming: Path, name: str) -> dict[str, str]:
    """The files moved to incoming/<name>/, by name without their time stamp; the verdict's text as value."""
    return {
        path.name.split("-", 1)[1]: path.read_text() if path.name.endswith("verdict.txt") else ""
        for path in (incoming / name).iterdir()
    }


@pytest.mark.django_db(transaction=True)
def test_a_pair_dropped_into_incoming_is_accepted_by_the_running_watcher(other_ca, incoming, settings):
    signed = other_ca.sign(5)
    write_pair(incoming, signed, stem="site-b.")

    verdicts = verdicts_of_the_watcher()

    assert [(v.outcome, v.sequence) for v in verdicts] == [("accepted", 5)]
    accepted = services.accepted()
    assert accepted is not None and (accepted.sequence, accepted.digest) == (5, signed.digest)
    assert accepted.source == "incoming/site-b.peers.toml"
    assert store.read_published(settings.FORGE_ROSTER_DIR).peers_toml == signed.peers_toml
    done = bucket(incoming, "done")
    assert sorted(done) == ["site-b.peers.toml", "site-b.revoked.toml", "site-b.verdict.txt"]
    assert done["site-b.verdict.txt"].startswith("accepted: Roster 5 accepted.")
    assert [p.name for p in incoming.iterdir() if p.is_file()] == []


@pytest.mark.django_db(transaction=True)
def test_a_tampered_pair_is_moved_to_refused_with_the_verdict_and_nothing_accepted(other_ca, incoming, settings):
    write_pair(incoming, tampered_peer(other_ca.sign(5)))

    verdicts = verdicts_of_the_watcher()

    assert [(v.outcome, v.reason) for v in verdicts] == [("refused", "bad_signature")]
    refused = bucket(incoming, "refused")
    assert sorted(refused) == ["peers.toml", "revoked.toml", "verdict.txt"]
    assert refused["verdict.txt"].startswith("refused: ") and "signature" in refused["verdict.txt"]
    assert services.accepted() is None
    assert store.read_published(settings.FORGE_ROSTER_DIR).empty


@pytest.mark.django_db(transaction=True)
def test_a_replayed_older_roster_is_refused_and_the_accepted_one_stays(other_ca, incoming, settings):
    current = other_ca.sign(5)
    assert services.consider_roster(current.peers_toml, current.revoked_toml, source="test", actor="t").outcome == (
        "accepted"
    )
    write_pair(incoming, other_ca.sign(3, peers=("mallory@team",)))

    verdicts = verdicts_of_the_watcher()

    assert [(v.outcome, v.reason) for v in verdicts] == [("refused", "replayed")]
    assert bucket(incoming, "refused")["verdict.txt"].startswith("refused: This roster is number 3, older than")
    accepted = services.accepted()
    assert accepted is not None and (accepted.sequence, accepted.digest) == (5, current.digest)
    assert store.read_published(settings.FORGE_ROSTER_DIR).peers_toml == current.peers_toml


@pytest.mark.django_db(transaction=True)
def test_an_equal_sequence_fork_is_flagged_as_a_conflict_and_not_accepted(other_ca, incoming, settings):
    current = other_ca.sign(5)
    services.consider_roster(current.peers_toml, current.revoked_toml, source="test", actor="t")
    fork = other_ca.sign(5, peers=("alice@team", "eve@team"))
    write_pair(incoming, fork, stem="fork.")

    verdicts = verdicts_of_the_watcher()

    assert [(v.outcome, v.sequence) for v in verdicts] == [("conflict", 5)]
    conflict = RosterConflict.objects.get()
    assert (conflict.sequence, conflict.candidate_digest, conflict.accepted_digest) == (5, fork.digest, current.digest)
    assert conflict.source == "incoming/fork.peers.toml"
    assert bucket(incoming, "refused")["fork.verdict.txt"].startswith("conflict: Two different rosters")
    accepted = services.accepted()
    assert accepted is not None and accepted.digest == current.digest


@pytest.mark.django_db(transaction=True)
def test_a_failing_consideration_logs_one_line_without_a_traceback(team, incoming, caplog):
    incoming.mkdir(parents=True)
    (incoming / "peers.toml").write_text("anything")
    calls: list[int] = []

    def make_consider(signal: Callable[[], None]) -> Callable[[], list[services.Verdict]]:
        def consider() -> list[services.Verdict]:
            calls.append(1)
            signal()
            raise OSError(28, "No space left on device")

        return consider

    with caplog.at_level(logging.INFO, logger="forge.caretaker"):
        # The consideration signals before it raises: wait for the line the watcher logs about it.
        watch_until_considered(make_consider, until=lambda: any(r.name == "forge.caretaker" for r in caplog.records))

    records = [r for r in caplog.records if r.name == "forge.caretaker"]
    assert len(records) == 1 and calls == [1]
    assert records[0].levelno == logging.WARNING and records[0].exc_info is None
    assert "OSError: [Errno 28] No space left on device" in records[0].getMessage()
    assert "\n" not in records[0].getMessage()


# The settling rule and the scan, on their own


def test_a_change_is_due_only_once_the_folder_has_been_still_for_the_settling_time():
    settling = watch.Settling(settle=0.2, retry=30)
    first, both = frozenset({("a.peers.toml", 1, 1)}), frozenset({("a.peers.toml", 1, 1), ("a.revoked.toml", 1, 1)})

    assert not settling.due(first, 10.0)
    assert not settling.due(both, 10.1)  # the companion arrived: the settling time starts again
    assert not settling.due(both, 10.25)
    assert settling.due(both, 10.31)


def test_the_same_contents_are_not_considered_again_until_they_change():
    settling = watch.Settling(settle=0.2, retry=30)
    lone = frozenset({("a.peers.toml", 1, 1)})
    settling.due(lone, 0.0)
    assert settling.due(lone, 0.5)
    settling.handle(lone, failed=False, now=0.5)

    assert not settling.due(lone, 100.0)
    assert settling.pause(0.5) == 0.5
    changed = lone | {("a.revoked.toml", 2, 2)}
    assert not settling.due(changed, 100.5)
    assert settling.pause(0.5) == 0.2
    assert settling.due(changed, 100.8)


def test_a_failed_attempt_is_retried_after_the_retry_time_not_before():
    settling = watch.Settling(settle=0.2, retry=30)
    pair = frozenset({("peers.toml", 1, 1), ("revoked.toml", 1, 1)})
    settling.due(pair, 0.0)
    assert settling.due(pair, 0.3)
    settling.handle(pair, failed=True, now=0.3)

    assert not settling.due(pair, 0.8)
    assert not settling.due(pair, 30.2)
    assert settling.due(pair, 30.3)


def test_an_empty_folder_is_never_due():
    settling = watch.Settling(settle=0.2, retry=30)

    assert not settling.due(frozenset(), 0.0)
    assert not settling.due(frozenset(), 100.0)


def test_the_scan_sees_files_with_size_and_time_but_not_folders_or_dot_files(tmp_path):
    (tmp_path / "done").mkdir()
    (tmp_path / ".peers.toml.part").write_text("half")
    (tmp_path / "peers.toml").write_text("four")
    os.utime(tmp_path / "peers.toml", ns=(1_000_000_000, 2_000_000_000))

    assert watch.snapshot(tmp_path) == frozenset({("peers.toml", 4, 2_000_000_000)})
    assert watch.snapshot(tmp_path / "missing") == frozenset()
