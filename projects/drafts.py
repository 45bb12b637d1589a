"""The working draft (DESIGN section 8.1): change groups staged over the accepted project, reviewed as a whole.

A project has one `WorkingDraft`: the accepted file it builds on plus the ordered operations of its live
change groups. The draft's document is materialized by replaying those operations on the accepted
document, and cached per process by (base fingerprint, working revision), so a stage call applies only
its own batch to the cached draft. When the accepted file moves under the draft (a direct write, an
external edit), the draft is replayed on the new base: an operation that no longer applies is kept, and
reported as a `conflict` finding on its group, never dropped.

Every modifying function takes the `expected_revision` its caller last saw and refuses with the current
one when it moved; it locks the draft row first, so of two concurrent stage calls one wins and the other
is told the new revision. Only the group's own session may change a group. Accepting is not here: it is
a person's decision, carried out by the executor (`projects.capability`, method `accept_draft`).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from audit.models import EventKind
from audit.services import record
from audit.together import audit_row
from forge_core.errors import Refusal
from forge_core.live import notify_console
from projects import findings, operations, review_diff
from projects.models import (
    LIVE_GROUP_STATES,
    ChangeGroup,
    DraftEvent,
    GroupState,
    Project,
    StagedOperation,
    WorkingDraft,
)
from projects.plcopen import documents, elements
from projects.plcopen.paging import DEFAULT_LIMIT, check_limit, decode_cursor, encode_cursor, position_from, query_key
from projects.plcopen.tc6 import flag
from projects.recent import RecentValues
from projects.services import Opened, current_document

CACHE_SIZE = 8
EVENTS_LIMIT = 200
# The most one page of draft.describe (element lines) or change_group.describe (operations) holds.
DESCRIBE_LIMIT = 200


class DraftRefused(Refusal):
    """A draft call refused with nothing stored: its FORGE_ERR_* code, and in `details` what the client needs
    (the current working revision, the group, the findings)."""


@dataclass
class Materialized:
    """The draft's document at one working revision, and the operations that no longer apply."""

    draft: WorkingDraft
    accepted: documents.ProjectDocument
    document: documents.ProjectDocument
    conflicts: dict[int, str] = field(default_factory=dict)  # StagedOperation pk -> why it does not apply

    def __post_init__(self) -> None:
        # A snapshot of the draft row as it was at this revision: the caller's row object moves on.
        self.draft = copy.copy(self.draft)

    @property
    def changed(self) -> bool:
        return self.document is not self.accepted


_cache: RecentValues[tuple[int, str, int, str], Materialized] = RecentValues(CACHE_SIZE)


def clear_cache() -> None:
    """Forget every materialized draft, as a restart does (tests and benchmarks)."""
    _cache.clear()


def _key(draft: WorkingDraft) -> tuple[int, str, int, str]:
    # The revision's update time too: a revision number can come back after a rolled-back transaction
    # (the tool call's audit row failed, say) with other contents; its time does not.
    return (draft.pk, draft.base_fingerprint, draft.working_revision, draft.updated_at.isoformat())


# --- opening and materializing ------------------------------------------------------------------------


def draft_of(project: Project) -> tuple[WorkingDraft, Opened]:
    """The project's draft on its current accepted file (created empty, or replayed when the file moved)."""
    opened = current_document(project)
    project = opened.project
    draft, _ = WorkingDraft.objects.get_or_create(
        project=project,
        defaults={"base_revision": project.accepted_revision, "base_fingerprint": project.fingerprint},
    )
    if draft.base_fingerprint != project.fingerprint:
        draft = _rebase(draft, project)
    return draft, opened


def _rebase(draft: WorkingDraft, project: Project) -> WorkingDraft:
    """The accepted file moved: replay the draft on it (a new working revision), reporting conflicts."""
    with transaction.atomic():
        locked = WorkingDraft.objects.select_for_update().get(pk=draft.pk)
        if locked.base_fingerprint == project.fingerprint:
            return locked
        previous = locked.base_revision
        locked.base_revision = project.accepted_revision
        locked.base_fingerprint = project.fingerprint
        _bump(locked)
        materialized = materialize(locked, current_document(project).document)
        _event(
            locked,
            "replayed",
            summary={
                "from_accepted_revision": previous,
                "to_accepted_revision": project.accepted_revision,
                "conflicts": len(materialized.conflicts),
            },
        )
    return locked


