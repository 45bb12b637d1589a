"""The operator's side of the working draft (DESIGN sections 8.1 and 14): what a reviewer reads, and the
two decisions on it, accept all and discard.

Accepting needs the draft (`projects.drafts`) and the executor (`confirmations.executor`), which may not
import each other, so it is orchestrated here. `do_accept_draft` checks the operator's `approve_change`
permission and that the draft is still the revision the operator reviewed, takes the draft's acceptance
intent and has the executor carry it out under one recovery contract (one atomic file replace); the
executor settles the accepted groups inside its VERIFIED transaction, with the DRAFT_ACCEPTED audit row.
`do_discard_draft` makes the same checks around `projects.drafts.do_discard_draft`. A refusal changes
nothing and is audited with the operator and its code. Open console pages and MCP sessions hear of either
decision through the draft's events (`projects.drafts` records them and tells the console).

The console (`console.draft_screens`) and the operator REST API (`console.draft_api`) call these and
`review`; neither touches the draft or the executor itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.models import EventKind
from audit.services import record
from confirmations import executor, sealing
from confirmations.models import Contract, ContractState
from forge_core.errors import Refusal
from projects import drafts, plcopen, review_diff
from projects.capability import ACCEPT_DRAFT
from projects.models import LIVE_GROUP_STATES, ChangeGroup, DraftEvent, Project, StagedOperation, WorkingDraft
from projects.preview import unified_diff
from projects.rights import can_approve, can_view, visible_projects
from projects.services import ProjectUnavailable

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

CAPABILITY = "project.file"
ATTEMPTS = 5
"""How often one reviewed revision may be tried: a retry after a refusal that wrote nothing (the project
busy with another contract, a failed write) is a new decision, so it gets an idempotency key of its own."""

Result = TypeVar("Result")


class DraftDecisionRefused(Refusal):
    """An accept or discard refused with nothing written: `reason` is a slug, the code FORGE_ERR_ + it;
    `contract` the contract the attempt left, when there is one."""

    def __init__(self, reason: str, message: str, *, status: int = 409, contract: Contract | None = None) -> None:
        super().__init__(f"FORGE_ERR_{reason.upper()}", message, status=status)
        self.reason = reason
        self.contract = contract


# --- reading -------------------------------------------------------------------------------------------


def reviewable(user: User | AnonymousUser, slug: str) -> Project:
    """The project with this slug, if `user` may view it; "not found" alike for one they may not see."""
    project = Project.objects.filter(slug=slug).first()
    if project is None or not can_view(user, project):
        raise DraftDecisionRefused("not_found", f"There is no project {slug!r} you may see.", status=404)
    return project


def _live_count(model: type[StagedOperation] | type[ChangeGroup], **live: Any) -> Coalesce:
    """How many rows of `model` a draft has that are part of it (per draft, as a subquery: no join fan-out)."""
    counted = model.objects.filter(draft=OuterRef("pk"), **live).order_by().values("draft")
    return Coalesce(Subquery(counted.annotate(n=Count("pk")).values("n"), output_field=IntegerField()), 0)


class LiveCounts(TypedDict):
    """What `waiting` annotates each draft with: its live change groups and their operations."""

    group_count: int
    operation_count: int


def waiting(user: User | AnonymousUser) -> QuerySet[WithAnnotations[WorkingDraft, LiveCounts]]:
    """The drafts of projects `user` may view that hold operations of live change groups (a reviewer's
    work), with their live `group_count` and `operation_count`, in project order."""
    return (
        WorkingDraft.objects.filter(project__in=visible_projects(user))
        .annotate(
            operation_count=_live_count(StagedOperation, group__state__in=LIVE_GROUP_STATES),
            group_count=_live_count(ChangeGroup, state__in=LIVE_GROUP_STATES),
        )
        .filter(operation_count__gt=0)
        .select_related("project")
        .order_by("project__slug")
    )


@dataclass(frozen=True)
class DraftRow:
    """A draft waiting for review, as the list shows it (the draft read now, replayed if its file moved)."""

    project: Project
    accepted_revision: int
    working_revision: int
    groups: int
    operations: int
    conflicts: int
    changed: bool
    updated_at: datetime
    unavailable: str = ""  # why the project's file cannot be read now, if it cannot


def rows(found: list[WithAnnotations[WorkingDraft, LiveCounts]]) -> list[DraftRow]:
    """The list's rows for drafts from `waiting`, each read now (replayed first if its file moved)."""
    listed = []
    for draft in found:
        groups, operations = draft.group_count, draft.operation_count
        try:
            materialized = drafts.current(draft.project)
        except ProjectUnavailable as exc:
            listed.append(
                DraftRow(
                    project=draft.project,
                    accepted_revision=draft.base_revision,
                    working_revision=draft.working_revision,
                    conflicts=0,
                    changed=False,
                    updated_at=draft.updated_at,
                    unavailable=str(exc),
                    groups=groups,
                    operations=operations,
                )
            )
            continue
        now = materialized.draft
        listed.append(
            DraftRow(
                project=draft.project,
                accepted_revision=now.base_revision,
                working_revision=now.working_revision,
                conflicts=len(materialized.conflicts),
                changed=materialized.changed,
                updated_at=now.updated_at,
                groups=groups,
                operations=operations,
            )
        )
    return listed


