"""The RFC 9162 Merkle tree behind the audit log's public verifiability, free of Django.

Audit events are the leaves. The tree is kept as the hashes of its perfect subtrees: node
``(level, index)`` covers leaves ``[index * 2**level, (index + 1) * 2**level)`` and level 0 holds the
leaf hashes. Those nodes never change once written, so the store is append-only and every historical
tree size can still be served: the root of a tree of ``n`` leaves folds the perfect subtrees that
``n`` decomposes into (one per set bit), and the hash of any non-perfect right part of a proof is
folded the same way. Appending, roots and proofs therefore read O(log n) stored hashes, each in one
batched ``NodeStore.get_many`` call, and never rehash leaves.

The verifiers follow RFC 9162 sections 2.1.3.2 and 2.1.4.2 and are meant for anyone holding a signed
checkpoint (see ``audit.checkpoint``); they answer False to any malformed input instead of raising.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

NodeKey = tuple[int, int]
Node = tuple[int, int, bytes]


class NodeStore(Protocol):
    """Where the perfect-subtree hashes live, keyed by ``(level, index)``."""

    def get_many(self, keys: list[NodeKey]) -> dict[NodeKey, bytes]:
        """The stored hashes among ``keys``; a key that is not stored is absent from the result."""
        ...


class MissingNodeError(LookupError):
    """A node the tree needs is not in the store: the store is behind the size asked for, or damaged."""


@dataclass
class MemoryNodeStore:
    """A dict-backed ``NodeStore`` for tests, benches and offline checks."""

    nodes: dict[NodeKey, bytes] = field(default_factory=dict)

    def get_many(self, keys: list[NodeKey]) -> dict[NodeKey, bytes]:
        nodes = self.nodes
        return {key: nodes[key] for key in keys if key in nodes}

    def put_many(self, nodes: Iterable[Node]) -> None:
        for level, index, digest in nodes:
            self.nodes[(level, index)] = digest


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _fetch(store: NodeStore, keys: list[NodeKey]) -> dict[NodeKey, bytes]:
    if not keys:
        return {}
    found = store.get_many(keys)
    missing = [key for key in keys if key not in found]
    if missing:
        raise MissingNodeError(f"tree nodes {missing[:4]} are not stored ({len(missing)} missing)")
    return found


def _fold(hashes: Sequence[bytes]) -> bytes:
    """Root of consecutive perfect subtrees given left to right, each smaller than the one before."""
    result = hashes[-1]
    for digest in reversed(hashes[:-1]):
        result = node_hash(digest, result)
    return result


def frontier(size: int) -> list[NodeKey]:
    """The perfect subtrees a tree of ``size`` leaves decomposes into, largest (leftmost) first: every node that
    appending to it reads is one of them."""
    return _frontier(size)


def _frontier(size: int, below: int | None = None) -> list[NodeKey]:
    """The perfect subtrees a tree of ``size`` leaves decomposes into, largest (leftmost) first.

    With ``below``, only those of level lower than ``below``: the right part that starts where the
    subtree of that level ends.
    """
    top = size.bit_length() if below is None else below
    return [(level, (size >> level) - 1) for level in range(top - 1, -1, -1) if size >> level & 1]


def _path_keys(level: int, index: int, size: int) -> tuple[list[NodeKey], list[NodeKey], list[NodeKey]]:
    """Stored nodes needed to prove that perfect node ``(level, index)`` is in the tree of ``size``.

    Returns (siblings up to the fork, the perfect nodes under the ephemeral sibling, the perfect
    nodes to the left of the fork). The fork is the highest complete ancestor of the node: the
    frontier subtree of ``size`` that contains it. Below it every sibling is perfect; its sibling is
    the (possibly non-perfect) right part of the tree; above it, the larger frontier subtrees.
    """
    inner = (index ^ (size >> level)).bit_length() - 1
    fork = level + inner
    siblings = [(level + step, (index >> step) ^ 1) for step in range(inner)]
    right = _frontier(size, below=fork)
    left = [(lv, (size >> lv) - 1) for lv in range(fork + 1, size.bit_length()) if size >> lv & 1]
    return siblings, right, left


def _path_hashes(keys: tuple[list[NodeKey], list[NodeKey], list[NodeKey]], found: dict[NodeKey, bytes]) -> list[bytes]:
    siblings, right, left = keys
    proof = [found[key] for key in siblings]
    if right:
        proof.append(_fold([found[key] for key in right]))
    proof.extend(found[key] for key in left)
    return proof


def completed_by(index: int) -> list[NodeKey]:
    """The perfect nodes whose last leaf is leaf ``index``: the leaf, then each parent up the run of its
    trailing one bits. Every node of a tree is completed by exactly one leaf."""
    completed = (index ^ (index + 1)).bit_length() - 1
    return [(level, index >> level) for level in range(completed + 1)]


def nodes_for_append(size: int, leaf: bytes, store: NodeStore) -> list[Node]:
    """The perfect nodes that appending leaf hash ``leaf`` to a tree of ``size`` leaves completes.

    The leaf itself at ``(0, size)``, then each parent it completes, up the run of trailing one bits
    of ``size``; their left siblings are read in one call.
    """
    if size < 0:
        raise ValueError(f"tree size must be >= 0, got {size}")
    if len(leaf) != HASH_SIZE:
        raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
    completed = (size ^ (size + 1)).bit_length() - 1
    keys = [(level, (size >> level) - 1) for level in range(completed)]
    found = _fetch(store, keys)
    nodes = [(0, size, leaf)]
    digest = leaf
    for level, key in enumerate(keys):
        digest = node_hash(found[key], digest)
        nodes.append((level + 1, size >> (level + 1), digest))
    return nodes


def nodes_for_appends(size: int, leaves: Sequence[bytes], store: NodeStore) -> list[Node]:
    """The perfect nodes that appending leaf hashes ``leaves`` in turn to a tree of ``size`` leaves completes: for
    each leaf what ``nodes_for_append`` gives, in the same order, with one read of the store for them all.

    The frontier of the growing tree is kept as a stack of hashes, largest subtree first: a leaf completes a parent
    for each trailing one bit of the size it is appended at, combining it with the stack's top each time. Only the
    frontier nodes of ``size`` that a parent combines are read and stacked (``combined_by``, the smallest ones): the
    stack never reaches below them.
    """
    if size < 0:
        raise ValueError(f"tree size must be >= 0, got {size}")
    combined = combined_by(size, len(leaves))
    found = _fetch(store, combined)
    pending = [found[key] for key in combined]
    nodes: list[Node] = []
    for leaf in leaves:
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
        digest = leaf
        nodes.append((0, size, digest))
        level = 0
        while size >> level & 1:
            level += 1
            digest = node_hash(pending.pop(), digest)
            nodes.append((level, size >> level, digest))
        pending.append(digest)
        size += 1
    return nodes


def combined_by(size: int, count: int) -> list[NodeKey]:
    """The frontier nodes of a tree of ``size`` leaves that appending ``count`` leaves combines into parents, largest
    first: each is a left child (its index is even), combined once the leaves reach the end of its right sibling,
    which ends no later for a smaller one, so they are the frontier's last ones."""
    end = size + count
    return [(level, index) for level, index in _frontier(size) if end >= (index + 2) << level]


