"""Shared helpers of the confirmations tests: a contract prepared against the main fixture project, the record a
test compares before and after a refused step, a contract left in flight by some process, and small
readers of the stored state (event states, the target reservation, leftover temporary files)."""

from __future__ import annotations

import socket
import subprocess
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from audit.models import AuditEvent, EventKind
from confirmations import executor
from confirmations.models import Contract, ContractEvent, ContractState, PendingConfirmation, TargetReservation
from confirmations.services import do_create_confirmation
from forge_core.capabilities import ExecutionRefused
from projects.capability import APPLY_OPERATIONS, apply_intent, intent_for
from projects.models import Project
from projects.plcopen import documents
from projects.preview import preview_change

ACTOR = "olivia"
NEW_VARIABLE = "ForgeNewCounter"
STAMP = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)


def add_variable(name: str = NEW_VARIABLE, *, scope: str = "pou/LineMain") -> dict[str, Any]:
    """One add_variable operation: a local INT of a POU."""
    return {"op": "add_variable", "scope": scope, "section": "localVars", "name": name, "type": "INT"}


def add_variable_intent(name: str = NEW_VARIABLE) -> dict[str, Any]:
    return intent_for([add_variable(name)], STAMP)


def prepare(
    project: Project,
    *,
    key: str | None = None,
    intent: dict[str, Any] | None = None,
    expected_fingerprint: str = "",
    actor: str = ACTOR,
) -> Contract:
    """A contract prepared to add a variable to the project (a fresh idempotency key unless `key` is given)."""
    return executor.prepare(
        capability_name="project.file",
        method="apply_operations",
        target={"project": project.slug},
        intent=intent if intent is not None else add_variable_intent(),
        idempotency_key=key if key is not None else str(uuid.uuid4()),
        approval={"authority": "tests", "approver": actor},
        actor=actor,
        label="tests",
        expected_fingerprint=expected_fingerprint,
    )


def previewed_result(project: Project, intent: dict[str, Any]) -> str:
    """The fingerprint of the bytes a write's preview shows: the intent applied to the project file as it is
    ("" when it does not apply, as a write tool would then propose nothing)."""
    try:
        return documents.fingerprint(apply_intent(project_file(project).read_bytes(), intent))
    except ExecutionRefused:
        return ""


def project_file(project: Project, root: Path | None = None) -> Path:
    return Path(root if root is not None else settings.FORGE_PROJECTS_ROOT).resolve() / project.path


@dataclass(frozen=True)
class Stored:
    """Everything a refused step must leave alone."""

    state: str
    version: int
    detail: str
    mac: str
    events: tuple[tuple[int, str, str, str], ...]
    reservation: Any  # the id of the contract holding the target, or None
    file: bytes | None


def stored(contract: Contract, path: Path | None = None) -> Stored:
    """The contract as stored (row, events, who holds its target) and, given its path, the target file."""
    row = Contract.objects.get(pk=contract.pk)
    events = ContractEvent.objects.filter(contract_id=contract.pk).order_by("version")
    return Stored(
        state=row.state,
        version=row.version,
        detail=row.detail,
        mac=row.mac,
        events=tuple(events.values_list("version", "from_state", "to_state", "mac")),
        reservation=reservation_holder(row),
        file=path.read_bytes() if path is not None else None,
    )


def event_states(contract: Contract) -> list[str]:
    return list(
        ContractEvent.objects.filter(contract_id=contract.pk).order_by("version").values_list("to_state", flat=True)
    )


def contract_audit_rows() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION).order_by("seq"))


def reservation_holder(contract: Contract) -> Any:
    """The id of the contract holding this contract's target, or None."""
    return (
        TargetReservation.objects.filter(target_digest=contract.target_digest)
        .values_list("contract_id", flat=True)
        .first()
    )


def finished_pid() -> int:
    """The pid of a process of this host that has ended."""
    process = subprocess.Popen(["true"])
    process.wait(timeout=10)
    return process.pid


def left_in_flight_by(contract: Contract, pid: int) -> Contract:
    """A PREPARED contract moved to EXECUTING by the process `pid` of this host, which then went quiet."""
    return executor.transition(
        contract,
        ContractState.EXECUTING,
        actor=ACTOR,
        reason="acquired",
        changes={"executor": f"{socket.gethostname()}:{pid}"},
    )


def schema_errors(data: bytes) -> list[documents.SchemaError]:
    return documents.validate(documents.load(data))


def temp_files(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


def propose_write(
    member: Any, project: Project, ops: list[dict[str, Any]], *, tool: str, question: str, label: str
) -> PendingConfirmation:
    """What a write tool does: preview the operations on the file as it is (the preview sealed with the
    confirmation), and suspend them for an operator's decision; `member`'s client asks."""
    current = project_file(project).read_bytes()
    intent = intent_for(ops, STAMP)
    preview = preview_change(current, intent, name=project.path)
    return do_create_confirmation(
        tool=tool,
        arguments=ops[0] if len(ops) == 1 else {"operations": ops},
        question=question,
        preview={**preview.content, "result": {"project": project.slug}},
        principal=member.user,
        session_id="session-1",
        client_label=member.token.label,
        project=project.slug,
        capability="project.file",
        method=APPLY_OPERATIONS,
        target={"project": project.slug},
        intent=intent,
        base_fingerprint=documents.fingerprint(current),
        result_digest=documents.fingerprint(preview.result),
        label=label,
    )
