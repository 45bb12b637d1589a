"""The executor's crash-test worker: a "zygote" that sets Django up once and forks a child per command.

Run as `python -m tests.confirmations.crash_worker` from the checkout, with the environment of a data
dir of its own (`tests.live.server_env`): its database (a SQLite file there, or a scratch PostgreSQL
database), its secrets and its projects root, none of them shared with the test process. It reads one
JSON command per line on stdin and answers with JSON lines on stdout, each written whole with one
`write` so the lines of the zygote and its children never interleave:

- `setup`: register the main fixture project (in the zygote itself, before any fork); with `"case": "roster"`
  instead create the team CA, switch the caretaker on and publish a first signed roster (the environment then
  has FORGE_OVERRIDE_SECURITIES=1 and the caretaker's folders).
- `run`: a child prepares a contract for one operation and executes it (`"case": "roster"`: an issuance to a
  new peer or the roster signed again, through the `team.roster` capability); at the chosen step boundary it
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
from collections.abc import Callable
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


def blocking_at(boundary: str | None):
    """The executor's step callback: at `boundary`, say so and wait to be killed."""

    def step(name: str) -> None:
        if name == boundary:
            emit(event="blocked", pid=os.getpid(), step=name)
            while True:
                signal.pause()  # until the test's SIGKILL (or CHILD_BOUND's SIGALRM)

    return step


def run(command: dict[str, Any]) -> None:
    from confirmations import executor
    from projects.capability import APPLY_OPERATIONS, intent_for
    from projects.plcopen import documents

    step = blocking_at(command.get("boundary"))
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


def inspect_after_restart(command: dict[str, Any], read: Callable[[], tuple[str, bool]], **extra: Any) -> None:
    """Recover as a restarted server would, then report the contract, its target as `read` sees it (fingerprint
    and whether it is whole) before and after an attempt to execute it a second time, and its events."""
    from confirmations import executor, services
    from confirmations.models import ContractEvent
    from forge_core.capabilities import ExecutionRefused

    moved = [str(contract.id) for contract in services.recover(actor="restart")]
    contract = executor.load(command["contract"])
    fingerprint, whole = read()
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
        file_fingerprint=fingerprint,
        file_after_second_execute=read()[0],
        schema_valid=whole,
        evidence={k: v for k, v in evidence.items() if k != "current_fingerprint"},
        events=dict(events),
        second_execute=second_execute,
        **extra,
    )


def inspect(command: dict[str, Any]) -> None:
    from projects.plcopen import documents

    path = target_path()

    def read() -> tuple[str, bool]:
        data = path.read_bytes()
        try:
            valid = documents.validate(documents.load(data)) == []
        except documents.ProjectFormatError:
            valid = False
        return documents.fingerprint(data), valid

    temp_files = sorted(p.name for p in path.parent.glob(".*.tmp"))
    inspect_after_restart(command, read, temp_files=temp_files)


# --- the team roster (capability team.roster) ------------------------------------------------------------

CARETAKER = "crash-caretaker"


def caretaker_user():
    from django.contrib.auth.models import Permission, User

    user, _ = User.objects.get_or_create(username=CARETAKER)
    user.user_permissions.add(Permission.objects.get(codename="act_as_caretaker"))
    return User.objects.get(pk=user.pk)


def roster_folder() -> Path:
    from django.conf import settings

    return settings.FORGE_ROSTER_DIR


def setup_roster() -> None:
    from django.conf import settings

    from caretaker import activation, services
    from caretaker.models import ACCEPTANCE_SENTENCE
    from confirmations.models import Contract

    user = caretaker_user()
    if not (settings.FORGE_CA_DIR / "ca.crt").exists():
        services.do_create_ca("ed25519", actor=CARETAKER)
    activation.do_activate(user, ACCEPTANCE_SENTENCE)
    if not activation.is_caretaker():
        raise RuntimeError("the crash worker's caretaker is not active: " + " ".join(activation.missing()))
    first = services.carry_out_now(services.propose_signing(requested_by=CARETAKER), user=user)
    if not first.verified:
        raise RuntimeError(f"the first roster was not published: {first.detail}")
    emit(
        event="ready",
        path=str(roster_folder()),
        generations=published_roster()["generations"],
        contracts=[str(contract.id) for contract in Contract.objects.all()],  # the first roster's
    )


