"""Checking the audit log: the MAC chain, the mirror, the Merkle tree and every signed checkpoint.

`verify_log()` walks the events in sequence order once, holding only O(log n) tree hashes, and stops at
the first event that is wrong, naming its sequence number and why: a gap, a broken link, a MAC that
does not match the row (a row changed behind the model's back), a tree leaf that does not match the row,
a tree node that does not hash the two beneath it, or a mirror line that differs. Then it checks what
the database may have lost: tree nodes past the last event, signed checkpoints kept outside the database
(the server's copy beside the mirror, and any an auditor saved, `--against`) that saw a longer or another
log, and mirror lines past the database's end. Last, each checkpoint row's root against the tree the
events build and its signature against the server's audit key.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from audit import keys, merkle
from audit.checkpoint import Checkpoint, CheckpointError, parse_and_verify
from audit.kept import SavedCheckpoint, kept_path, read_kept
from audit.mirror import Mirror, MirrorError, counted
from audit.models import AuditCheckpoint, AuditEvent, AuditTreeNode
from audit.services import (
    GENESIS_MAC,
    DatabaseNodeStore,
    compute_mac,
    event_line,
    lock_chain,
    past_the_end,
    row_body,
    signed_checkpoint,
)

CHUNK = 2000


@dataclass(frozen=True)
class Finding:
    seq: int | None  # None when the finding is about no one event (a saved checkpoint that is no checkpoint)
    reason: str

    def __str__(self) -> str:
        return self.reason if self.seq is None else f"event {self.seq}: {self.reason}"


@dataclass(frozen=True)
class Report:
    events: int
    checkpoints: int
    finding: Finding | None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.finding is None

    def __str__(self) -> str:
        if self.finding is None:
            return "; ".join([f"ok {self.events} events, {self.checkpoints} checkpoints", *self.notes])
        return f"FAILED at {self.finding}"


class RunningRoot:
    """The roots of a growing RFC 9162 tree, from its leaves one by one, in O(log n) memory."""

    def __init__(self) -> None:
        self.size = 0
        self.stack: list[tuple[int, bytes]] = []  # (leaves covered, hash) of perfect subtrees, left to right

    def push(self, leaf: bytes) -> list[merkle.Node]:
        """Add the next leaf; returns the perfect subtrees it completes, the leaf first, as (level, index, hash)."""
        index = self.size
        self.size += 1
        level, node = 0, leaf
        completed = [(0, index, leaf)]
        while self.stack and self.stack[-1][0] == 1 << level:
            left = self.stack.pop()[1]
            level, node = level + 1, merkle.node_hash(left, node)
            completed.append((level, index >> level, node))
        self.stack.append((1 << level, node))
        return completed

    def root(self) -> bytes:
        if not self.stack:
            return merkle.root(0, merkle.MemoryNodeStore())
        node = self.stack[-1][1]
        for _, left in reversed(self.stack[:-1]):
            node = merkle.node_hash(left, node)
        return node


def verify_log(mirror_path: Path | None, against: Sequence[SavedCheckpoint] = ()) -> Report:
    """Check the log as one consistent snapshot of the database (and the mirror beside it).

    Besides the checkpoints in `against`, the one the server keeps beside FORGE_AUDIT_LOG is checked.
    """
    try:
        kept = read_kept(settings.FORGE_AUDIT_LOG)
    except OSError as exc:
        return Report(0, 0, Finding(None, f"cannot read {kept_path(settings.FORGE_AUDIT_LOG)}: {exc.strerror}"))
    saved = [*([kept] if kept is not None else []), *against]
    signed: list[tuple[SavedCheckpoint, Checkpoint]] = []
    for checkpoint in saved:
        try:
            signed.append((checkpoint, signed_checkpoint(checkpoint.note)))
        except CheckpointError as exc:
            return Report(0, 0, Finding(None, f"{checkpoint.source} is not a checkpoint this server signed: {exc}"))
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # On SQLite the transaction holds the write lock (BEGIN IMMEDIATE): appends wait for the check.
        report = _verify_snapshot(mirror_path, signed)
    if report.ok and mirror_path is not None:
        return _check_past_the_end(report, Mirror(mirror_path))
    return report


def _check_past_the_end(report: Report, mirror: Mirror) -> Report:
    """Lines past the database's end, with appends held off: appends that rolled back, or lost events."""
    with transaction.atomic():
        lock_chain()
        size, past, problem = past_the_end(mirror.path)
    if problem is not None:
        return Report(report.events, 0, Finding(size + 1, f"the mirror {problem}"))
    if past.lines:
        note = (
            f"the mirror holds {counted(len(past.lines), 'line')} past the database's last event {size} that continue its "
            f"chain: appends that rolled back, which the next append moves to {mirror.rolled_back_path.name} "
            "(or events lost since the last kept checkpoint)"
        )
        return Report(report.events, report.checkpoints, None, (*report.notes, note))
    return report


