"""Checking the audit log: the MAC chain, the mirror, the Merkle tree and every signed checkpoint.

`verify_log()` walks the events in sequence order once, holding only O(log n) tree hashes, and stops at
the first event that is wrong, naming its sequence number and why: a gap, a broken link, a MAC that
does not match the row (a row changed behind the model's back), a tree leaf that does not match the row,
or a mirror line that differs. Then it checks each checkpoint's root against the tree the events build
and its signature against the server's audit key.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from django.db import connection, transaction

from audit import keys, merkle
from audit.checkpoint import CheckpointError, parse_and_verify
from audit.mirror import Mirror
from audit.models import AuditCheckpoint, AuditEvent
from audit.services import GENESIS_MAC, DatabaseNodeStore, compute_mac, event_line, row_body

CHUNK = 2000


@dataclass(frozen=True)
class Finding:
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"event {self.seq}: {self.reason}"


@dataclass(frozen=True)
class Report:
    events: int
    checkpoints: int
    finding: Finding | None

    @property
    def ok(self) -> bool:
        return self.finding is None

    def __str__(self) -> str:
        if self.finding is None:
            return f"ok {self.events} events, {self.checkpoints} checkpoints"
        return f"FAILED at {self.finding}"


class RunningRoot:
    """The roots of a growing RFC 9162 tree, from its leaves one by one, in O(log n) memory."""

    def __init__(self) -> None:
        self.size = 0
        self.stack: list[tuple[int, bytes]] = []  # (leaves covered, hash) of perfect subtrees, left to right

    def push(self, leaf: bytes) -> None:
        self.size += 1
        covered, node = 1, leaf
        while self.stack and self.stack[-1][0] == covered:
            left = self.stack.pop()[1]
            covered, node = covered * 2, merkle.node_hash(left, node)
        self.stack.append((covered, node))

    def root(self) -> bytes:
        if not self.stack:
            return merkle.root(0, merkle.MemoryNodeStore())
        node = self.stack[-1][1]
        for _, left in reversed(self.stack[:-1]):
            node = merkle.node_hash(left, node)
        return node


def verify_log(mirror_path: Path | None) -> Report:
    """Check the log as one consistent snapshot of the database (and the mirror beside it)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # On SQLite the transaction holds the write lock (BEGIN IMMEDIATE): appends wait for the check.
        return _verify_snapshot(mirror_path)


def _verify_snapshot(mirror_path: Path | None) -> Report:
    checkpoints = {c.size: c for c in AuditCheckpoint.objects.all()}
    mirror_lines = Mirror(mirror_path).lines() if mirror_path is not None else None
    store = DatabaseNodeStore()
    tree = RunningRoot()
    roots: dict[int, bytes] = {}
    expected_seq, prev_mac, count = 1, GENESIS_MAC, 0
    for chunk in _chunks(AuditEvent.objects.order_by("seq").iterator(chunk_size=CHUNK)):
        leaves = store.get_many([(0, event.seq - 1) for event in chunk])
        for event in chunk:
            finding = _check_event(event, expected_seq, prev_mac, leaves.get((0, event.seq - 1)), mirror_lines)
            if finding is not None:
                return Report(events=count, checkpoints=0, finding=finding)
            tree.push(merkle.leaf_hash(event_line(event).encode()))
            if event.seq in checkpoints:
                roots[event.seq] = tree.root()
            expected_seq, prev_mac, count = event.seq + 1, event.mac, count + 1
    if store.get_many([(0, count)]):
        return Report(count, 0, Finding(count + 1, "the tree has a leaf for this event but the log has no row for it"))
    if mirror_lines is not None:
        # The database was read in one snapshot; the file was not. Lines past the snapshot's end belong
        # to events committed since (or to one rolled back, which the next append cuts off): they must
        # continue the chain with valid MACs, which only the server can make.
        for number, raw in mirror_lines:
            if not _continues_chain(raw, expected_seq, prev_mac):
                stray = f"the mirror has a line past the log's end (line {number})"
                return Report(count, 0, Finding(expected_seq, stray))
            expected_seq, prev_mac = expected_seq + 1, json.loads(raw)["mac"]
    for size, checkpoint in sorted(checkpoints.items()):
        finding = _check_checkpoint(checkpoint, roots.get(size))
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


def _check_event(event: AuditEvent, expected_seq: int, prev_mac: str, stored_leaf, mirror_lines) -> Finding | None:
    if event.seq != expected_seq:
        return Finding(expected_seq, f"missing: the next event in the log is {event.seq} (a gap)")
    if event.prev_mac != prev_mac:
        return Finding(event.seq, "its previous MAC does not match the MAC of the event before it (chain broken)")
    if compute_mac(event.prev_mac, row_body(event)) != event.mac:
        return Finding(event.seq, "MAC mismatch: the row was changed after it was written, or its MAC forged")
    line = event_line(event)
    if stored_leaf != merkle.leaf_hash(line.encode()):
        return Finding(event.seq, "its Merkle leaf is missing or does not match the row")
    if mirror_lines is not None:
        mirrored = next(mirror_lines, None)
        if mirrored is None:
            return Finding(event.seq, "the mirror ends before this event")
        if mirrored[1] != line.encode():
            return Finding(event.seq, f"the mirror differs (line {mirrored[0]})")
    return None


def _check_checkpoint(checkpoint: AuditCheckpoint, computed_root: bytes | None) -> Finding | None:
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
    """Rewrite the mirror from the database (after a verify without mirror found the chain sound)."""
    events = AuditEvent.objects.order_by("seq").iterator(chunk_size=CHUNK)
    lines = [event_line(event) for event in events]
    Mirror(mirror_path).rewrite(lines)
    return len(lines)