def _live_operations(draft: WorkingDraft) -> list[StagedOperation]:
    return list(StagedOperation.objects.filter(draft=draft, group__state__in=LIVE_GROUP_STATES).order_by("position"))


def materialize(draft: WorkingDraft, accepted: documents.ProjectDocument) -> Materialized:
    """The draft's document: every live operation replayed in order on the accepted document; one that
    no longer applies is skipped and recorded as a conflict (cached per base and working revision)."""
    found = _cache.get(_key(draft))
    if found is not None:
        return found
    materialized = _replay(draft, accepted, _live_operations(draft))
    _cache.put(_key(draft), materialized)
    return materialized


def _replay(draft: WorkingDraft, accepted: documents.ProjectDocument, staged: list[StagedOperation]) -> Materialized:
    """Apply operations in order with the draft's stamp, skipping (and recording) those that do not apply.
    The common case is one `apply` of them all; a refusal costs one more for the operations before it."""
    materialized = Materialized(draft=draft, accepted=accepted, document=accepted)
    pending = staged
    while pending:
        try:
            result = operations.apply(materialized.document, [op.operation for op in pending], now=draft.stamp)
        except operations.OperationRefused as refused:
            if refused.index is None:  # the accepted file itself is not valid: nothing applies
                materialized.conflicts.update({op.pk: refused.reason for op in pending})
                break
            materialized.conflicts[pending[refused.index].pk] = refused.reason
            applied = [op.operation for op in pending[: refused.index]]
            if applied:
                materialized.document = operations.apply(materialized.document, applied, now=draft.stamp).doc
            pending = pending[refused.index + 1 :]
            continue
        materialized.document = result.doc
        break
    return materialized


def current(project: Project) -> Materialized:
    """The project's draft as it is now."""
    draft, opened = draft_of(project)
    return materialize(draft, opened.document)


# --- findings -------------------------------------------------------------------------------------------


def _touches(element_id: str, changed: Sequence[str]) -> bool:
    key = element_id.lower()
    return any(key == c or key.startswith(c + "/") or c.startswith(key + "/") for c in (c.lower() for c in changed))


def findings_for(document: documents.ProjectDocument, changed: Sequence[str]) -> list[dict[str, str]]:
    """Findings of a document about the elements some operations changed (and the schema's, if any)."""
    # Only the POUs the operations touched are checked: every other POU's findings are about elements
    # outside these, and checking each POU's ST again is most of a whole-project check.
    pous = {c.split("/")[1] for c in changed if c.lower().startswith("pou/")}
    found = findings.document_findings(document, pous=pous)
    return [f for f in found if f["code"] == "schema_invalid" or _touches(f["element_id"], changed)]


def group_findings(materialized: Materialized, group: ChangeGroup) -> list[dict[str, str]]:
    """Findings against a group: on the elements its operations changed, and a `conflict` for each of its
    operations that no longer applies to the accepted project."""
    return findings_of_operations(materialized, list(group.operations.order_by("position")))


def findings_of_operations(
    materialized: Materialized,
    staged: Sequence[StagedOperation],
    *,
    first_index: int = 0,
    first_batch_seen: bool = False,
) -> list[dict[str, str]]:
    """Findings on the elements these operations (of one group, in order, the first being the group's
    operation `first_index`) changed, and a `conflict` for each of them that no longer applies.
    `first_batch_seen`: the first operation's batch began before it (on an earlier page), whose findings
    were answered there."""
    # Every operation of a batch carries the batch's changed ids; its findings belong to its first one.
    batches = {op.batch_revision for op in staged}
    if first_batch_seen and staged:
        batches.discard(staged[0].batch_revision)
    changed = sorted({element for op in staged if op.batch_revision in batches for element in op.changed_ids})
    found = findings_for(materialized.document, changed) if changed else []
    for index, op in enumerate(staged, start=first_index):
        if op.pk in materialized.conflicts:
            found.insert(
                0,
                {
                    "code": "conflict",
                    "severity": "problem",
                    "element_id": ",".join(op.changed_ids),
                    "message": f"operation {index} ({op.operation.get('op')}) of this group no longer applies to "
                    f"the accepted project: {materialized.conflicts[op.pk]}",
                },
            )
    return found