def _verify_snapshot(mirror_path: Path | None, saved: Sequence[tuple[SavedCheckpoint, Checkpoint]]) -> Report:
    checkpoints = {c.size: c for c in AuditCheckpoint.objects.all()}
    mirror_lines = Mirror(mirror_path).lines() if mirror_path is not None else None
    store = DatabaseNodeStore()
    tree = RunningRoot()
    wanted = set(checkpoints) | {checkpoint.size for _, checkpoint in saved}
    roots: dict[int, bytes] = {}
    expected_seq, prev_mac, count = 1, GENESIS_MAC, 0
    for chunk in _chunks(AuditEvent.objects.order_by("seq").iterator(chunk_size=CHUNK)):
        stored = store.get_many([key for event in chunk for key in merkle.completed_by(event.seq - 1)])
        for event in chunk:
            completed = tree.push(merkle.leaf_hash(event_line(event).encode()))
            finding = check_event(event, expected_seq, prev_mac, completed, stored, mirror_lines)
            if finding is not None:
                return Report(events=count, checkpoints=0, finding=finding)
            if event.seq in wanted:
                roots[event.seq] = tree.root()
            expected_seq, prev_mac, count = event.seq + 1, event.mac, count + 1
    if store.get_many([(0, count)]):
        return Report(count, 0, Finding(count + 1, "the tree has a leaf for this event but the log has no row for it"))
    nodes, expected_nodes = AuditTreeNode.objects.count(), 2 * count - count.bit_count()
    if nodes != expected_nodes:
        beyond = (
            f"the tree holds {counted(nodes - expected_nodes, 'node')} over events past the log's last event {count}"
        )
        return Report(count, 0, Finding(count + 1, f"{beyond}: its tail was deleted"))
    for source, signed in saved:
        finding = _check_saved(source, signed, count, roots.get(signed.size))
        if finding is not None:
            return Report(events=count, checkpoints=0, finding=finding)
    if mirror_lines is not None:
        # The database was read in one snapshot; the file was not. Lines past the snapshot's end belong
        # to events committed since, to an append that rolled back, or to events the database lost
        # (`_check_past_the_end` tells which): they must continue the chain with valid MACs, which only
        # the server can make.
        for number, raw in mirror_lines:
            if not _continues_chain(raw, expected_seq, prev_mac):
                stray = f"the mirror has a line past the log's end (line {number})"
                return Report(count, 0, Finding(expected_seq, stray))
            expected_seq, prev_mac = expected_seq + 1, json.loads(raw)["mac"]
    for size, checkpoint in sorted(checkpoints.items()):
        finding = check_checkpoint(checkpoint, roots.get(size))
        if finding is not None:
            return Report(events=count, checkpoints=0, finding=finding)
    return Report(events=count, checkpoints=len(checkpoints), finding=None)


