"""The executor's crash-test worker: a "zygote" that sets Django up once and forks a child per command.

Run as `python -m tests.confirmations.crash_worker` from the checkout, with the environment of a data
dir of its own (`tests.live.server_env`): its database (a SQLite file there, or a scratch PostgreSQL
database), its secrets and its projects root, none of them shared with the test process. It reads one
JSON command per line on stdin and answers with JSON lines on stdout, each written whole with one
`write` so the lines of the zygote and its children never interleave:

- `setup`: register the main fixture project (in the zygote itself, before any fork).
- `run`: a child prepares a contract for one operation and executes it; at the chosen step boundary it
  reports `blocked` and waits to be killed (SIGKILL from the test); without a boundary it runs to the
  end and reports `finished`. The zygote reports `reaped` (with the signal) once the child is gone.
- `inspect`: a child plays the restarted server: `confirmations.services.recover()`, then reports the
  contract, the file, the evidence, and what a second execute of the same contract does.
- `resolve`: a child concludes a reconciliation as an operator would.
- `summary`: a child reports every contract's state and its count of EXECUTING events.

A child that nobody kills ends itself after CHILD_BOUND seconds, so a failed test leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from tests.projects.conftest import MAIN, fixture_path

CHILD_BOUND = 120
SLUG = "crash"
PROJECT_FILE = fixture_path(MAIN)


def emit(**message: Any) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def operation(kind: str, run: int) -> dict[str, Any]:
    """One operation per kind that applies whatever earlier runs left in the file (names are per run)."""
    if kind == "add_variable":
        return {
            "op": "add_variable",
            "scope": "pou/LineMain",
            "section": "localVars",
            "name": f"Crash{run}",
            "type": "INT",
        }
    if kind == "update_variable":
        return {"op": "update_variable", "id": "pou/LineMain/var/Progress", "initial_value": f"{run}.5"}
    if kind == "update_documentation":
        return {"op": "update_variable", "id": "pou/LineMain/var/Halt", "documentation": f"changed by run {run}"}
    if kind == "add_pou":
        return {"op": "add_pou", "name": f"CrashPou{run}", "pou_type": "program", "body": f"(* run {run} *)"}
    raise ValueError(f"unknown operation kind {kind}")


def target_path() -> Path:
    from projects.files import inside_root
    from projects.models import Project

    return inside_root(Project.objects.get(slug=SLUG).path)


def setup() -> None:
    from projects.models import Project
    from projects.services import do_import_project

    if not Project.objects.filter(slug=SLUG).exists():
        do_import_project(PROJECT_FILE.read_bytes(), slug=SLUG, acting_user="crash-test")
    path = target_path()
    emit(event="ready", path=str(path))


def run(command: dict[str, Any]) -> None:
    from confirmations import executor
    from projects.capability import APPLY_OPERATIONS, intent_for
    from projects.plcopen import documents

    boundary = command.get("boundary")

    def step(name: str) -> None:
        if name == boundary:
            emit(event="blocked", pid=os.getpid(), step=name)
            while True:
                signal.pause()  # until the test's SIGKILL (or CHILD_BOUND's SIGALRM)

    seen = documents.fingerprint(target_path().read_bytes())
    contract = executor.prepare(
        capability_name="project.file",
        method=APPLY_OPERATIONS,
        target={"project": SLUG},
        intent=intent_for([operation(command["op"], command["run"])]),
        idempotency_key=f"crash-run-{command['run']}",
        approval={"authority": "crash-test", "approver": "crash-test"},
        actor="crash-test",
        label=f"crash run {command['run']}",
        expected_fingerprint=seen,
    )
    emit(
        event="prepared",
        pid=os.getpid(),
        contract=str(contract.id),
        before=contract.precondition_fingerprint,
        after=contract.expected_post_fingerprint,
    )
    result = executor.execute(contract, actor="crash-test", step=step)
    emit(event="finished", pid=os.getpid(), contract=str(result.id), state=result.state, detail=result.detail)


def executing_events(contract_id: str) -> int:
    from confirmations.models import ContractEvent, ContractState

    return ContractEvent.objects.filter(contract_id=contract_id, to_state=ContractState.EXECUTING).count()


def inspect(command: dict[str, Any]) -> None:
    from confirmations import executor, services
    from confirmations.models import ContractEvent
    from forge_core.capabilities import ExecutionRefused
    from projects.plcopen import documents

    moved = [str(contract.id) for contract in services.recover(actor="restart")]
    contract = executor.load(command["contract"])
    path = target_path()
    data = path.read_bytes()
    try:
        valid = documents.validate(documents.load(data)) == []
    except documents.ProjectFormatError:
        valid = False
    state_after_recovery = contract.state
    evidence = executor.evidence(contract)
    try:
        executor.execute(contract, actor="restart")
        second_execute = "executed"
    except ExecutionRefused as refusal:
        second_execute = refusal.reason
    events = Counter(ContractEvent.objects.filter(contract=contract).values_list("to_state", flat=True))
    emit(
        event="inspected",
        moved=moved,
        state=state_after_recovery,
        detail=contract.detail,
        precondition_fingerprint=contract.precondition_fingerprint,
        expected_post_fingerprint=contract.expected_post_fingerprint,
        file_fingerprint=documents.fingerprint(data),
        file_after_second_execute=documents.fingerprint(path.read_bytes()),
        schema_valid=valid,
        evidence={k: v for k, v in evidence.items() if k != "current_fingerprint"},
        events=dict(events),
        second_execute=second_execute,
        temp_files=sorted(p.name for p in path.parent.glob(".*.tmp")),
    )


def resolve(command: dict[str, Any]) -> None:
    from confirmations import executor
    from confirmations.models import TargetReservation

    contract = executor.resolve(executor.load(command["contract"]), command["conclusion"], actor="operator")
    emit(event="resolved", state=contract.state, reserved=TargetReservation.objects.exists())


def summary(command: dict[str, Any]) -> None:
    from confirmations.models import Contract

    emit(
        event="summary",
        contracts={str(c.id): [c.state, executing_events(str(c.id))] for c in Contract.objects.all()},
    )


CHILD_COMMANDS = {"run": run, "inspect": inspect, "resolve": resolve, "summary": summary}


def child(command: dict[str, Any]) -> None:
    signal.alarm(CHILD_BOUND)
    try:
        CHILD_COMMANDS[command["cmd"]](command)
    except BaseException:
        emit(event="error", pid=os.getpid(), cmd=command["cmd"], traceback=traceback.format_exc())
        os._exit(1)
    os._exit(0)


def zygote() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")
    django.setup()
    from django.db import connections

    from confirmations import sealing
    from projects.plcopen import documents

    # Load once what every child needs, so a fork starts warm: the XSD and the contract secrets.
    documents.validate(documents.load(PROJECT_FILE.read_bytes()))
    sealing.store_id()
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        if command["cmd"] == "setup":
            setup()
            connections.close_all()
            continue
        # A forked child must open its own database connection, never share the parent's.
        connections.close_all()
        pid = os.fork()
        if pid == 0:
            child(command)
        _, status = os.waitpid(pid, 0)
        emit(
            event="reaped",
            pid=pid,
            cmd=command["cmd"],
            signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
            code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        )


if __name__ == "__main__":
    zygote()
