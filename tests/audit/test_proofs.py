"""The proofs the server serves from its stored tree verify against its signed checkpoints, at scale.

One log of 10,000 events, appended by `record()` like any other, with checkpoints at sizes around the
powers of two where the tree's shape changes. Inclusion proofs of random events and consistency proofs
between random checkpoints, read from the database by `DatabaseNodeStore`, are checked by the RFC 9162
verifiers against the roots the checkpoint notes sign, not against anything the server recomputes.
Building the log takes seconds, so the module builds it once, in a transaction rolled back at the end.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.db import transaction
from django.test.utils import override_settings

from audit import merkle
from audit.checkpoint import Checkpoint
from audit.models import AuditEvent
from audit.services import DatabaseNodeStore, do_make_checkpoint, event_line
from tests.audit.helpers import append_events, signed

EVENTS = 10_000
CHECKPOINT_SIZES = (1, 2, 3, 7, 1000, 1024, 1025, 2000, 4095, 4096, 5000, 8191, 9999, EVENTS)
INCLUSION_PAIRS = 100
CONSISTENCY_PAIRS = 50


@dataclass(frozen=True)
class SignedLog:
    checkpoints: list[Checkpoint]  # as their notes sign them, after the signature checked out


@pytest.fixture(scope="module")
def signed_log(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[SignedLog]:
    mirror = tmp_path_factory.mktemp("proofs") / "audit.jsonl"
    with (
        django_db_blocker.unblock(),
        override_settings(FORGE_AUDIT_LOG=mirror, FORGE_AUDIT_CHECKPOINT_EVENTS=0),
        transaction.atomic(),
    ):
        checkpoints, appended = [], 0
        for size in CHECKPOINT_SIZES:
            append_events(size - appended)
            appended = size
            made = do_make_checkpoint()
            assert made is not None and made.size == size
            checkpoints.append(signed(made))
        yield SignedLog(checkpoints=checkpoints)
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_inclusion_proofs_of_random_events_verify_against_the_signed_roots(signed_log):
    chooser = random.Random(9162)
    pairs = []
    for _ in range(INCLUSION_PAIRS):
        checkpoint = chooser.choice(signed_log.checkpoints)
        pairs.append((chooser.randint(1, checkpoint.size), checkpoint))
    events = AuditEvent.objects.in_bulk([seq for seq, _ in pairs])
    store = DatabaseNodeStore()

    for seq, checkpoint in pairs:
        leaf = merkle.leaf_hash(event_line(events[seq]).encode())
        proof = merkle.inclusion_proof(seq - 1, checkpoint.size, store)

        assert merkle.verify_inclusion(leaf, seq - 1, checkpoint.size, proof, checkpoint.root), (seq, checkpoint.size)


@pytest.mark.django_db
def test_an_inclusion_proof_does_not_verify_another_event(signed_log):
    last = signed_log.checkpoints[-1]
    events = AuditEvent.objects.in_bulk([4321, 4322])
    proof = merkle.inclusion_proof(4321 - 1, last.size, DatabaseNodeStore())

    other_leaf = merkle.leaf_hash(event_line(events[4322]).encode())

    assert not merkle.verify_inclusion(other_leaf, 4321 - 1, last.size, proof, last.root)


@pytest.mark.django_db
def test_consistency_proofs_between_random_checkpoints_verify_against_the_signed_roots(signed_log):
    chooser = random.Random(9162)
    ordered_pairs = [(old, new) for i, old in enumerate(signed_log.checkpoints) for new in signed_log.checkpoints[i:]]
    store = DatabaseNodeStore()

    for old, new in chooser.sample(ordered_pairs, CONSISTENCY_PAIRS):
        proof = merkle.consistency_proof(old.size, new.size, store)

        assert merkle.verify_consistency(old.size, new.size, old.root, new.root, proof), (old.size, new.size)


@pytest.mark.django_db
def test_a_consistency_proof_does_not_verify_against_another_old_root(signed_log):
    by_size = {checkpoint.size: checkpoint for checkpoint in signed_log.checkpoints}
    proof = merkle.consistency_proof(5000, 10_000, DatabaseNodeStore())

    assert not merkle.verify_consistency(5000, 10_000, by_size[4096].root, by_size[10_000].root, proof)
