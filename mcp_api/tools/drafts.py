"""The working-draft tools (DESIGN sections 8.1 and 13): read the draft, and build change groups in it.

`draft.status`, `draft.describe` and `draft.events` read the project's one working draft;
`change_group.*` build a coherent change over several calls: begin, check (a rehearsal, nothing
stored), stage (an atomic batch), unstage, describe, submit (refused while problem findings stand,
unless acknowledged) and close. Every modifying call carries the `expected_working_revision` and the
`expected_context_generation` the client last saw; either stale refuses the call before anything is
stored. A session changes only the groups it began. No tool here (or anywhere) makes the draft the
accepted project: that is an operator's decision in the Forge console.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from forge_core.errors import Refusal
from mcp_api.protocol import CallContext
from mcp_api.registry import NEEDS_GRANT, tool
from mcp_api.tools.common import CURSOR, ProjectArguments, read
from projects import drafts, operations
from projects.models import Project
from projects.operations import Operation
from projects.plcopen import DEFAULT_LIMIT

GROUP_ID = Field(max_length=64, description="The group_id change_group.begin answered with.")
BATCH = Field(min_length=1, max_length=200, description="Operations in the vocabulary of the write tools, in order.")


class Expected(ProjectArguments):
    expected_working_revision: int = Field(ge=0, description="The working_revision you last saw (draft.status).")
    expected_context_generation: int = Field(
        ge=0, description="The context_generation you last saw (session.status): it moves when your access changes."
    )


class BeginArguments(Expected):
    title: str = Field(min_length=1, max_length=200, description="What the change does, in a line.")
    rationale: str = Field(default="", max_length=4000, description="Why: what the reviewer should know.")


class CheckArguments(ProjectArguments):
    operations: list[Operation] = BATCH


class StageArguments(Expected):
    group_id: str = GROUP_ID
    operations: list[Operation] = BATCH


class UnstageArguments(Expected):
    group_id: str = GROUP_ID
    count: int = Field(default=1, ge=1, le=200, description="How many of the group's last operations to withdraw.")


class GroupArguments(ProjectArguments):
    group_id: str = GROUP_ID


class SubmitArguments(Expected):
    group_id: str = GROUP_ID
    acknowledge_findings: bool = Field(
        default=False, description="Submit although problem findings stand; they are recorded for the reviewer."
    )


class CloseArguments(Expected):
    group_id: str = GROUP_ID


class GroupDescribeArguments(GroupArguments):
    limit: int = Field(
        default=DEFAULT_LIMIT, ge=1, le=drafts.DESCRIBE_LIMIT, description="At most this many operations."
    )
    cursor: str | None = CURSOR


class DescribeArguments(ProjectArguments):
    limit: int = Field(
        default=drafts.DESCRIBE_LIMIT, ge=1, le=drafts.DESCRIBE_LIMIT, description="At most this many element lines."
    )
    cursor: str | None = CURSOR


class EventsArguments(ProjectArguments):
    after_revision: int = Field(default=0, ge=0, description="Only what happened after this working revision.")


def _fresh(ctx: CallContext, args: Expected) -> tuple[Project, str]:
    """The project and the caller's session, once its context generation is the one it expects."""
    session = ctx.session
    current = session.context_generation if session is not None else 0
    if current != args.expected_context_generation:
        raise Refusal(
            "FORGE_ERR_STALE_CONTEXT",
            f"What this session may do changed (context generation {current}, you expected "
            f"{args.expected_context_generation}); nothing was stored. Call session.status, then call again.",
            current_context_generation=current,
        )
    return ctx.project, ctx.session_id


