"""run_all's side-by-side measurement: servers' blocks paired by cycle, the ratios taken over the pairs, the
turns rotated, and a run against two live null servers."""

from __future__ import annotations

import argparse
import os
import time

import mcp_load as ml
import pairing
import pytest
import run_all as ra


def block(server: str, cycle: int, calls: int, cpu_ms: float, *, phase: str = "seq", round: int = 1) -> ra.Block:
    return ra.Block(server, "json", phase, round, cycle, calls, calls / 100, cpu_ms, 0.0)


def test_the_ratio_is_the_median_of_each_cycles_ratio_and_pooled_sums_every_pair() -> None:
    results = ra.Results()
    # Cycle by cycle the host slows down; each cycle's forge block costs half the SDK's.
    for cycle, scale in enumerate((1.0, 2.0, 4.0)):
        results.blocks += [block("forge", cycle, 50, 50 * scale), block("sdk", cycle, 50, 100 * scale)]

    assert results.block_ratios("forge", "sdk", "json", "seq_cpu_ms") == [0.5, 0.5, 0.5]
    assert results.pooled_ratio("forge", "sdk", "json", "seq_cpu_ms") == pytest.approx(0.5)
    row = ra.figure_row(results, "json seq", "forge", "sdk", "json", "seq_cpu_ms", "")
    assert (row.ratio, row.quartiles, row.pairs) == (0.5, (0.5, 0.5), 3)


def test_blocks_pair_only_within_one_cycle_of_one_round_and_one_phase() -> None:
    results = ra.Results()
    results.blocks += [
        block("forge", 0, 50, 50.0),
        block("sdk", 0, 50, 100.0, round=2),
        block("sdk", 1, 50, 100.0),
        block("sdk", 0, 50, 100.0, phase="load"),
    ]

    assert results.block_ratios("forge", "sdk", "json", "seq_cpu_ms") == []
    assert results.pooled_ratio("forge", "sdk", "json", "seq_cpu_ms") is None


def test_calls_per_second_pair_the_load_blocks() -> None:
    results = ra.Results()
    results.blocks += [
        ra.Block("forge", "json", "load", 1, 0, 600, 1.0, 600.0, 0.0),
        ra.Block("sdk", "json", "load", 1, 0, 400, 1.0, 800.0, 0.0),
    ]

    assert results.block_ratios("forge", "sdk", "json", "calls_per_s") == [1.5]
    assert results.block_ratios("forge", "sdk", "json", "load_cpu_ms") == [0.5]


def contender(name: str) -> ra.Contender:
    server = ra.Running(ra.SERVERS[name], 0, "", "", {}, ra.Path("server.log"))
    return ra.Contender(server, session=ml.LegacySseSession(ml.new_client(), {}))


def test_each_cycle_starts_one_server_later_and_skips_a_failed_one() -> None:
    contenders = [contender("forge"), contender("sdk-json"), contender("null")]

    assert [c.name for c in pairing.in_rotation(contenders, 0)] == ["forge", "sdk-json", "null"]
    assert [c.name for c in pairing.in_rotation(contenders, 1)] == ["sdk-json", "null", "forge"]
    contenders[1].failure = "CallError('HTTP 500')"
    assert [c.name for c in pairing.in_rotation(contenders, 1)] == ["null", "forge"]


def test_a_process_cpu_time_is_read_finer_than_a_clock_tick() -> None:
    start = ml.process_cpu_ms(os.getpid())
    deadline = time.process_time() + 0.003
    while time.process_time() < deadline:
        pass
    used = ml.process_cpu_ms(os.getpid()) - start

    assert 3.0 <= used < 10.0  # a tick is 10 ms: /proc's utime and stime would show 0 or 10


@pytest.mark.live
@pytest.mark.anyio
async def test_servers_side_by_side_take_paired_turns_on_their_own_processes() -> None:
    specs = [ra.ServerSpec(name, "null server", ra.SERVERS["null"].argv) for name in ("forge", "sdk-daphne")]
    args = argparse.Namespace(n=6, block_calls=4, seconds=0.4, block_seconds=0.2, clients=2)
    results = ra.Results()
    async with ra.running(specs[0]) as first, ra.running(specs[1]) as second:
        await ra.measure_side_by_side([first, second], "json", args, results, 1)

    assert [(c.server, c.failure) for c in results.calls] == [("forge", None), ("sdk-daphne", None)]
    seq = [(b.server, b.cycle, b.calls) for b in results.blocks if b.phase == "seq"]
    assert sorted(seq) == [("forge", 0, 4), ("forge", 1, 2), ("sdk-daphne", 0, 4), ("sdk-daphne", 1, 2)]
    assert len(results.block_ratios("forge", "sdk-daphne", "json", "load_cpu_ms")) == 2
    assert all(b.server_cpu_ms is not None and b.server_cpu_ms > 0 for b in results.blocks)
