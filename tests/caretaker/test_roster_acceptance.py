"""Rosters signed elsewhere, through the service every path uses (the incoming/ watcher, the console's upload,
`roster_accept`): each attack is refused with its reason and an audit row, and neither the accepted roster nor
the published files change; a newer genuine roster is accepted and published; an equal-sequence fork is
flagged, never resolved silently."""

from __future__ import annotations

from datetime import timedelta

import pytest

from audit.models import AuditEvent, EventKind
from caretaker import roster, services, store, trust
from caretaker.models import RosterConflict
from tests.caretaker.rosters import NOW, Elsewhere, tampered_meta, tampered_peer, without_signature

pytestmark = pytest.mark.django_db


@pytest.fixture
def partner(team) -> Elsewhere:
    """Another caretaker whose CA this server trusts, with roster 5 of theirs accepted here."""
    other = Elsewhere.create()
    trust.install(other.pem, actor="cora", why="the partner team")
    assert services.consider_roster(*pair(other.sign(5)), source="setup", actor="cora").outcome == "accepted"
    return other


def pair(signed: roster.Roster) -> tuple[bytes, bytes]:
    return signed.peers_toml, signed.revoked_toml


def naming_the_partner(partner: Elsewhere, stranger: Elsewhere) -> roster.Roster:
    """Signed by an untrusted key, but its meta names the trusted partner CA."""
    signed = stranger.sign(6)
    ours, theirs = (
        roster.certificate_fingerprint(partner.certificate),
        roster.certificate_fingerprint(stranger.certificate),
    )
    peers, revoked = (text.replace(theirs.encode(), ours.encode()) for text in pair(signed))
    return roster.Roster(signed.meta, signed.peers, signed.revoked, peers, revoked)


def mixed(partner: Elsewhere) -> roster.Roster:
    newer, older = partner.sign(7, peers=("alice@team", "bob@team")), partner.sign(6)
    return roster.Roster(newer.meta, newer.peers, (), newer.peers_toml, older.revoked_toml)


ATTACKS = {
    "tampered-peer-entry": (lambda p, s: tampered_peer(p.sign(6)), "bad_signature"),
    "tampered-meta": (lambda p, s: tampered_meta(p.sign(4)), "bad_signature"),
    "signed-by-another-ca": (lambda p, s: s.sign(6), "untrusted_ca"),
    "ca-fingerprint-mismatch": (naming_the_partner, "bad_signature"),
    "replayed-older-sequence": (lambda p, s: p.sign(4), "replayed"),
    "expired": (lambda p, s: p.sign(6, signed=NOW - timedelta(days=40), days=30), "expired"),
    "mixed-with-older-revoked": (lambda p, s: mixed(p), "mixed"),
    "missing-signature": (lambda p, s: without_signature(p.sign(6)), "missing_signature"),
}


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_each_attack_is_refused_with_its_reason_and_nothing_changes(partner, settings, attack):
    make, reason = ATTACKS[attack]
    before_row, before_files = services.accepted(), store.read_published(settings.FORGE_ROSTER_DIR)

    verdict = services.consider_roster(
        *pair(make(partner, Elsewhere.create("Stranger CA"))), source=attack, actor="test"
    )

    assert (verdict.outcome, verdict.reason) == ("refused", reason)
    assert verdict.message  # says what is wrong
    after = services.accepted()
    assert after is not None and before_row is not None
    assert (after.sequence, after.digest) == (before_row.sequence, before_row.digest) == (5, before_row.digest)
    assert store.read_published(settings.FORGE_ROSTER_DIR) == before_files
    last = AuditEvent.objects.filter(kind=EventKind.CARETAKER_ACTION, tool="roster.consider").order_by("-seq").first()
    assert last is not None and last.outcome == f"refused: {reason}"


def test_a_newer_genuine_roster_is_accepted_and_published(partner, settings):
    newer = partner.sign(6, peers=("alice@team", "bob@team"))

    verdict = services.consider_roster(*pair(newer), source="incoming/peers.toml", actor="test")

    assert verdict.outcome == "accepted" and verdict.sequence == 6
    published = store.read_published(settings.FORGE_ROSTER_DIR)
    assert (published.peers_toml, published.revoked_toml) == pair(newer)
    assert services.accepted().sequence == 6


def test_the_same_roster_again_changes_nothing(partner):
    again = services.consider_roster(*pair(partner.sign(5)), source="again", actor="test")
    assert again.outcome == "same"


def test_an_equal_sequence_fork_is_flagged_as_a_conflict_and_the_accepted_roster_stays(partner, settings):
    before = store.read_published(settings.FORGE_ROSTER_DIR)
    fork = partner.sign(5, peers=("mallory@team",))

    verdict = services.consider_roster(*pair(fork), source="incoming/fork.peers.toml", actor="test")

    assert verdict.outcome == "conflict"
    conflict = RosterConflict.objects.get()
    assert (conflict.sequence, conflict.candidate_digest) == (5, fork.digest)
    assert store.read_published(settings.FORGE_ROSTER_DIR) == before
    assert services.accepted().sequence == 5
    assert AuditEvent.objects.filter(tool="roster.consider", outcome="conflict").count() == 1


def test_an_accepted_record_edited_in_the_database_accepts_nothing_not_even_what_it_would_allow(partner, settings):
    from caretaker.models import AcceptedRoster

    before = store.read_published(settings.FORGE_ROSTER_DIR)
    AcceptedRoster.objects.filter(pk=1).update(sequence=1)  # someone rolls the counter back by hand

    verdict = services.consider_roster(*pair(partner.sign(4)), source="replay", actor="test")

    assert (verdict.outcome, verdict.reason) == ("refused", "tampered_record")
    assert "changed outside Forge" in verdict.message
    assert store.read_published(settings.FORGE_ROSTER_DIR) == before
    assert services.accepted() is None
