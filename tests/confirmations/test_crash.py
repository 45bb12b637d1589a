"""The executor survives SIGKILL at every step boundary: the crash test the recovery contract demands.

A worker process (tests/confirmations/crash_worker.py) with a data dir and database of its own forks a
child per run; the child prepares a contract for a random operation and executes it, stopping at a
random step boundary (before_write, after_temp_write, after_rename, before_verified), where this test
kills it with SIGKILL; some runs are not killed at all. After each run another child plays the restarted
server (`confirmations.services.recover`) and reports what it finds. Every time, the project file must be
either the old or the new complete document (never partial, always XSD-valid), the one that matches
where the kill landed; the contract must be in RECONCILIATION after a kill (VERIFIED without one), its
evidence must agree with the file, it must hold exactly one EXECUTING event, and a second execute of it
must be refused. A killed run's reconciliation is then concluded from the evidence, as an operator would,
so the next run can take the target. The seed is random per run and shown in every failure message
(`FORGE_CRASH_SEED` repeats one).

The same holds for the team roster (capability `team.roster`, a worker of its own in override mode with an
active caretaker): killed at any boundary, the roster that `FORGE_ROSTER_DIR/peers.toml` and its siblings lead
to is the old one or the new one, each verifying against the team CA, no staging folder is left half-written,
and the contract is in RECONCILIATION. A kill after the new generation folder is complete but before the
`current` link moves leaves that folder unreferenced and the old roster current.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.live import ROOT, manage, scratch_database, server_env

pytestmark = pytest.mark.live

BOUNDARIES = ("before_write", "after_temp_write", "after_rename", "before_verified")
BEFORE_RENAME = {"before_write", "after_temp_write"}
OPERATIONS = ("add_variable", "update_variable", "update_documentation", "add_pou")
ROSTER_OPERATIONS = ("issue", "sign")
RUNS_PER_BOUNDARY = 12
RUNS_WITHOUT_KILL = 8
BOUND = 60.0  # seconds for the worker to answer one command; a fraction of a second normally


@dataclass
class Worker:
    """The zygote process and the JSON lines it (and its children) write."""

    process: subprocess.Popen
    log: Path
    case: str = "project"
    lines: queue.Queue = field(default_factory=queue.Queue)
    blocked: int | None = None  # a child waiting at a boundary to be killed
    ready: dict[str, Any] = field(default_factory=dict)  # what setting up reported

    def send(self, **command: Any) -> None:
        assert self.process.stdin is not None
        command = {**command, "case": self.case}
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()

    def next(self, *events: str, context: str = "") -> dict[str, Any]:
        """The next message that is one of `events`; an error or an unexpected end fails the test."""
        while True:
            try:
                message = self.lines.get(timeout=BOUND)
            except queue.Empty:
                pytest.fail(f"the crash worker said nothing for {BOUND}s {context}\n{self.log.read_text()}")
            if message is None:
                pytest.fail(f"the crash worker ended {context}\n{self.log.read_text()}")
            if message["event"] == "blocked":
                self.blocked = message["pid"]
            if message["event"] == "error":
                pytest.fail(f"the crash worker failed {context}:\n{message['traceback']}")
            if message["event"] in events:
                return message
            if message["event"] == "reaped" and message["signal"] == 0 and message["code"] != 0:
                pytest.fail(f"a crash worker child exited with {message['code']} {context}\n{self.log.read_text()}")

    def kill_blocked(self) -> None:
        """SIGKILL the child waiting at its boundary (the zygote reaps it and says so)."""
        if self.blocked is not None:
            os.kill(self.blocked, signal.SIGKILL)
            self.blocked = None

    def command(self, reply: str, context: str = "", **command: Any) -> dict[str, Any]:
        """Send a command a child answers, and wait until that child is gone too."""
        self.send(**command)
        answer = self.next(reply, context=context)
        self.next("reaped", context=context)
        return answer


def _read_lines(stream: IO[bytes], into: queue.Queue) -> None:
    for line in stream:
        into.put(json.loads(line))
    into.put(None)


@contextmanager
def running_worker(data_dir: Path, *, case: str, **extra_env: str) -> Iterator[Worker]:
    """A crash worker with a data dir and database of its own, set up for `case` ("project" or "roster")."""
    with scratch_database() as database:
        env = server_env(
            data_dir,
            FORGE_SECRETS_DIR=str(data_dir / "secrets"),
            FORGE_PROJECTS_ROOT=str(data_dir / "projects"),
            FORGE_AUDIT_LOG=str(data_dir / "audit" / "audit.jsonl"),
            REDIS_URL="",
            **database,
            **extra_env,
        )
        manage(env, "migrate", "--noinput", "-v", "0")
        log = data_dir / "worker.log"
        with open(log, "wb") as errors:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.confirmations.crash_worker"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        worker = Worker(process=process, log=log, case=case)
        threading.Thread(target=_read_lines, args=(process.stdout, worker.lines), daemon=True).start()
        try:
            worker.send(cmd="setup")
            worker.ready = worker.next("ready", context="setting up")
            yield worker
        finally:
            worker.kill_blocked()  # a failed run may have left its child waiting for the kill
            if process.poll() is None:
                process.stdin.close()  # the zygote ends at the end of its input
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)


@pytest.fixture(scope="module")
def worker(tmp_path_factory) -> Iterator[Worker]:
    with running_worker(tmp_path_factory.mktemp("crash-data"), case="project") as started:
        yield started


@pytest.fixture(scope="module")
def roster_worker(tmp_path_factory) -> Iterator[Worker]:
    """A worker of an override deployment whose caretaker is active, with a first roster published."""
    data_dir = tmp_path_factory.mktemp("crash-roster")
    with running_worker(
        data_dir,
        case="roster",
        FORGE_OVERRIDE_SECURITIES="1",
        FORGE_CA_DIR=str(data_dir / "secrets" / "team-ca"),
        FORGE_ROSTER_DIR=str(data_dir / "roster"),
        FORGE_TRUST_DIR=str(data_dir / "trust"),
    ) as started:
        yield started


def plan(seed: int, operations: tuple[str, ...] = OPERATIONS) -> list[tuple[str, str | None]]:
    """Every boundary RUNS_PER_BOUNDARY times, some runs without a kill, in random order and operations."""
    rng = random.Random(seed)
    boundaries: list[str | None] = [*BOUNDARIES * RUNS_PER_BOUNDARY, *[None] * RUNS_WITHOUT_KILL]
    rng.shuffle(boundaries)
    return [(rng.choice(operations), boundary) for boundary in boundaries]


def crash_seed() -> int:
    return int(os.environ.get("FORGE_CRASH_SEED") or random.SystemRandom().randrange(2**32))


def test_sigkill_at_any_step_boundary_leaves_a_whole_file_a_consistent_contract_and_no_second_execution(worker):
    seed = crash_seed()
    runs = plan(seed)
    assert len(runs) >= 50
    temp_files: list[str] = []

    def leftovers(seen: dict[str, Any], boundary: str | None, where: str) -> None:
        # A stray temporary file is left only by a kill between its write and the rename.
        nonlocal temp_files
        new_temp_files = sorted(set(seen["temp_files"]) - set(temp_files))
        assert len(new_temp_files) == (1 if boundary == "after_temp_write" else 0), f"{new_temp_files} {where}"
        temp_files = seen["temp_files"]

    crash_runs(worker, seed, runs, leftovers)


def test_sigkill_at_any_step_boundary_leaves_the_old_or_the_new_signed_roster_and_a_consistent_contract(
    roster_worker,
):
    seed = crash_seed()
    runs = plan(seed, ROSTER_OPERATIONS)
    assert len(runs) >= 50
    generations = set(roster_worker.ready["generations"])  # the first roster, published when setting up
    assert len(generations) == 1

    def leftovers(seen: dict[str, Any], boundary: str | None, where: str) -> None:
        # Nothing half-written stays: a generation folder is staged under a dot name and renamed whole (and the
        # next roster written removes any staging folder a kill left). A kill before the rename of `current`
        # after the folder was complete leaves it there, unreferenced.
        assert seen["temp_files"] == [], where
        new = set(seen["generations"]) - generations
        assert len(new) == (0 if boundary == "before_write" else 1), f"{sorted(new)} {where}"
        if boundary == "after_temp_write":
            assert seen["current"] not in new, where
        elif boundary != "before_write":
            assert new == {seen["current"]}, where
        generations.update(seen["generations"])

    crash_runs(roster_worker, seed, runs, leftovers)


def crash_runs(
    worker: Worker,
    seed: int,
    runs: list[tuple[str, str | None]],
    leftovers: Callable[[dict[str, Any], str | None, str], None],
) -> None:
    """Each run killed at its boundary (or not), the restarted server's findings checked against where the kill
    landed, and a killed run's reconciliation concluded from the evidence; `leftovers` judges what a kill left
    beside the target."""
    file_now = ""
    contracts: list[str] = []
    outcomes: Counter = Counter()
    for number, (op, boundary) in enumerate(runs, start=1):
        where = f"(seed {seed}, run {number}: {op}, killed at {boundary or 'no boundary'})"
        worker.send(cmd="run", run=number, op=op, boundary=boundary)
        prepared = worker.next("prepared", context=where)
        contract, before, after = prepared["contract"], prepared["before"], prepared["after"]
        contracts.append(contract)
        assert before != after, where
        if file_now:
            assert before == file_now, f"the file changed between runs {where}"
        if boundary is None:
            finished = worker.next("finished", context=where)
            assert (finished["state"], finished["detail"]) == ("VERIFIED", "verified"), where
            assert worker.next("reaped", context=where)["signal"] == 0, where
        else:
            blocked = worker.next("blocked", "finished", context=where)
            assert blocked["event"] == "blocked" and blocked["step"] == boundary, f"{blocked} {where}"
            worker.kill_blocked()
            reaped = worker.next("reaped", context=where)
            assert (reaped["pid"], reaped["signal"]) == (blocked["pid"], signal.SIGKILL), where

        seen = worker.command("inspected", context=where, cmd="inspect", contract=contract)
        assert (seen["precondition_fingerprint"], seen["expected_post_fingerprint"]) == (before, after), where
        # The file is whole: the old document or the new one, never anything between, and valid (XSD-valid; a
        # roster that verifies against the team CA).
        assert seen["file_fingerprint"] in (before, after), where
        assert seen["schema_valid"], where
        killed_before_rename = boundary in BEFORE_RENAME
        assert seen["file_fingerprint"] == (before if killed_before_rename else after), where
        # The contract agrees with the file.
        if boundary is None:
            assert seen["state"] == "VERIFIED" and contract not in seen["moved"], where
        else:
            assert (seen["state"], seen["detail"]) == ("RECONCILIATION", "interrupted"), where
            assert contract in seen["moved"], where
        assert seen["evidence"] == {
            "matches_before": seen["file_fingerprint"] == before,
            "matches_result": seen["file_fingerprint"] == after,
        }, where
        # Nothing is executed twice: one acquisition, and a second execute is refused without a write.
        assert seen["events"].get("EXECUTING") == 1, where
        assert seen["second_execute"] == "state", where
        assert seen["file_after_second_execute"] == seen["file_fingerprint"], where
        leftovers(seen, boundary, where)

        if seen["state"] == "RECONCILIATION":
            conclusion = "applied" if seen["evidence"]["matches_result"] else "not_applied"
            resolved = worker.command(
                "resolved", context=where, cmd="resolve", contract=contract, conclusion=conclusion
            )
            assert resolved == {
                "event": "resolved",
                "state": "VERIFIED" if conclusion == "applied" else "FAILED",
                "reserved": False,
            }, where
        file_now = seen["file_fingerprint"]
        outcomes[(boundary, "new" if file_now == after else "old")] += 1

    summary = worker.command("summary", context=f"(seed {seed}, summary)", cmd="summary")["contracts"]
    assert sorted(summary) == sorted([*worker.ready.get("contracts", []), *contracts])
    assert all(executing == 1 for _state, executing in summary.values()), f"seed {seed}: {summary}"
    assert {boundary for boundary, _ in outcomes} == {*BOUNDARIES, None}, f"seed {seed}: {outcomes}"