def root(size: int, store: NodeStore) -> bytes:
    """MTH of the first ``size`` leaves (RFC 9162 section 2.1.1)."""
    if size < 0:
        raise ValueError(f"tree size must be >= 0, got {size}")
    if size == 0:
        return EMPTY_ROOT
    keys = _frontier(size)
    found = _fetch(store, keys)
    return _fold([found[key] for key in keys])


def inclusion_proof(index: int, size: int, store: NodeStore) -> list[bytes]:
    """PATH(index, D[size]) of RFC 9162 section 2.1.3.1."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    keys = _path_keys(0, index, size)
    found = _fetch(store, [key for part in keys for key in part])
    return _path_hashes(keys, found)


def consistency_proof(old_size: int, new_size: int, store: NodeStore) -> list[bytes]:
    """PROOF(old_size, D[new_size]) of RFC 9162 section 2.1.4.1; empty when the sizes are equal."""
    if not 0 < old_size <= new_size:
        raise ValueError(f"a consistency proof needs 0 < old_size <= new_size, got {old_size} and {new_size}")
    if old_size == new_size:
        return []
    # The proof is the path of the largest perfect subtree ending at old_size, headed by that
    # subtree's own hash unless it is the whole old tree, whose root the verifier already holds.
    level = (old_size & -old_size).bit_length() - 1
    index = (old_size >> level) - 1
    keys = _path_keys(level, index, new_size)
    head = [(level, index)] if index else []
    found = _fetch(store, head + [key for part in keys for key in part])
    return [found[key] for key in head] + _path_hashes(keys, found)


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_proof(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(_is_hash(item) for item in value)


def verify_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2: whether ``proof`` shows leaf ``index`` of the tree ``root`` is ``leaf_hash``."""
    if not (_is_size(index) and _is_size(size) and index < size):
        return False
    if not (_is_hash(leaf_hash) and _is_hash(root) and _is_proof(proof)):
        return False
    fn, sn, r = index, size - 1, leaf_hash
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(r, root)


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 section 2.1.4.2: whether ``proof`` shows the tree ``new_root`` extends ``old_root``.

    Proofs are defined for 0 < old_size (RFC 9162 section 2.1.4.1), so an empty old tree is refused.
    Equal sizes are consistent exactly when the proof is empty and the roots are the same bytes.
    """
    if not (_is_size(old_size) and _is_size(new_size) and 0 < old_size <= new_size and _is_proof(proof)):
        return False
    if not (isinstance(old_root, bytes) and isinstance(new_root, bytes)):
        return False
    if old_size == new_size:
        return not proof and hmac.compare_digest(old_root, new_root)
    if not (proof and _is_hash(old_root) and _is_hash(new_root)):
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(fr, old_root) and hmac.compare_digest(sr, new_root)