@dataclass(frozen=True)
class GroupReview:
    """One live change group as a reviewer reads it: who, why, how much, and what stands against it."""

    group_id: str
    title: str
    rationale: str
    author: str
    client_label: str
    session: str
    state: str
    operations: int
    findings: list[dict[str, str]]  # conflicts first, then problems, then advisories
    acknowledged_findings: list[dict[str, str]]
    created_at: datetime


@dataclass(frozen=True)
class DraftReview:
    project: Project
    accepted_revision: int
    working_revision: int
    changed: bool
    conflicts: int
    operations: int
    diff: str
    diff_truncated: bool
    change_view: dict[str, Any]  # review_diff.change_view: POU by POU, the body's lines and the variable table
    described: dict[str, Any]  # drafts.describe: added, removed, changed (with fields), truncated
    groups: list[GroupReview]
    updated_at: datetime
    draft_digest: str  # the SHA-256 of the file the draft would write: what accepting binds


def _finding_order(finding: dict[str, str]) -> tuple[bool, bool]:
    return finding["code"] != "conflict", finding["severity"] != "problem"


def review(project: Project) -> DraftReview:
    """The draft against the accepted file: the diff of the file it would write, the elements it adds,
    changes and removes, and each live group with its provenance and findings. ProjectUnavailable when the
    project's file cannot be read."""
    materialized = drafts.current(project)
    draft = materialized.draft
    accepted = plcopen.serialize(materialized.accepted)
    written = plcopen.serialize(materialized.document) if materialized.changed else accepted
    diff, cut = (
        unified_diff(accepted, written, materialized.accepted.encoding, project.path)
        if materialized.changed
        else ("", False)
    )
    live = list(draft.groups.filter(state__in=LIVE_GROUP_STATES).select_related("principal").order_by("created_at"))
    groups = [
        GroupReview(
            **shown,
            findings=sorted(drafts.group_findings(materialized, group), key=_finding_order),
            created_at=group.created_at,
        )
        for group, shown in zip(live, drafts.provenance(live), strict=True)
    ]
    return DraftReview(
        project=project,
        accepted_revision=draft.base_revision,
        working_revision=draft.working_revision,
        changed=materialized.changed,
        conflicts=len(materialized.conflicts),
        operations=sum(group.operations for group in groups),
        diff=diff,
        diff_truncated=cut,
        change_view=review_diff.change_view(materialized.accepted, materialized.document),
        described=drafts.describe(project),
        groups=groups,
        updated_at=draft.updated_at,
        draft_digest=plcopen.fingerprint(written),
    )


# --- deciding ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    project: str
    contract: Contract
    accepted_revision: int
    working_revision: int  # the draft's, after the accepted groups left it
    groups: int
    operations: int
    skipped_conflicts: int


@dataclass(frozen=True)
class Discarded:
    project: str
    groups: int
    working_revision: int


def do_accept_draft(
    project: Project, *, acting_user: User | AnonymousUser, working_revision: int, draft_digest: str
) -> Accepted:
    """Accept the whole working draft the operator reviewed at `working_revision`, whose file had the SHA-256
    `draft_digest` (`DraftReview.draft_digest`): one contract writes exactly those bytes to the project file
    and the groups become accepted. DraftDecisionRefused (audited, nothing written) without approve_change,
    when the draft moved since the review, when its operations no longer produce the reviewed bytes (an
    operation edited outside Forge: FORGE_ERR_INTEGRITY), when it changes nothing, or when the executor
    refuses (the file changed, another contract holds it, ...)."""

    def accept(project: Project, user: User | AnonymousUser, reviewed: int) -> Accepted:
        return _accept(project, user, reviewed, draft_digest)

    return _decided(
        EventKind.DRAFT_ACCEPTED, project, acting_user, working_revision, accept, reviewed_digest=draft_digest
    )


