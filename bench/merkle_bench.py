"""Cost of the audit Merkle tree (``audit.merkle``) at a million events, in-process, no database.

It builds a ``MemoryNodeStore`` of ``--leaves`` random 32-byte leaf hashes through
``nodes_for_append`` (timed, with the resulting node count and process RSS), then, over ``--proofs``
random cases each, times in milliseconds (p50/p99/max): ``root`` of a random size, inclusion proof
generation and verification for a random (index, size), and consistency proof generation and
verification for a random (old, new) pair. It also reports the most keys any single proof asked the
store for, the figure that bounds a database-backed store's one query per proof. Every generated
proof is verified, so a wrong figure cannot come from a wrong proof.

Run it as ``.venv/bin/python bench/merkle_bench.py [--leaves 1000000] [--proofs 1000]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from audit.merkle import (  # noqa: E402
    MemoryNodeStore,
    NodeKey,
    consistency_proof,
    inclusion_proof,
    nodes_for_append,
    root,
    verify_consistency,
    verify_inclusion,
)


class KeyCountingStore:
    """Passes reads through and keeps the largest batch of keys asked for."""

    def __init__(self, inner: MemoryNodeStore) -> None:
        self.inner = inner
        self.most_keys = 0

    def get_many(self, keys: list[NodeKey]) -> dict[NodeKey, bytes]:
        self.most_keys = max(self.most_keys, len(keys))
        return self.inner.get_many(keys)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed_ms(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter_ns()
    result = fn()
    return (time.perf_counter_ns() - start) / 1e6, result


def summary(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)]
    return f"{label:<28} p50 {statistics.median(ordered):8.4f} ms   p99 {p99:8.4f} ms   max {ordered[-1]:8.4f} ms"


def build(leaves: list[bytes]) -> tuple[MemoryNodeStore, float]:
    store = MemoryNodeStore()
    start = time.perf_counter()
    for size, leaf in enumerate(leaves):
        store.put_many(nodes_for_append(size, leaf, store))
    return store, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--proofs", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=9162)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    n = args.leaves

    rss_before = rss_mb()
    leaves = [rng.randbytes(32) for _ in range(n)]
    store, seconds = build(leaves)
    print(f"built {n:,} leaves in {seconds:.2f} s ({seconds / n * 1e6:.2f} us per append)")
    print(f"stored nodes {len(store.nodes):,}; RSS grew {rss_mb() - rss_before:.0f} MB")

    counting = KeyCountingStore(store)
    roots: list[float] = []
    inclusion_gen: list[float] = []
    inclusion_ver: list[float] = []
    for _ in range(args.proofs):
        size = rng.randint(1, n)
        index = rng.randrange(size)
        ms, tree_root = timed_ms(lambda size=size: root(size, store))
        roots.append(ms)
        ms, proof = timed_ms(lambda index=index, size=size: inclusion_proof(index, size, counting))
        inclusion_gen.append(ms)
        ms, ok = timed_ms(
            lambda index=index, size=size, proof=proof, tree_root=tree_root: verify_inclusion(
                leaves[index], index, size, proof, tree_root
            )
        )
        inclusion_ver.append(ms)
        if not ok:
            raise SystemExit(f"inclusion proof for leaf {index} of {size} did not verify")
    inclusion_keys = counting.most_keys

    counting.most_keys = 0
    consistency_gen: list[float] = []
    consistency_ver: list[float] = []
    for _ in range(args.proofs):
        old, new = sorted(rng.sample(range(1, n + 1), 2))
        old_root, new_root = root(old, store), root(new, store)
        ms, proof = timed_ms(lambda old=old, new=new: consistency_proof(old, new, counting))
        consistency_gen.append(ms)
        ms, ok = timed_ms(
            lambda old=old, new=new, old_root=old_root, new_root=new_root, proof=proof: verify_consistency(
                old, new, old_root, new_root, proof
            )
        )
        consistency_ver.append(ms)
        if not ok:
            raise SystemExit(f"consistency proof from {old} to {new} did not verify")

    print(f"{args.proofs} random cases each (sizes up to {n:,}):")
    print(summary("root(size)", roots))
    print(summary("inclusion proof, generate", inclusion_gen))
    print(summary("inclusion proof, verify", inclusion_ver))
    print(summary("consistency proof, generate", consistency_gen))
    print(summary("consistency proof, verify", consistency_ver))
    print(f"most keys in one read: inclusion {inclusion_keys}, consistency {counting.most_keys}")


if __name__ == "__main__":
    main()
