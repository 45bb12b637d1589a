"""The audit Merkle tree against the RFC 9162 definitions, the transparency-dev proof vectors, and a
naive reference built from all the leaves."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
from functools import cache
from pathlib import Path

import pytest

from audit.merkle import (
    EMPTY_ROOT,
    MemoryNodeStore,
    MissingNodeError,
    NodeKey,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    nodes_for_append,
    nodes_for_appends,
    root,
    verify_consistency,
    verify_inclusion,
)

TESTDATA = Path(__file__).resolve().parents[1] / "fixtures" / "merkle"
TREE_SIZE = 10_000
LEAVES = tuple(leaf_hash(f"audit event {i}".encode()) for i in range(TREE_SIZE))


def _vectors(kind: str) -> list:
    # A missing folder must fail the run rather than skip it: the vectors are part of the repository.
    paths = sorted((TESTDATA / kind).rglob("*.json"))
    assert paths, f"the RFC 9162 proof vectors are missing from {TESTDATA / kind}"
    return [pytest.param(path, id=str(path.relative_to(TESTDATA))) for path in paths]


def _b64(value: str) -> bytes:
    return base64.b64decode(value)


# The reference: RFC 9162 sections 2.1.1, 2.1.3.1 and 2.1.4.1 word for word, over LEAVES[start:end].
def _split(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


@cache
def reference_root(start: int, end: int) -> bytes:
    n = end - start
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return LEAVES[start]
    k = _split(n)
    return node_hash(reference_root(start, start + k), reference_root(start + k, end))


def reference_path(m: int, start: int, end: int) -> list[bytes]:
    n = end - start
    if n == 1:
        return []
    k = _split(n)
    if m < k:
        return [*reference_path(m, start, start + k), reference_root(start + k, end)]
    return [*reference_path(m - k, start + k, end), reference_root(start, start + k)]


def reference_subproof(m: int, start: int, end: int, whole: bool) -> list[bytes]:
    n = end - start
    if m == n:
        return [] if whole else [reference_root(start, end)]
    k = _split(n)
    if m <= k:
        return [*reference_subproof(m, start, start + k, whole), reference_root(start + k, end)]
    return [*reference_subproof(m - k, start + k, end, False), reference_root(start, start + k)]


class CountingStore:
    """Wraps a store and records every batch of keys asked for."""

    def __init__(self, inner: MemoryNodeStore) -> None:
        self.inner = inner
        self.calls: list[list[NodeKey]] = []

    def get_many(self, keys: list[NodeKey]) -> dict[NodeKey, bytes]:
        self.calls.append(list(keys))
        return self.inner.get_many(keys)


def build(leaves: tuple[bytes, ...] | list[bytes]) -> MemoryNodeStore:
    store = MemoryNodeStore()
    for size, leaf in enumerate(leaves):
        store.put_many(nodes_for_append(size, leaf, store))
    return store


@pytest.fixture(scope="module")
def store() -> MemoryNodeStore:
    return build(LEAVES)


@pytest.fixture(scope="module")
def index_size_pairs() -> list[tuple[int, int]]:
    rng = random.Random(9162)
    sizes = [rng.randint(1, TREE_SIZE) for _ in range(290)] + [1, 2, 3, 4, 5, 7, 8, 9, 4096, TREE_SIZE]
    return [(rng.randrange(size), size) for size in sizes]


@pytest.fixture(scope="module")
def size_pairs() -> list[tuple[int, int]]:
    rng = random.Random(6962)
    pairs = [tuple(sorted((rng.randint(1, TREE_SIZE), rng.randint(1, TREE_SIZE)))) for _ in range(280)]
    pairs += [(1, 1), (1, 2), (2, 3), (3, 7), (4, 5), (4, 8), (6, 8), (8, 9), (1, TREE_SIZE), (TREE_SIZE, TREE_SIZE)]
    pairs += [(size, size) for size in (17, 1024)] + [(1023, 1024), (1024, 1025), (4096, TREE_SIZE)]
    pairs += [(TREE_SIZE - 1, TREE_SIZE), (5000, 5001), (2**13, 2**13 + 1), (3, 4), (7, 8)]
    return pairs


@pytest.mark.parametrize("path", _vectors("inclusion"))
def test_inclusion_vector_verifies_exactly_when_it_is_not_a_corruption(path: Path) -> None:
    case = json.loads(path.read_text())
    proof = [_b64(item) for item in case["proof"] or []]
    verified = verify_inclusion(_b64(case["leafHash"]), case["leafIdx"], case["treeSize"], proof, _b64(case["root"]))
    assert verified is not case["wantErr"], case["desc"]


@pytest.mark.parametrize("path", _vectors("consistency"))
def test_consistency_vector_verifies_exactly_when_it_is_not_a_corruption(path: Path) -> None:
    case = json.loads(path.read_text())
    proof = [_b64(item) for item in case["proof"] or []]
    verified = verify_consistency(case["size1"], case["size2"], _b64(case["root1"]), _b64(case["root2"]), proof)
    assert verified is not case["wantErr"], case["desc"]


def test_hashes_use_the_rfc_9162_domain_separation_prefixes() -> None:
    a, b = hashlib.sha256(b"a").digest(), hashlib.sha256(b"b").digest()
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest() != node_hash(b, a)


def test_root_of_the_empty_tree_is_the_hash_of_the_empty_string(store: MemoryNodeStore) -> None:
    assert root(0, store) == EMPTY_ROOT == root(0, MemoryNodeStore())


def test_root_equals_the_rfc_definition_for_every_size_up_to_300(store: MemoryNodeStore) -> None:
    mismatched = [size for size in range(1, 301) if root(size, store) != reference_root(0, size)]
    assert mismatched == []


@pytest.mark.parametrize("size", [511, 512, 513, 1000, 4095, 4096, 4097, 8191, 9999, TREE_SIZE])
def test_root_equals_the_rfc_definition_for_large_sizes(store: MemoryNodeStore, size: int) -> None:
    assert root(size, store) == reference_root(0, size)


def test_appending_stores_every_perfect_subtree_once_and_nothing_else(store: MemoryNodeStore) -> None:
    assert len(store.nodes) == 2 * TREE_SIZE - TREE_SIZE.bit_count()
    wrong = [
        (level, index)
        for (level, index), digest in store.nodes.items()
        if digest != reference_root(index << level, (index + 1) << level)
    ]
    assert wrong == []


def test_nodes_for_append_reads_only_the_left_siblings_it_completes(store: MemoryNodeStore) -> None:
    counting = CountingStore(store)
    nodes = nodes_for_append(2**13 - 1, LEAVES[2**13 - 1], counting)
    assert [(level, index) for level, index, _ in nodes] == [(level, (2**13 >> level) - 1) for level in range(14)]
    assert counting.calls == [[(level, (2**13 - 1 >> level) - 1) for level in range(13)]]
    counting.calls.clear()
    assert nodes_for_append(8, LEAVES[8], counting) == [(0, 8, LEAVES[8])]
    assert counting.calls == []


def test_appending_leaves_together_gives_the_nodes_of_appending_them_one_by_one(store: MemoryNodeStore) -> None:
    rng = random.Random(15)
    cases = [(0, 1), (0, 8), (1, 1), (7, 1), (7, 8), (8, 8), (2**13 - 1, 2), (2**13 - 3, 9), (5000, 300)]
    cases += [(size, rng.randint(1, 20)) for size in rng.sample(range(TREE_SIZE - 20), 200)]
    wrong = []
    for size, count in cases:
        one_by_one = [node for at in range(size, size + count) for node in nodes_for_append(at, LEAVES[at], store)]
        if nodes_for_appends(size, LEAVES[size : size + count], store) != one_by_one:
            wrong.append((size, count))
    assert wrong == []


def test_appending_leaves_together_reads_only_the_frontier_nodes_it_combines(store: MemoryNodeStore) -> None:
    counting = CountingStore(store)
    nodes_for_appends(2**13 - 1, LEAVES[2**13 - 1 : 2**13 + 1], counting)  # completes the 2**13 subtree, then one
    assert counting.calls == [[(level, (2**13 - 1 >> level) - 1) for level in range(12, -1, -1)]]
    counting.calls.clear()
    nodes_for_appends(12, LEAVES[12:15], counting)  # 12 = 8 + 4: both are combined when leaf 15 is appended
    nodes_for_appends(8, LEAVES[8:9], counting)
    assert counting.calls == []
    nodes_for_appends(12, LEAVES[12:16], counting)
    nodes_for_appends(10, LEAVES[10:12], counting)  # 10 = 8 + 2: the 2 is combined, the 8 not until 16
    assert counting.calls == [[(3, 0), (2, 2)], [(1, 4)]]


def test_inclusion_proofs_verify_against_the_root_of_their_size(store: MemoryNodeStore, index_size_pairs) -> None:
    failed = [
        (index, size)
        for index, size in index_size_pairs
        if not verify_inclusion(LEAVES[index], index, size, inclusion_proof(index, size, store), root(size, store))
    ]
    assert failed == []


def test_inclusion_proofs_equal_the_rfc_path(store: MemoryNodeStore, index_size_pairs) -> None:
    differing = [
        (index, size)
        for index, size in index_size_pairs
        if inclusion_proof(index, size, store) != reference_path(index, 0, size)
    ]
    assert differing == []


def test_consistency_proofs_verify_against_the_roots_of_both_sizes(store: MemoryNodeStore, size_pairs) -> None:
    failed = [
        (m, n)
        for m, n in size_pairs
        if not verify_consistency(m, n, root(m, store), root(n, store), consistency_proof(m, n, store))
    ]
    assert failed == []


def test_consistency_proofs_equal_the_rfc_subproof(store: MemoryNodeStore, size_pairs) -> None:
    differing = [(m, n) for m, n in size_pairs if consistency_proof(m, n, store) != reference_subproof(m, 0, n, True)]
    assert differing == []


def test_inclusion_proof_is_refused_for_a_flipped_leaf(store: MemoryNodeStore) -> None:
    index, size = 4321, 9876
    proof, tree_root = inclusion_proof(index, size, store), root(size, store)
    flipped = bytes([LEAVES[index][0] ^ 1]) + LEAVES[index][1:]
    assert verify_inclusion(LEAVES[index], index, size, proof, tree_root)
    assert not verify_inclusion(flipped, index, size, proof, tree_root)


@pytest.mark.parametrize("wrong_index", [4320, 4322, 0, 9875])
def test_inclusion_proof_is_refused_at_another_index(store: MemoryNodeStore, wrong_index: int) -> None:
    index, size = 4321, 9876
    proof = inclusion_proof(index, size, store)
    assert not verify_inclusion(LEAVES[index], wrong_index, size, proof, root(size, store))


@pytest.mark.parametrize("other_size", [4322, 8192, 9877, TREE_SIZE])
def test_inclusion_proof_is_refused_against_the_root_of_another_tree_size(
    store: MemoryNodeStore, other_size: int
) -> None:
    proof = inclusion_proof(4321, 9876, store)
    assert not verify_inclusion(LEAVES[4321], 4321, other_size, proof, root(other_size, store))


def test_consistency_proof_is_refused_when_the_old_tree_was_rewritten(store: MemoryNodeStore) -> None:
    rewritten = list(LEAVES[:3000])
    rewritten[1234] = leaf_hash(b"a rewritten audit event")
    old_root_as_exported = root(3000, build(rewritten))
    proof = consistency_proof(3000, TREE_SIZE, store)
    assert verify_consistency(3000, TREE_SIZE, root(3000, store), root(TREE_SIZE, store), proof)
    assert not verify_consistency(3000, TREE_SIZE, old_root_as_exported, root(TREE_SIZE, store), proof)


def test_each_root_and_proof_reads_the_store_once_with_logarithmically_many_keys(
    store: MemoryNodeStore, index_size_pairs, size_pairs
) -> None:
    counting = CountingStore(store)
    too_many = []
    for index, size in index_size_pairs:
        for label, compute in (("inclusion", inclusion_proof), ("root", None)):
            counting.calls.clear()
            if compute is None:
                root(size, counting)
            else:
                compute(index, size, counting)
            reads = [len(keys) for keys in counting.calls]
            if len(reads) > 1 or sum(reads) > 2 * math.ceil(math.log2(size)) + 2:
                too_many.append((label, index, size, reads))
    for m, n in size_pairs:
        counting.calls.clear()
        consistency_proof(m, n, counting)
        reads = [len(keys) for keys in counting.calls]
        if m != n and (len(reads) != 1 or reads[0] > 2 * math.ceil(math.log2(n)) + 2):
            too_many.append(("consistency", m, n, reads))
    assert too_many == []


def test_a_size_beyond_the_stored_tree_raises_missing_node_error(store: MemoryNodeStore) -> None:
    with pytest.raises(MissingNodeError):
        root(TREE_SIZE + 1, store)
    with pytest.raises(MissingNodeError):
        inclusion_proof(0, TREE_SIZE + 1, store)


@pytest.mark.parametrize(
    "make",
    [
        lambda s: inclusion_proof(5, 5, s),
        lambda s: inclusion_proof(-1, 5, s),
        lambda s: consistency_proof(0, 5, s),
        lambda s: consistency_proof(6, 5, s),
        lambda s: root(-1, s),
        lambda s: nodes_for_append(3, b"short", s),
        lambda s: nodes_for_appends(-1, [GOOD], s),
        lambda s: nodes_for_appends(3, [GOOD, b"short"], s),
    ],
    ids=[
        "index-equals-size",
        "negative-index",
        "empty-old-tree",
        "old-larger-than-new",
        "negative-size",
        "short-leaf",
        "negative-size-of-several",
        "short-leaf-of-several",
    ],
)
def test_proof_generation_refuses_arguments_outside_the_tree(store: MemoryNodeStore, make) -> None:
    with pytest.raises(ValueError):
        make(store)


GOOD = hashlib.sha256(b"x").digest()


@pytest.mark.parametrize(
    "args",
    [
        ("not bytes", 0, 1, [], GOOD),
        (GOOD, 0, 1, [], None),
        (GOOD, -1, 1, [], GOOD),
        (GOOD, True, 2, [GOOD], GOOD),
        (GOOD, 0, 1.0, [], GOOD),
        (GOOD, 0, 2, GOOD, GOOD),
        (GOOD, 0, 2, [GOOD[:31]], GOOD),
        (GOOD, 0, 2, [GOOD + b"\x00"], GOOD),
        (GOOD, 0, 2, ["a" * 32], GOOD),
        (GOOD, 0, 2, None, GOOD),
        (GOOD[:16], 0, 1, [], GOOD[:16]),
    ],
)
def test_verify_inclusion_answers_false_to_malformed_input(args) -> None:
    assert verify_inclusion(*args) is False


@pytest.mark.parametrize(
    "args",
    [
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, []),
        (0, 5, EMPTY_ROOT, GOOD, []),
        (-1, 5, GOOD, GOOD, [GOOD]),
        (2, 1, GOOD, GOOD, []),
        (1, 1, GOOD, GOOD, [GOOD]),
        (1, 2, GOOD, GOOD, []),
        (1, 2, "text", GOOD, [GOOD]),
        (1, 2, GOOD, GOOD[:31], [GOOD]),
        (1, 2, GOOD, GOOD, [GOOD[:31]]),
        (1, 2, GOOD, GOOD, "proof"),
        (1, 2, GOOD, GOOD, None),
        (1.0, 2, GOOD, GOOD, [GOOD]),
    ],
)
def test_verify_consistency_answers_false_to_malformed_input(args) -> None:
    assert verify_consistency(*args) is False