def do_discard_draft(project: Project, *, acting_user: User | AnonymousUser, working_revision: int) -> Discarded:
    """Discard every live change group of the draft the operator reviewed at `working_revision`.
    DraftDecisionRefused (audited, nothing changed) without approve_change or when the draft moved since."""
    return _decided(EventKind.DRAFT_DISCARDED, project, acting_user, working_revision, _discard)


def _decided(
    kind: str,
    project: Project,
    user: User | AnonymousUser,
    reviewed: int,
    decide: Callable[[Project, User | AnonymousUser, int], Result],
    *,
    reviewed_digest: str = "",
) -> Result:
    try:
        if not can_approve(user, project):
            raise DraftDecisionRefused(
                "permission_denied",
                f"You may not accept or discard the working draft of {project.slug}: that needs the approve_change "
                "permission on the project. Ask an administrator.",
                status=403,
            )
        return decide(project, user, reviewed)
    except DraftDecisionRefused as refusal:
        arguments: dict[str, Any] = {"reviewed_working_revision": reviewed}
        if reviewed_digest:
            arguments["reviewed_draft_digest"] = reviewed_digest
        if refusal.contract is not None:
            arguments |= {"contract": str(refusal.contract.pk), "memorable_id": refusal.contract.memorable_id}
        with transaction.atomic():
            record(
                kind,
                arguments=arguments,
                outcome=f"refused: {refusal.reason}",
                called_by=user.get_username(),
                project=project.slug,
            )
        raise


def _still_reviewed(project: Project, reviewed: int) -> drafts.Materialized:
    """The draft as it is now (replayed first if the accepted file moved), once it is the revision the
    operator reviewed; a refusal that says what moved otherwise."""
    try:
        materialized = drafts.current(project)
    except ProjectUnavailable as exc:
        raise DraftDecisionRefused("project_unavailable", f"{_sentence(str(exc))} Nothing was written.") from None
    _require_revision(materialized.draft, reviewed)
    return materialized


def _require_revision(draft: WorkingDraft, reviewed: int) -> None:
    if draft.working_revision == reviewed:
        return
    # What moved it, when it says more than a number: the accepted file, or another operator's decision.
    moves = dict(
        DraftEvent.objects.filter(draft=draft, revision__gt=reviewed, kind__in=("replayed", "accepted", "discarded"))
        .order_by("revision", "id")
        .values_list("kind", "actor")
    )
    slug = draft.project.slug
    if "replayed" in moves:
        raise DraftDecisionRefused(
            "target_drift",
            f"The accepted file of {slug} changed after you reviewed its draft: the draft was replayed on accepted "
            f"revision {draft.base_revision} as working revision {draft.working_revision}, and nothing was written. "
            "Review it again.",
        )
    decided = next((f"{moves[kind] or 'someone'} {kind} it" for kind in ("accepted", "discarded") if kind in moves), "")
    raise DraftDecisionRefused(
        "stale_revision",
        f"The working draft of {slug} moved from revision {reviewed}, which you reviewed, to "
        f"{draft.working_revision}{f' ({decided})' if decided else ''}; nothing was done. Review it again.",
    )


def _working_revision(draft: WorkingDraft) -> int:
    return WorkingDraft.objects.filter(pk=draft.pk).values_list("working_revision", flat=True).get()


def _accept(project: Project, user: User | AnonymousUser, reviewed: int, reviewed_digest: str) -> Accepted:
    _still_reviewed(project, reviewed)
    try:
        materialized, intent = drafts.acceptance(project)
    except drafts.DraftRefused:
        raise DraftDecisionRefused(
            "nothing_to_accept",
            f"The working draft of {project.slug} changes nothing (every operation in it conflicts with the accepted "
            "file, or there is none); there is nothing to accept. Discard it instead.",
        ) from None
    draft = materialized.draft
    _require_revision(draft, reviewed)  # the intent is taken at the revision reviewed, not one after it
    actor = user.get_username()
    approval = {
        "authority": "forge-console",
        "approver": actor,
        "draft_working_revision": draft.working_revision,
        "draft_digest": reviewed_digest,
        "decided_at": timezone.now().isoformat(),
    }
    contract = None
    try:
        contract = _prepare(project, draft, intent, approval, actor, reviewed_digest)
        contract = executor.execute(contract, actor=actor)
    except executor.ExecutionRefused as refused:
        raise _executor_refusal(project, refused.reason, refused.clause, contract) from None
    except sealing.ContractTampered as exc:
        raise DraftDecisionRefused(
            "contract_tampered",
            f"{_sentence(str(exc))} Nothing more was done with it: check the project file by hand.",
            contract=contract,
        ) from None
    if contract.state != ContractState.VERIFIED:
        raise _executor_refusal(project, contract.detail or contract.state, "", contract)
    settled: dict[str, Any] = getattr(contract, "settled", {})
    return Accepted(
        project=project.slug,
        contract=contract,
        accepted_revision=settled.get("accepted_revision", 0),
        working_revision=_working_revision(draft),
        groups=len(intent["groups"]),
        operations=len(intent["operations"]),
        skipped_conflicts=intent["skipped_conflicts"],
    )


