"""hol_bench's figures: each round's loaded p99 over its alone p99, and the figure over all rounds' probes; its heavy
client in a process of its own."""

from __future__ import annotations

import asyncio
import os

import hol_bench as hb
import mcp_load as ml
import pytest
import run_all as ra


def phases(alone: list[float], loaded: list[float]) -> dict[str, dict[str, list[float]]]:
    return {"alone": {"ping": alone, "server_info": alone}, "loaded": {"ping": loaded, "server_info": loaded}}


def test_each_round_gives_its_own_loaded_over_alone_p99() -> None:
    figures = hb.WorkersFigures("8", round_samples=[phases([1.0, 2.0], [3.0, 4.0]), phases([2.0, 8.0], [2.0, 4.0])])

    assert figures.round_ratios("ping") == [2.0, 0.5]


def test_a_round_without_probes_in_a_phase_has_no_ratio() -> None:
    figures = hb.WorkersFigures("8", round_samples=[phases([], [3.0])])

    assert figures.round_ratios("server_info") == [None]


def test_the_figure_is_the_median_of_the_rounds_not_the_worst_rounds_tail() -> None:
    quiet = [1.0] * 99 + [2.0]
    rounds = [phases(quiet, [x * 1.2 for x in quiet]), phases(quiet, [x * 1.1 for x in quiet])]
    rounds.append(phases(quiet, [x * 1.3 for x in quiet[:-1]] + [50.0]))  # one round's tail far out
    figures = hb.WorkersFigures("8", round_samples=rounds)
    figures.probes = {
        phase: {kind: hb.Spread.of([x for r in rounds for x in r[phase][kind]]) for kind in hb.PROBES}
        for phase in hb.PHASES
    }

    assert figures.ratio("ping") == 1.2
    assert figures.pooled_ratio("ping") == 1.3  # the third round's 1.3x tail sets the pooled p99


@pytest.mark.live
@pytest.mark.anyio
async def test_the_heavy_client_calls_from_a_process_of_its_own_until_told_to_stop() -> None:
    async with ra.running(ra.SERVERS["null"]) as server:
        session = await ml.streamable_session(server.url, server.headers)
        try:
            loop = hb.HeavyLoop(session, "server_info", {}, first_id=1_000)
            await loop.start()
            assert loop.process is not None and loop.process.pid != os.getpid()
            await asyncio.sleep(0.3)
            await loop.stop()
        finally:
            await session.close()

    assert loop.durations and all(ms > 0 for ms in loop.durations)
    assert loop.process.returncode == 0
