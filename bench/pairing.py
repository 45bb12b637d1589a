"""Side-by-side measurement's pairing, shared by the benches that take it (``run_all.py``, ``scaleout_bench.py``):
servers (or deployments) take turns in short blocks, one block of each makes a cycle, and each ratio of two of
them is taken over the pairs of their blocks of one cycle, measured seconds apart, so that the host's drift over
minutes falls on both sides of every pair alike."""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import mcp_load as ml

T = TypeVar("T")


class Contender(Protocol):
    """Whatever takes turns: a server in one call mode, a deployment."""

    failure: str | None

    @property
    def name(self) -> str: ...


C = TypeVar("C", bound=Contender)


@dataclass
class Block:
    """One server's turn in one cycle of the side-by-side measurement: ``calls`` sequential calls (``seq``) or
    ``--clients`` sessions calling for ``--block-seconds`` (``load``), with the server's CPU over that turn only."""

    server: str
    mode: str
    phase: str
    round: int
    cycle: int
    calls: int
    seconds: float
    server_cpu_ms: float | None
    client_cpu_ms: float
    errors: int = 0

    def cpu_ms(self, attr: str) -> float | None:
        """The CPU (ms) over the whole block that a CPU figure counts: the server's."""
        return self.server_cpu_ms

    def figure(self, attr: str) -> float | None:
        """The block's value of a figure: CPU ms per call or calls/s."""
        if attr == "calls_per_s":
            return self.calls / self.seconds if self.seconds > 0 else None
        used = self.cpu_ms(attr)
        return used / self.calls if used is not None and self.calls else None


B = TypeVar("B", bound=Block)


@dataclass(kw_only=True)
class Turns(Generic[B]):
    """What one contender takes its turns with and gathers in them: its session for sequential calls, its load
    sessions, its calls' timings, its blocks, and its first error or the failure that ended its turns."""

    session: ml.Session
    load_sessions: list[ml.Session] = field(default_factory=list)
    timings_ms: list[float] = field(default_factory=list)
    blocks: list[B] = field(default_factory=list)
    first_error: str | None = None
    failure: str | None = None


# The phase of the blocks each compared figure comes from.
PHASE_OF = {"seq_cpu_ms": "seq", "load_cpu_ms": "load", "calls_per_s": "load", "deployment_cpu_ms": "load"}


@dataclass(frozen=True)
class Pooled:
    """One contender's blocks of one round pooled: p50/p99 over all its timed calls, its CPU per call over its own
    sequential or load blocks, its calls/s over its load blocks' seconds."""

    p50_ms: float | None
    p99_ms: float | None
    seq_cpu_ms: float | None
    calls_per_s: float | None
    load_cpu_ms: float | None
    client_cpu_ms: float | None
    errors: int
    no_load_call: bool  # it had load blocks and not one call in them succeeded

    @classmethod
    def of(cls, blocks: Sequence[Block], timings_ms: list[float]) -> Pooled:
        seq = [b for b in blocks if b.phase == "seq"]
        load = [b for b in blocks if b.phase == "load"]
        seq_calls, load_calls = sum(b.calls for b in seq), sum(b.calls for b in load)
        load_seconds = sum(b.seconds for b in load)
        timings = sorted(timings_ms)

        def cpu_per_call(phase: list[Block], calls: int) -> float | None:
            if not calls or any(b.server_cpu_ms is None for b in phase):
                return None
            return sum(b.server_cpu_ms or 0.0 for b in phase) / calls

        return cls(
            p50_ms=ml.percentile(timings, 0.50) if timings else None,
            p99_ms=ml.percentile(timings, 0.99) if timings else None,
            seq_cpu_ms=cpu_per_call(seq, seq_calls),
            calls_per_s=load_calls / load_seconds if load_seconds > 0 else None,
            load_cpu_ms=cpu_per_call(load, load_calls),
            client_cpu_ms=sum(b.client_cpu_ms for b in load) / load_calls if load_calls else None,
            errors=sum(b.errors for b in load),
            no_load_call=bool(load) and not load_calls,
        )

    def call_figures(self) -> dict[str, float | int | None]:
        """The figures as ``run_all.CallFigures``'s fields."""
        return {name: value for name, value in vars(self).items() if name != "no_load_call"}


def paired_blocks(blocks: list[Block], ours: str, ref: str, mode: str, attr: str) -> list[tuple[Block, Block]]:
    """The blocks of ``ours`` and ``ref`` measured in the same cycle of the same round, for one figure."""
    phase = PHASE_OF[attr]
    theirs = {(b.round, b.cycle): b for b in blocks if (b.server, b.mode, b.phase) == (ref, mode, phase)}
    return [
        (b, theirs[b.round, b.cycle])
        for b in blocks
        if (b.server, b.mode, b.phase) == (ours, mode, phase) and (b.round, b.cycle) in theirs
    ]


def block_ratios(blocks: list[Block], ours: str, ref: str, mode: str, attr: str) -> list[float]:
    """Each paired blocks' ratio of one figure, ``ours`` over ``ref``."""
    ratios = []
    for mine, theirs in paired_blocks(blocks, ours, ref, mode, attr):
        value, reference = mine.figure(attr), theirs.figure(attr)
        if value is not None and reference:
            ratios.append(value / reference)
    return ratios


def pooled_ratio(blocks: list[Block], ours: str, ref: str, mode: str, attr: str) -> float | None:
    """One figure over all the paired blocks at once (total CPU over total calls, or total calls over total
    seconds), ``ours`` over ``ref``."""
    pairs = paired_blocks(blocks, ours, ref, mode, attr)
    if not pairs or any(b.cpu_ms(attr) is None for pair in pairs for b in pair):
        return None

    def pooled(side: list[Block]) -> float | None:
        calls = sum(b.calls for b in side)
        if attr == "calls_per_s":
            seconds = sum(b.seconds for b in side)
            return calls / seconds if seconds > 0 else None
        return sum(b.cpu_ms(attr) or 0.0 for b in side) / calls if calls else None

    value, reference = pooled([mine for mine, _ in pairs]), pooled([theirs for _, theirs in pairs])
    return value / reference if value is not None and reference else None


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def quartiles(values: list[float]) -> tuple[float, float] | None:
    if len(values) < 2:
        return (values[0], values[0]) if values else None
    first, _median, third = statistics.quantiles(values, n=4, method="inclusive")
    return first, third


def rotated(items: list[T], cycle: int) -> list[T]:
    """``items`` in cycle ``cycle``'s order: each cycle starts one item later than the last, so that none always
    follows the same one."""
    shift = cycle % len(items) if items else 0
    return items[shift:] + items[:shift]


def in_rotation(contenders: list[C], cycle: int) -> list[C]:
    """The contenders still measured, in this cycle's order (``rotated``)."""
    return rotated([c for c in contenders if c.failure is None], cycle)


async def take_turns(
    contenders: list[C],
    cycles: int,
    measure: Callable[[C, int], Awaitable[None]],
    failures: tuple[type[BaseException], ...],
) -> None:
    """``cycles`` cycles of one block per live contender, in rotation; a contender whose block fails with one of
    ``failures`` drops out."""
    for cycle in range(cycles):
        for contender in in_rotation(contenders, cycle):
            try:
                await measure(contender, cycle)
            except failures as exc:
                contender.failure = repr(exc)
                print(f"  {contender.name}: failed: {exc!r}", flush=True)