def roster_proposal(kind: str, run: int):
    """One roster change per kind, built on whatever earlier runs left published (a new peer per run)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from caretaker import services

    if kind == "sign":
        return services.propose_signing(requested_by=CARETAKER)
    if kind != "issue":
        raise ValueError(f"unknown roster operation kind {kind}")
    name = f"crash{run}@team"
    services.do_create_peer(name, role="author", actor=CARETAKER)
    key = ed25519.Ed25519PrivateKey.generate()
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)]))
        .sign(key, None)
        .public_bytes(serialization.Encoding.PEM)
        .decode()
    )
    return services.propose_issuance(csr, peer_name=name, requested_by=CARETAKER)


def run_roster(command: dict[str, Any]) -> None:
    from caretaker.capability import RosterCapability
    from confirmations import executor

    step = blocking_at(command.get("boundary"))
    proposal = roster_proposal(command["op"], command["run"])
    contract = executor.prepare(
        capability_name=RosterCapability.name,
        method=proposal.method,
        target=proposal.target,
        intent=proposal.intent,
        idempotency_key=f"crash-roster-run-{command['run']}",
        approval={"authority": "crash-test", "approver": CARETAKER},
        actor=CARETAKER,
        label=f"crash run {command['run']}",
        expected_fingerprint=proposal.base_fingerprint,
        expected_result=proposal.result_digest,
    )
    emit(
        event="prepared",
        pid=os.getpid(),
        contract=str(contract.id),
        before=contract.precondition_fingerprint,
        after=contract.expected_post_fingerprint,
    )
    result = executor.execute(contract, actor=CARETAKER, step=step)
    emit(event="finished", pid=os.getpid(), contract=str(result.id), state=result.state, detail=result.detail)


def published_roster() -> dict[str, Any]:
    """The roster the names people use lead to, whether it verifies, and the generation folders beside it."""
    from datetime import UTC, datetime

    from caretaker import roster, store, trust

    folder = roster_folder()
    published = store.read_published(folder)
    through_links = [(folder / name).read_bytes() for name in store.FILES]
    try:
        roster.verify_roster(
            published.peers_toml,
            published.revoked_toml,
            trusted=trust.trusted_certificates(),
            now=datetime.now(UTC),
        )
        verifies = True
    except roster.RosterRefused:
        verifies = False
    generations = folder / store.GENERATIONS
    return {
        "fingerprint": store.fingerprint(published.bundle()),
        "verifies": verifies and through_links == list(published.files().values()),
        "current": os.readlink(folder / store.CURRENT).rsplit("/", 1)[-1],
        "generations": sorted(p.name for p in generations.iterdir() if not p.name.startswith(".")),
        "partial": sorted(p.name for p in generations.iterdir() if p.name.startswith(".")),
    }


def inspect_roster(command: dict[str, Any]) -> None:
    found = published_roster()

    def read() -> tuple[str, bool]:
        now = published_roster()
        return now["fingerprint"], now["verifies"]

    inspect_after_restart(
        command, read, current=found["current"], generations=found["generations"], temp_files=found["partial"]
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
ROSTER_COMMANDS = {**CHILD_COMMANDS, "run": run_roster, "inspect": inspect_roster}


def child(command: dict[str, Any]) -> None:
    signal.alarm(CHILD_BOUND)
    commands = ROSTER_COMMANDS if command.get("case") == "roster" else CHILD_COMMANDS
    try:
        commands[command["cmd"]](command)
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
            if command.get("case") == "roster":
                setup_roster()
            else:
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