def _drafting(call, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run a draft call (its own refusals reach the client as they are); a refused operation becomes a
    refusal that says what staging it means: nothing was stored, fix that operation."""
    try:
        return read(call, *args, **kwargs)
    except operations.OperationRefused as refused:
        raise Refusal(
            "FORGE_ERR_INVALID_OPERATION",
            f"{refused}. Nothing was stored: the batch is all or nothing. Fix operation {refused.index} "
            "(project.get_element with view working_draft shows the element as the draft has it) and call again.",
            index=refused.index,
        ) from None


@tool("draft.status", title="Working draft status", arguments=ProjectArguments, needs=NEEDS_GRANT, guidance=True)
def draft_status(ctx: CallContext, args: ProjectArguments) -> dict[str, Any]:
    """The project's working draft: its working_revision (pass it as expected_working_revision), the
    accepted revision it builds on, whether it changes anything, conflicts, and its change groups (yours
    marked)."""
    return _drafting(drafts.status, ctx.project, session_id=ctx.session_id)


@tool("draft.describe", title="What the draft changes", arguments=DescribeArguments, needs=NEEDS_GRANT)
def draft_describe(ctx: CallContext, args: DescribeArguments) -> dict[str, Any]:
    """What the working draft changes against the accepted project: element ids added, removed and changed,
    with the fields that differ, and how many of each (counts). One page of at most limit lines, added
    first; pass next_cursor to continue (it is refused once the working revision moves: start again)."""
    return _drafting(drafts.describe, ctx.project, cursor=args.cursor, limit=args.limit)


@tool("draft.events", title="What happened in the draft", arguments=EventsArguments, needs=NEEDS_GRANT)
def draft_events(ctx: CallContext, args: EventsArguments) -> dict[str, Any]:
    """What changed in the working draft after a revision (groups begun, batches staged or withdrawn,
    submissions, replays on a new accepted revision, acceptance): read it when your expected revision is
    stale."""
    return _drafting(drafts.events, ctx.project, args.after_revision)


@tool(
    "change_group.begin",
    title="Begin a change group",
    arguments=BeginArguments,
    needs=NEEDS_GRANT,
    read_only=False,
    idempotent=False,
)
def change_group_begin(ctx: CallContext, args: BeginArguments) -> dict[str, Any]:
    """Begin a change group in the project's working draft: a title and a rationale for the reviewer.
    Answers the group_id and the new working_revision."""
    project, session_id = _fresh(ctx, args)

    def begin() -> dict[str, Any]:
        group, revision = drafts.do_begin_group(
            project,
            session_id=session_id,
            principal=ctx.token.owner,
            client_label=ctx.token.label,
            title=args.title,
            rationale=args.rationale,
            expected_revision=args.expected_working_revision,
        )
        return {"group_id": str(group.pk), "working_revision": revision}

    return _drafting(begin)


@tool("change_group.check", title="Rehearse operations", arguments=CheckArguments, needs=NEEDS_GRANT)
def change_group_check(ctx: CallContext, args: CheckArguments) -> dict[str, Any]:
    """Rehearse a batch on a copy of the working draft: the ids it would change and the findings it would
    leave (ST syntax and identifier findings with body, line and column in the POU's code), or the operation
    that would be refused (by index). Nothing is stored and no revision moves."""
    return _drafting(drafts.check, ctx.project, args.operations)


@tool(
    "change_group.stage",
    title="Stage operations",
    arguments=StageArguments,
    needs=NEEDS_GRANT,
    read_only=False,
    idempotent=False,
)
def change_group_stage(ctx: CallContext, args: StageArguments) -> dict[str, Any]:
    """Stage a batch into your change group: all operations or none (a refusal names the operation's
    index). Answers the changed ids, the findings against them (those in ST code with body, line and
    column) and the new working_revision. Staging never refuses on findings: fix them with further batches
    before change_group.submit."""
    project, session_id = _fresh(ctx, args)
    return _drafting(
        drafts.do_stage,
        project,
        args.group_id,
        args.operations,
        session_id=session_id,
        expected_revision=args.expected_working_revision,
    )


@tool(
    "change_group.unstage",
    title="Withdraw operations",
    arguments=UnstageArguments,
    needs=NEEDS_GRANT,
    read_only=False,
    idempotent=False,
)
def change_group_unstage(ctx: CallContext, args: UnstageArguments) -> dict[str, Any]:
    """Withdraw the last `count` operations of your change group; refused (nothing withdrawn) when later
    operations depend on them."""
    project, session_id = _fresh(ctx, args)
    return _drafting(
        drafts.do_unstage,
        project,
        args.group_id,
        args.count,
        session_id=session_id,
        expected_revision=args.expected_working_revision,
    )


@tool("change_group.describe", title="Describe a change group", arguments=GroupDescribeArguments, needs=NEEDS_GRANT)
def change_group_describe(ctx: CallContext, args: GroupDescribeArguments) -> dict[str, Any]:
    """One change group of the draft (any session's): title, rationale, author, state, the findings
    acknowledged at submission, how many operations it holds (operations_total), and one page of its
    operations in order (with conflicts) with the findings about the elements they changed; pass
    next_cursor to continue."""
    return _drafting(drafts.describe_group, ctx.project, args.group_id, cursor=args.cursor, limit=args.limit)


@tool(
    "change_group.submit", title="Submit a change group", arguments=SubmitArguments, needs=NEEDS_GRANT, read_only=False
)
def change_group_submit(ctx: CallContext, args: SubmitArguments) -> dict[str, Any]:
    """Hand your change group to the reviewers. Refused with FORGE_ERR_FINDINGS_BLOCK_SUBMIT, naming each
    problem finding, unless acknowledge_findings is true (then recorded for the reviewer; a later stage
    clears it). A person decides in the Forge console whether the draft becomes the project."""
    project, session_id = _fresh(ctx, args)
    return _drafting(
        drafts.do_submit,
        project,
        args.group_id,
        session_id=session_id,
        expected_revision=args.expected_working_revision,
        acknowledge_findings=args.acknowledge_findings,
    )


@tool("change_group.close", title="Close a change group", arguments=CloseArguments, needs=NEEDS_GRANT, read_only=False)
def change_group_close(ctx: CallContext, args: CloseArguments) -> dict[str, Any]:
    """End your change group: its operations stay in the draft for the reviewer, no more can be staged."""
    project, session_id = _fresh(ctx, args)
    return _drafting(
        drafts.do_close, project, args.group_id, session_id=session_id, expected_revision=args.expected_working_revision
    )
