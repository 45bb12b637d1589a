"""scaleout_bench's side-by-side measurement: the deployments' blocks paired by cycle (with pairing.py, as run_all
pairs its servers'), PostgreSQL's CPU added for the deployment's figure, and a round's figures over its own blocks."""

from __future__ import annotations

import argparse

import pairing
import pytest
import run_all as ra
import scaleout_bench as sb


def block(
    dep: str, cycle: int, calls: int, cpu_ms: float, *, phase: str = "load", postgres_ms: float | None = None
) -> sb.DeploymentBlock:
    costs = sb.Phase(postgres_ms=postgres_ms, busy_pct=50.0, other_pct=10.0)
    return sb.DeploymentBlock(
        dep, "json", phase, 1, cycle, calls, 1.0, cpu_ms, 0.0, costs=costs, span_calls=calls, span_s=1.0
    )


def test_each_ratio_is_the_median_of_the_cycles_ratios_with_the_pooled_ratio_and_quartiles() -> None:
    blocks: list[sb.DeploymentBlock] = []
    # Cycle by cycle the host slows down; in each cycle pg-1's calls cost 1.2 times embedded's, the last cycle
    # disturbed.
    for cycle, (scale, ratio) in enumerate(((1.0, 1.2), (2.0, 1.2), (4.0, 1.2), (1.0, 3.0))):
        blocks += [block("embedded", cycle, 100, 100 * scale), block("pg-1", cycle, 100, 100 * scale * ratio)]
    rows = [sb.Figures("embedded", "json", load_cpu_ms=1.0), sb.Figures("pg-1", "json", load_cpu_ms=1.5)]

    line = next(r for r in sb.ratio_rows(rows, blocks) if (r.attr, r.ours) == ("load_cpu_ms", "pg-1"))

    assert line.ratio == pytest.approx(1.2)
    assert line.pooled == pytest.approx((120 + 240 + 480 + 300) / (100 + 200 + 400 + 100))
    assert line.quartiles is not None and line.quartiles[0] == pytest.approx(1.2)
    assert line.pairs == 4
    assert sb.verdict(line.ratio, 1.3, False) == "met"


def test_without_blocks_the_ratio_is_the_ratio_of_the_means() -> None:
    rows = [sb.Figures("embedded", "json", load_cpu_ms=1.0), sb.Figures("pg-1", "json", load_cpu_ms=1.5)]

    line = next(r for r in sb.ratio_rows(rows, []) if (r.attr, r.ours) == ("load_cpu_ms", "pg-1"))

    assert (line.ratio, line.pooled, line.quartiles, line.pairs) == (1.5, None, None, 0)


def test_the_deployments_cpu_adds_postgres_over_the_whole_block() -> None:
    blocks = [block("embedded", 0, 100, 100.0), block("pg-1", 0, 50, 60.0, postgres_ms=0.8)]

    assert blocks[1].figure("deployment_cpu_ms") == pytest.approx((60 + 0.8 * 50) / 50)
    assert blocks[1].figure("load_cpu_ms") == pytest.approx(60 / 50)
    assert pairing.block_ratios(list(blocks), "pg-1", "embedded", "json", "deployment_cpu_ms") == [pytest.approx(2.0)]
    assert pairing.pooled_ratio(list(blocks), "pg-1", "embedded", "json", "deployment_cpu_ms") == pytest.approx(2.0)


def test_a_rounds_figures_pool_its_own_blocks_and_weigh_their_costs() -> None:
    dep = sb.Deployment("pg-2", ["a", "b"], [1, 2], {})
    turns = sb.Turns(dep, session=None)  # type: ignore[arg-type]
    turns.timings_ms = [3.0, 1.0, 2.0]
    turns.blocks = [
        block("pg-2", 0, 50, 100.0, phase="seq", postgres_ms=1.0),
        block("pg-2", 0, 300, 300.0, postgres_ms=1.0),
        block("pg-2", 1, 100, 200.0, postgres_ms=3.0),
    ]

    figures = turns.figures(2)

    assert (figures.round, figures.processes, figures.p50_ms) == (2, 2, 2.0)
    assert figures.seq_cpu_ms == pytest.approx(2.0)
    assert figures.load_cpu_ms == pytest.approx(500 / 400)
    assert figures.calls_per_s == pytest.approx(200.0)
    assert figures.load.postgres_ms == pytest.approx((300 * 1.0 + 100 * 3.0) / 400)
    assert figures.deployment_cpu_ms == pytest.approx(500 / 400 + 1.5)
    assert figures.seq.postgres_ms == pytest.approx(1.0)
    assert figures.load.busy_pct == pytest.approx(50.0)


def test_each_cycle_starts_one_deployment_later() -> None:
    assert [pairing.rotated(["embedded", "pg-1", "pg-2"], cycle) for cycle in range(4)] == [
        ["embedded", "pg-1", "pg-2"],
        ["pg-1", "pg-2", "embedded"],
        ["pg-2", "embedded", "pg-1"],
        ["embedded", "pg-1", "pg-2"],
    ]


def test_in_turn_keeps_the_older_method_and_blocks_are_checked() -> None:
    assert sb.parse_args(["--deployments", "embedded", "--in-turn"]).in_turn
    args = sb.parse_args(["--deployments", "embedded"])
    assert (args.in_turn, args.block_calls, args.block_seconds) == (False, 50, 1.0)
    with pytest.raises(SystemExit):
        sb.parse_args(["--deployments", "embedded", "--block-seconds", "0"])
    assert isinstance(args, argparse.Namespace)


@pytest.mark.live
@pytest.mark.anyio
async def test_deployments_side_by_side_take_paired_turns_on_sessions_opened_beforehand() -> None:
    spec = ra.ServerSpec("null", "null server", ra.SERVERS["null"].argv)
    args = argparse.Namespace(n=6, block_calls=4, seconds=0.4, block_seconds=0.2, clients=2)
    async with ra.running(spec) as first, ra.running(spec) as second:
        deps = {
            "embedded": sb.Deployment("embedded", [first.url], [first.pid], first.headers),
            "pg-2": sb.Deployment("pg-2", [first.url, second.url], [first.pid, second.pid], first.headers),
        }
        rows, blocks = await sb.measure_side_by_side(deps, 1, args, sb.Services(deps))

    assert [(r.server, r.failure, r.processes) for r in rows] == [("embedded", None, 1), ("pg-2", None, 2)]
    seq = sorted((b.server, b.cycle, b.calls) for b in blocks if b.phase == "seq")
    assert seq == [("embedded", 0, 4), ("embedded", 1, 2), ("pg-2", 0, 4), ("pg-2", 1, 2)]
    assert len(pairing.block_ratios(list(blocks), "pg-2", "embedded", "json", "load_cpu_ms")) == 2
    assert all(b.server_cpu_ms is not None and b.server_cpu_ms > 0 for b in blocks)
    assert all(b.costs.busy_pct is not None for b in blocks)