def _problems(found: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    return [f for f in found if f["severity"] == "problem"]


# --- modifying calls ------------------------------------------------------------------------------------


def _locked_draft(project: Project, expected_revision: int) -> tuple[WorkingDraft, Materialized]:
    """The draft row locked for a change, once the caller's revision is the current one."""
    draft, opened = draft_of(project)
    locked = WorkingDraft.objects.select_for_update().get(pk=draft.pk)
    if locked.working_revision != expected_revision:
        raise DraftRefused(
            "FORGE_ERR_STALE_REVISION",
            f"The working draft moved to revision {locked.working_revision} since you read it at "
            f"{expected_revision}; nothing was stored. Read draft.events (after your revision) or draft.status, "
            "check your change still makes sense, and call again with the current revision.",
            current_working_revision=locked.working_revision,
        )
    return locked, materialize(locked, opened.document)


def _bump(draft: WorkingDraft, *, stamp=None) -> None:
    """A new working revision. `stamp` (the modification time the draft's file carries) moves only with a
    change of the document, so every process materializes a revision to the same bytes."""
    draft.working_revision += 1
    draft.updated_at = timezone.now()
    if stamp is not None:
        draft.stamp = stamp
    draft.save(update_fields=["working_revision", "stamp", "updated_at", "base_revision", "base_fingerprint"])


def _now_stamp():
    return timezone.now().replace(microsecond=0)


def _event(
    draft: WorkingDraft, kind: str, *, group: ChangeGroup | None = None, actor: str = "", summary: dict | None = None
) -> None:
    DraftEvent.objects.create(
        draft=draft,
        revision=draft.working_revision,
        kind=kind,
        group=group,
        session_id=group.session_id if group is not None else "",
        actor=actor or (group.principal.get_username() if group is not None else ""),
        summary=summary or {},
    )
    # Open console pages (the drafts list, a review screen, the dashboard's count) read the draft again.
    notify_console("drafts")


def _group_of(draft: WorkingDraft, group_id: Any) -> ChangeGroup | None:
    """The draft's change group with this id, or None: an id that is not a UUID names no group."""
    try:
        key = uuid.UUID(str(group_id))
    except ValueError:
        return None
    return ChangeGroup.objects.filter(pk=key, draft=draft).select_related("principal").first()


def _owned(group_id: Any, draft: WorkingDraft, session_id: str, *, building: bool = True) -> ChangeGroup:
    group = _group_of(draft, group_id)
    if group is None:
        raise DraftRefused(
            "FORGE_ERR_NOT_FOUND", "This draft has no change group with that id. draft.status lists the groups."
        )
    if group.session_id != session_id:
        raise DraftRefused(
            "FORGE_ERR_NOT_GROUP_OWNER",
            "This change group belongs to another session; you may read it (change_group.describe) but change "
            "only groups you began. Begin your own with change_group.begin.",
            group_id=str(group.pk),
        )
    if building and group.state not in (GroupState.BUILDING, GroupState.SUBMITTED):
        raise DraftRefused(
            "FORGE_ERR_INVALID_OPERATION",
            f"This change group is {group.state}; begin a new one to change the draft further.",
            group_id=str(group.pk),
        )
    return group


def do_begin_group(
    project: Project,
    *,
    session_id: str,
    principal: Any,
    client_label: str,
    title: str,
    rationale: str,
    expected_revision: int,
) -> tuple[ChangeGroup, int]:
    with transaction.atomic():
        draft, materialized = _locked_draft(project, expected_revision)
        group = ChangeGroup.objects.create(
            draft=draft,
            session_id=session_id,
            principal=principal,
            client_label=client_label,
            title=title,
            rationale=rationale,
        )
        _bump(draft)
        _event(draft, "begin", group=group, summary={"title": title})
    _carry_forward(draft, materialized)
    return group, draft.working_revision


def _carry_forward(draft: WorkingDraft, previous: Materialized) -> None:
    """A change that leaves the draft's document as it was: the new revision shares the previous one's."""
    if _cache.get(_key(draft)) is None:
        _cache.put(_key(draft), Materialized(draft, previous.accepted, previous.document, dict(previous.conflicts)))


@dataclass(frozen=True)
class Rehearsal:
    changed_ids: tuple[str, ...]
    findings: list[dict[str, str]]
    document: documents.ProjectDocument


def rehearse(materialized: Materialized, raw: Sequence[Any], now=None) -> Rehearsal:
    """Apply a batch to a copy of the draft: what it would change and the findings it would leave.
    OperationRefused (naming the operation's index) when any operation does not apply."""
    result = operations.apply(materialized.document, raw, now=now or materialized.draft.stamp)
    return Rehearsal(result.changed_ids, findings_for(result.doc, result.changed_ids), result.doc)


def check(project: Project, raw: Sequence[Any]) -> dict[str, Any]:
    """change_group.check: a rehearsal on a copy; nothing is stored and no revision moves."""
    materialized = current(project)
    rehearsal = rehearse(materialized, raw)
    return {
        "changed_ids": list(rehearsal.changed_ids),
        "findings": rehearsal.findings,
        "working_revision": materialized.draft.working_revision,
    }


def do_stage(
    project: Project, group_id: Any, raw: Sequence[Any], *, session_id: str, expected_revision: int
) -> dict[str, Any]:
    """Stage an atomic batch into one's own group: all operations or none (OperationRefused with the index)."""
    if not raw:
        raise DraftRefused("FORGE_ERR_INVALID_OPERATION", "The batch is empty; give at least one operation.")
    with transaction.atomic():
        draft, materialized = _locked_draft(project, expected_revision)
        group = _owned(group_id, draft, session_id)
        ops = operations.parse_operations(raw)
        _refuse_past_cap(group, len(ops))
        stamp = _now_stamp()
        rehearsal = rehearse(materialized, ops, now=stamp)
        position = (StagedOperation.objects.filter(draft=draft).aggregate(top=Max("position"))["top"] or 0) + 1
        # A batch that changes nothing leaves the document (and the stamp it carries) as it was: moving
        # the stamp would make a replay of this revision differ from the document cached here.
        _bump(draft, stamp=stamp if rehearsal.document is not materialized.document else None)
        StagedOperation.objects.bulk_create(
            StagedOperation(
                draft=draft,
                group=group,
                position=position + index,
                batch_revision=draft.working_revision,
                operation=op.model_dump(mode="json", exclude_unset=True) | {"op": op.op},
                changed_ids=list(rehearsal.changed_ids),
            )
            for index, op in enumerate(ops)
        )
        if group.acknowledged_findings or group.state == GroupState.SUBMITTED:
            # The acknowledgement described a shape this batch supersedes.
            group.acknowledged_findings = []
            group.state = GroupState.BUILDING
        group.updated_at = timezone.now()
        group.save(update_fields=["acknowledged_findings", "state", "updated_at"])
        _event(
            draft, "stage", group=group, summary={"operations": len(ops), "changed_ids": list(rehearsal.changed_ids)}
        )
    _cache.put(
        _key(draft), Materialized(draft, materialized.accepted, rehearsal.document, dict(materialized.conflicts))
    )
    return {
        "group_id": str(group.pk),
        "changed_ids": list(rehearsal.changed_ids),
        "findings": rehearsal.findings,
        "working_revision": draft.working_revision,
    }


def _refuse_past_cap(group: ChangeGroup, adding: int) -> None:
    """Refuse a batch that would take the group past FORGE_MAX_STAGED_PER_GROUP operations (the draft row is
    locked, so the count holds until the batch is stored)."""
    limit = settings.FORGE_MAX_STAGED_PER_GROUP
    held = group.operations.count()
    if held + adding > limit:
        raise DraftRefused(
            "FORGE_ERR_LIMIT_REACHED",
            f"This change group holds {held} operations and this batch adds {adding}, more than the "
            f"{limit} one group may hold (FORGE_MAX_STAGED_PER_GROUP); nothing was stored. Submit or close "
            "this group and begin another for the rest of the change.",
            status=429,
            limit=limit,
            setting="FORGE_MAX_STAGED_PER_GROUP",
            held=held,
        )


def do_unstage(
    project: Project, group_id: Any, count: int, *, session_id: str, expected_revision: int
) -> dict[str, Any]:
    """Withdraw the last `count` operations of one's own group, refused when later operations (of any
    group) would no longer apply without them."""
    with transaction.atomic():
        draft, materialized = _locked_draft(project, expected_revision)
        group = _owned(group_id, draft, session_id)
        own = list(group.operations.order_by("-position")[:count])
        if len(own) < count:
            raise DraftRefused(
                "FORGE_ERR_INVALID_OPERATION",
                f"This group has only {len(own)} staged operation(s); nothing was withdrawn.",
            )
        withdrawn = {op.pk for op in own}
        remaining = [op for op in _live_operations(draft) if op.pk not in withdrawn]
        draft.stamp = _now_stamp()
        replayed = _replay(draft, materialized.accepted, remaining)
        broken = [op for op in remaining if op.pk in replayed.conflicts and op.pk not in materialized.conflicts]
        if broken:
            raise DraftRefused(
                "FORGE_ERR_INVALID_OPERATION",
                "Later operations depend on the ones you would withdraw, so nothing was withdrawn: "
                + "; ".join(f"{op.operation.get('op')} at position {op.position}" for op in broken)
                + ". Withdraw those first, or edit the draft back with a new stage call.",
                dependent_positions=[op.position for op in broken],
            )
        StagedOperation.objects.filter(pk__in=withdrawn).delete()
        _bump(draft, stamp=draft.stamp)
        group.acknowledged_findings = []
        group.state = GroupState.BUILDING
        group.updated_at = timezone.now()
        group.save(update_fields=["acknowledged_findings", "state", "updated_at"])
        _event(draft, "unstage", group=group, summary={"operations": count})
    # The replay snapshotted the draft row before the bump: cache it under the new revision's row.
    _cache.put(_key(draft), Materialized(draft, replayed.accepted, replayed.document, dict(replayed.conflicts)))
    return {"group_id": str(group.pk), "withdrawn": count, "working_revision": draft.working_revision}


def do_submit(
    project: Project, group_id: Any, *, session_id: str, expected_revision: int, acknowledge_findings: bool
) -> dict[str, Any]:
    """Hand one's group to the reviewers; refused while problem findings stand unless acknowledged."""
    with transaction.atomic():
        draft, materialized = _locked_draft(project, expected_revision)
        group = _owned(group_id, draft, session_id)
        problems = _problems(group_findings(materialized, group))
        if problems and not acknowledge_findings:
            raise DraftRefused(
                "FORGE_ERR_FINDINGS_BLOCK_SUBMIT",
                f"{len(problems)} problem finding(s) stand against this group: "
                + "; ".join(f"{f['code']} at {f['element_id'] or 'the project'}: {f['message']}" for f in problems[:20])
                + ". Fix them with further stage calls, or submit with acknowledge_findings: true to hand them "
                "to the reviewer as they are.",
                findings=list(problems),
            )
        group.state = GroupState.SUBMITTED
        group.acknowledged_findings = list(problems) if acknowledge_findings else []
        group.updated_at = timezone.now()
        group.save(update_fields=["state", "acknowledged_findings", "updated_at"])
        _bump(draft)
        _event(draft, "submit", group=group, summary={"acknowledged_findings": len(group.acknowledged_findings)})
    _carry_forward(draft, materialized)
    return {
        "group_id": str(group.pk),
        "state": group.state,
        "acknowledged_findings": group.acknowledged_findings,
        "working_revision": draft.working_revision,
    }


def do_close(project: Project, group_id: Any, *, session_id: str, expected_revision: int) -> dict[str, Any]:
    """End one's group: its operations stay in the draft for the reviewer, no more can be added."""
    with transaction.atomic():
        draft, materialized = _locked_draft(project, expected_revision)
        group = _owned(group_id, draft, session_id)
        group.state = GroupState.CLOSED
        group.updated_at = timezone.now()
        group.save(update_fields=["state", "updated_at"])
        _bump(draft)
        _event(draft, "close", group=group)
    _carry_forward(draft, materialized)
    return {"group_id": str(group.pk), "state": group.state, "working_revision": draft.working_revision}


# --- reads --------------------------------------------------------------------------------------------


def status(project: Project, *, session_id: str = "") -> dict[str, Any]:
    materialized = current(project)
    draft = materialized.draft
    groups = list(draft.groups.filter(state__in=LIVE_GROUP_STATES).select_related("principal"))
    counts = {g.pk: g.operations.count() for g in groups}
    return {
        "project": project.slug,
        "accepted_revision": draft.base_revision,
        "working_revision": draft.working_revision,
        "changed": materialized.changed,
        "conflicts": len(materialized.conflicts),
        "groups": [
            {
                "group_id": str(g.pk),
                "title": g.title,
                "state": g.state,
                "author": g.principal.get_username(),
                "client_label": g.client_label,
                "operations": counts[g.pk],
                "yours": bool(session_id) and g.session_id == session_id,
            }
            for g in groups
        ],
    }


def describe_group(
    project: Project, group_id: Any, *, cursor: str | None = None, limit: int = DEFAULT_LIMIT
) -> dict[str, Any]:
    """One change group and one page of its operations in staging order, with the findings about the
    elements those operations changed and their conflicts; `next_cursor` continues with the next page.
    Only the page is read: a group of ten thousand operations costs what a group of `limit` does.
    ValueError for a bad limit or cursor."""
    limit = check_limit(limit, DESCRIBE_LIMIT)
    materialized = current(project)
    group = _group_of(materialized.draft, group_id)
    if group is None:
        raise DraftRefused("FORGE_ERR_NOT_FOUND", "This draft has no change group with that id.")
    key = query_key("change_group.describe", str(group.pk))
    # Positions only grow, so a cursor (the position to go on from) stays right while the group changes.
    start = position_from(cursor, "group", key)
    page = list(group.operations.filter(position__gte=start).order_by("position")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    total = group.operations.count()
    earlier = group.operations.filter(position__lt=start)
    first_index = earlier.count() if start else 0
    first_batch_seen = bool(page) and bool(start) and earlier.filter(batch_revision=page[0].batch_revision).exists()
    return {
        "group_id": str(group.pk),
        "title": group.title,
        "rationale": group.rationale,
        "state": group.state,
        "author": group.principal.get_username(),
        "client_label": group.client_label,
        "operations_total": total,
        "operations": [
            {"position": op.position, "operation": op.operation, "conflict": materialized.conflicts.get(op.pk)}
            for op in page
        ],
        "findings": findings_of_operations(
            materialized, page, first_index=first_index, first_batch_seen=first_batch_seen
        ),
        "acknowledged_findings": group.acknowledged_findings,
        "working_revision": materialized.draft.working_revision,
        "next_cursor": encode_cursor({"k": "group", "q": key, "p": page[-1].position + 1}) if more else None,
    }


def events(project: Project, after_revision: int) -> dict[str, Any]:
    draft, _ = draft_of(project)
    found = list(
        DraftEvent.objects.filter(draft=draft, revision__gt=after_revision).order_by("revision", "id")[
            : EVENTS_LIMIT + 1
        ]
    )
    answer: dict[str, Any] = {
        "working_revision": draft.working_revision,
        "events": [
            {
                "revision": e.revision,
                "kind": e.kind,
                "group_id": str(e.group_id) if e.group_id else None,
                "actor": e.actor,
                "summary": e.summary,
                "at": e.at.isoformat(),
            }
            for e in found[:EVENTS_LIMIT]
        ],
    }
    if len(found) > EVENTS_LIMIT:
        answer["next_after_revision"] = found[EVENTS_LIMIT - 1].revision
    return answer


def describe(project: Project, *, cursor: str | None = None, limit: int = DESCRIBE_LIMIT) -> dict[str, Any]:
    """What the draft changes against the accepted project: element ids added, removed and changed, with
    the fields that differ, one page of at most `limit` lines (added first, then removed, then changed);
    `next_cursor` continues while the draft stays at this working revision. ValueError for a bad limit or
    cursor, and for a cursor of a revision the draft has moved on from."""
    limit = check_limit(limit, DESCRIBE_LIMIT)
    materialized = current(project)
    revision = materialized.draft.working_revision
    key = query_key("draft.describe", project.slug, revision)
    if cursor is not None and decode_cursor(cursor, "draft").get("q") != key:
        raise ValueError(
            f"the draft moved (now working revision {revision}) since that cursor was given; describe it again "
            "without a cursor"
        )
    start = position_from(cursor, "draft", key)
    before, after = materialized.accepted.index, materialized.document.index
    added = [e.id for e in after.entries if e.key not in before.by_id]
    removed = [e.id for e in before.entries if e.key not in after.by_id]
    changed: list[dict[str, Any]] = []
    for entry in after.entries:
        old = before.by_id.get(entry.key)
        if old is None:
            continue
        fields = _differing_fields(old, entry)
        if fields:
            changed.append({"element_id": entry.id, "fields": fields})
    lines: list[tuple[str, Any]] = [
        *(("added", a) for a in added),
        *(("removed", r) for r in removed),
        *(("changed", c) for c in changed),
    ]
    page = lines[start : start + limit]
    more = len(lines) > start + limit
    return {
        "project": project.slug,
        "accepted_revision": materialized.draft.base_revision,
        "working_revision": revision,
        "added": [line for kind, line in page if kind == "added"],
        "removed": [line for kind, line in page if kind == "removed"],
        "changed": [line for kind, line in page if kind == "changed"],
        "counts": {"added": len(added), "removed": len(removed), "changed": len(changed)},
        "truncated": more,
        "next_cursor": encode_cursor({"k": "draft", "q": key, "p": start + limit}) if more else None,
    }


def _differing_fields(old: elements.Entry, new: elements.Entry) -> dict[str, Any]:
    differing: dict[str, Any] = {}
    if old.name != new.name:
        differing["name"] = {"accepted": old.name, "draft": new.name}
    if old.type_text != new.type_text:
        differing["type"] = {"accepted": old.type_text, "draft": new.type_text}
    if old.section != new.section:
        differing["section"] = {"accepted": old.section, "draft": new.section}
    if old.kind == "variable":
        if old.element.get("address") != new.element.get("address"):
            differing["address"] = {"accepted": old.element.get("address"), "draft": new.element.get("address")}
        # RETAIN and CONSTANT belong to the variable's section: a change moves it to another of the same kind.
        for qualifier in ("retain", "constant"):
            was, now = flag(old.element.getparent(), qualifier), flag(new.element.getparent(), qualifier)
            if was != now:
                differing[qualifier] = {"accepted": was, "draft": now}
    # Content apart from the elements inside it (a POU's body, not its variables): a POU that gains a
    # variable is not changed by that alone, one whose body was also rewritten is.
    if not differing and review_diff.own_content_differs(old, new):
        differing["content"] = "changed"
    return differing


# --- acceptance and discard (operators only: the console and the operator API) --------------------------


def acceptance(project: Project) -> tuple[Materialized, dict[str, Any]]:
    """The draft and the executor's intent that turns the accepted file into it: the operations that
    apply, in order, with the draft's stamp, and the groups accepted with them. Refused when the draft
    changes nothing."""
    materialized = current(project)
    draft = materialized.draft
    staged = [op for op in _live_operations(draft) if op.pk not in materialized.conflicts]
    if not staged or not materialized.changed:
        raise DraftRefused(
            "FORGE_ERR_INVALID_OPERATION", "The working draft changes nothing; there is nothing to accept."
        )
    groups = list(draft.groups.filter(state__in=LIVE_GROUP_STATES).order_by("created_at"))
    intent = {
        "operations": [op.operation for op in staged],
        "modified_at": draft.stamp.isoformat(),
        "draft_revision": draft.working_revision,
        "groups": [str(g.pk) for g in groups],
        "skipped_conflicts": len(materialized.conflicts),
    }
    return materialized, intent


def provenance(groups: Sequence[ChangeGroup]) -> list[dict[str, Any]]:
    return [
        {
            "group_id": str(g.pk),
            "title": g.title,
            "rationale": g.rationale,
            "author": g.principal.get_username(),
            "client_label": g.client_label,
            "session": g.session_id,
            "state": g.state,
            "operations": g.operations.count(),
            "acknowledged_findings": g.acknowledged_findings,
        }
        for g in groups
    ]


def do_settle_accepted(slug: str, intent: Mapping[str, Any], *, actor: str) -> None:
    """Inside the executor's VERIFIED transaction: the accepted groups leave the draft, which now builds on
    the new accepted file; the acceptance is audited with the provenance of every group."""
    project = Project.objects.get(slug=slug)
    draft = WorkingDraft.objects.select_for_update().get(project=project)
    groups = list(ChangeGroup.objects.filter(pk__in=intent.get("groups", []), draft=draft).select_related("principal"))
    # A batch staged into an accepted group after the revision the intent was taken at is not in the file:
    # that group stays in the draft with those operations only (what was written leaves it).
    written = intent.get("draft_revision", draft.working_revision)
    continued = set(
        StagedOperation.objects.filter(group__in=groups, batch_revision__gt=written).values_list("group_id", flat=True)
    )
    # Kept for the VERIFIED transaction's batch of audit rows, after the contract's and the project's.
    audit_row(
        kind=EventKind.DRAFT_ACCEPTED,
        arguments={
            "draft_revision": intent.get("draft_revision"),
            "operations": len(intent.get("operations", [])),
            "skipped_conflicts": intent.get("skipped_conflicts", 0),
            "groups": provenance(groups),
            **({"continued_groups": sorted(str(pk) for pk in continued)} if continued else {}),
        },
        outcome="accepted",
        called_by=actor,
        project=slug,
    )
    StagedOperation.objects.filter(group_id__in=continued, batch_revision__lte=written).delete()
    ChangeGroup.objects.filter(pk__in=[g.pk for g in groups if g.pk not in continued]).update(
        state=GroupState.ACCEPTED, updated_at=timezone.now()
    )
    draft.base_revision = project.accepted_revision
    draft.base_fingerprint = project.fingerprint
    _bump(draft, stamp=_now_stamp())
    _event(draft, "accepted", actor=actor, summary={"groups": [str(g.pk) for g in groups]})


def do_discard_draft(project: Project, *, acting_user: str, expected_revision: int | None = None) -> int:
    """Throw the whole draft away (an operator's decision): every live group is discarded, audited.
    With `expected_revision` (the one the operator reviewed), refused when the draft moved since."""
    with transaction.atomic():
        if expected_revision is None:
            draft, _ = draft_of(project)
            draft = WorkingDraft.objects.select_for_update().get(pk=draft.pk)
        else:
            draft, _ = _locked_draft(project, expected_revision)
        groups = list(draft.groups.filter(state__in=LIVE_GROUP_STATES).select_related("principal"))
        if not groups:
            raise DraftRefused("FORGE_ERR_INVALID_OPERATION", "The working draft has no change groups to discard.")
        record(
            EventKind.DRAFT_DISCARDED,
            arguments={"draft_revision": draft.working_revision, "groups": provenance(groups)},
            outcome="discarded",
            called_by=acting_user,
            project=project.slug,
        )
        ChangeGroup.objects.filter(pk__in=[g.pk for g in groups]).update(
            state=GroupState.DISCARDED, updated_at=timezone.now()
        )
        _bump(draft, stamp=_now_stamp())
        _event(draft, "discarded", actor=acting_user, summary={"groups": len(groups)})
    return len(groups)