def _continues_chain(raw: bytes, seq: int, prev_mac: str) -> bool:
    try:
        line = json.loads(raw)
        body = {key: value for key, value in line.items() if key != "mac"}
        return line["seq"] == seq and line["prev_mac"] == prev_mac and compute_mac(prev_mac, body) == line["mac"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


def _chunks(events):
    iterator = iter(events)
    while chunk := list(itertools.islice(iterator, CHUNK)):
        yield chunk


def check_event(
    event: AuditEvent,
    expected_seq: int,
    prev_mac: str,
    completed: list[merkle.Node],
    stored: dict[merkle.NodeKey, bytes],
    mirror_lines,
) -> Finding | None:
    """What is wrong with `event` as the log's next event after `prev_mac` (None: nothing); the full verification
    and the console's bounded check of the newest events both use it."""
    if event.seq != expected_seq:
        return Finding(expected_seq, f"missing: the next event in the log is {event.seq} (a gap)")
    if event.prev_mac != prev_mac:
        return Finding(event.seq, "its previous MAC does not match the MAC of the event before it (chain broken)")
    if compute_mac(event.prev_mac, row_body(event)) != event.mac:
        return Finding(event.seq, "MAC mismatch: the row was changed after it was written, or its MAC forged")
    for level, index, digest in completed:  # recomputed from the rows: the leaf, then each node it completes
        if stored.get((level, index)) == digest:
            continue
        if level == 0:
            return Finding(event.seq, "its Merkle leaf is missing or does not match the row")
        first, last = (index << level) + 1, (index + 1) << level
        return Finding(
            event.seq,
            f"tree node {level}/{index} (over events {first}..{last}) is missing or is not the hash of the "
            "nodes beneath it: proofs served from it would not verify",
        )
    line = event_line(event)
    if mirror_lines is not None:
        mirrored = next(mirror_lines, None)
        if mirrored is None:
            return Finding(event.seq, "the mirror ends before this event")
        if mirrored[1] != line.encode():
            return Finding(event.seq, f"the mirror differs (line {mirrored[0]})")
    return None


def _check_saved(saved: SavedCheckpoint, signed: Checkpoint, count: int, computed_root: bytes | None) -> Finding | None:
    """A checkpoint kept outside the database: the log must be at least as long, and extend the same tree."""
    if computed_root is None:
        return Finding(
            count + 1,
            f"the log holds {count} events but {saved.describe()} saw {signed.size}: "
            "the database was rolled back (an old backup restored) or its tail deleted",
        )
    if computed_root != signed.root:
        return Finding(
            signed.size,
            f"the log's first {signed.size} events do not hash to the root {saved.describe()} signed: "
            "events up to this one were replaced",
        )
    return None


def check_checkpoint(checkpoint: AuditCheckpoint, computed_root: bytes | None) -> Finding | None:
    """What is wrong with a stored checkpoint (its signature, or its root against the tree's), None: nothing."""
    if computed_root is None:
        return Finding(checkpoint.size, f"checkpoint {checkpoint.size} is past the end of the log")
    try:
        signed = parse_and_verify(checkpoint.note, keys.KEY_NAME, keys.public_key())
    except CheckpointError as exc:
        return Finding(checkpoint.size, f"checkpoint {checkpoint.size} is not validly signed: {exc}")
    if signed.size != checkpoint.size or signed.root != bytes(checkpoint.root) or signed.origin != keys.origin():
        return Finding(checkpoint.size, f"checkpoint {checkpoint.size}'s signed note does not match its row")
    if computed_root != signed.root:
        return Finding(checkpoint.size, f"checkpoint {checkpoint.size}'s root does not match the events")
    return None


def rebuild_mirror(mirror_path: Path) -> int:
    """Rewrite the mirror from the database (after a verify without mirror found the chain sound).

    A mirror holding events past the database's end is refused (MirrorError): those lines may be all
    that is left of events the database lost, and only an operator may move them aside.
    """
    mirror = Mirror(mirror_path)
    _, _, problem = past_the_end(mirror_path)
    if problem is not None:
        raise MirrorError(f"{mirror_path} {problem}; move it aside (keep it as evidence), then rebuild")
    events = AuditEvent.objects.order_by("seq").iterator(chunk_size=CHUNK)
    lines = [event_line(event) for event in events]
    mirror.rewrite(lines)
    return len(lines)