def _prepare(
    project: Project,
    draft: WorkingDraft,
    intent: dict[str, Any],
    approval: dict[str, Any],
    actor: str,
    reviewed_digest: str,
) -> Contract:
    """The PREPARED contract, whose result the executor has checked to be the reviewed bytes; a key already
    used for this revision (an earlier attempt that wrote nothing, or one running now, which the target's
    reservation then stops) gets the next attempt's key."""
    key = f"draft:{draft.pk}:{draft.working_revision}"
    for attempt in range(ATTEMPTS):
        try:
            return executor.prepare(
                capability_name=CAPABILITY,
                method=ACCEPT_DRAFT,
                target={"project": project.slug},
                intent=intent,
                idempotency_key=key if attempt == 0 else f"{key}:{attempt}",
                approval=approval,
                actor=actor,
                label=f"accept working draft of {project.slug}",
                expected_fingerprint=draft.base_fingerprint,
                expected_result=reviewed_digest,
            )
        except executor.ExecutionRefused as refused:
            if refused.reason != "duplicate":
                raise
    raise DraftDecisionRefused(
        "too_many_attempts",
        f"Revision {draft.working_revision} of this draft was tried {ATTEMPTS} times already; nothing was written. "
        "Look at the project's recent contracts for why, then review the draft again once it moved.",
    )


# The executor's refusal reasons (or a finished contract's detail) -> the operator's code and sentence.
EXECUTOR_REFUSALS: dict[str, tuple[str, str]] = {
    "target_drift": (
        "target_drift",
        "The accepted file changed after you reviewed the draft, so nothing was written. Review the draft "
        "again: it is replayed on the file as it is now.",
    ),
    "target_busy": (
        "target_busy",
        "Another contract holds this project file ({detail}); nothing was written. Accept again once it has "
        "finished, or resolve its reconciliation on the Contracts screen first.",
    ),
    "target_missing": (
        "target_missing",
        "The project file cannot be found or read ({detail}); nothing was written. Restore it, then review the "
        "draft again.",
    ),
    "integrity": (
        "integrity",
        "The draft's operations no longer produce the file you reviewed (they were changed outside Forge after "
        "the review), so nothing was written. Review the draft again, and compare the database with a backup.",
    ),
    "reconciliation": (
        "reconciliation",
        "Whether the draft was written could not be proven, so contract {contract} awaits reconciliation. Open it "
        "on the Contracts screen, see what the file holds now, and resolve it; the draft was left as it was.",
    ),
}
NOT_CARRIED_OUT = (
    "not_carried_out",
    "The draft could not be written ({detail}); nothing was changed. Review the draft again and accept it anew.",
)


def _executor_refusal(project: Project, reason: str, message: str, contract: Contract | None) -> DraftDecisionRefused:
    if contract is not None and contract.state == ContractState.RECONCILIATION:
        reason = "reconciliation"
    code, text = EXECUTOR_REFUSALS.get(reason, NOT_CARRIED_OUT)
    memorable = contract.memorable_id if contract is not None else ""
    detail = message or reason
    return DraftDecisionRefused(code, text.format(detail=detail, contract=memorable), contract=contract)


def _discard(project: Project, user: User | AnonymousUser, reviewed: int) -> Discarded:
    draft = _still_reviewed(project, reviewed).draft
    try:
        groups = drafts.do_discard_draft(project, acting_user=user.get_username(), expected_revision=reviewed)
    except drafts.DraftRefused as refused:
        if refused.code == "FORGE_ERR_STALE_REVISION":  # moved between the check above and the lock
            _require_revision(drafts.current(project).draft, reviewed)
        raise DraftDecisionRefused(
            "nothing_to_discard",
            f"The working draft of {project.slug} has no change groups; there is nothing to discard.",
        ) from None
    return Discarded(project=project.slug, groups=groups, working_revision=_working_revision(draft))


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else text
