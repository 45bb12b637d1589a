"""The project read tools (DESIGN 13): bounded reads of a registered project, in the accepted view or the
working draft's.

Every project read needs a grant: the registry passes the consent gates (the MCP switch, and an
operator's grant for this session) before a handler runs and hands it the project; a project the
principal may not view answers exactly as one that does not exist.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from access import grants
from access.models import Transport
from access.services import mint_handle
from mcp_api.protocol import CallContext
from mcp_api.registry import NEEDS_GRANT, NoArguments, tool
from mcp_api.tools.common import CURSOR, ProjectArguments, read
from projects import plcopen, reads, rights

Limit = Field(default=plcopen.DEFAULT_LIMIT, ge=1, le=plcopen.MAX_LIMIT, description="At most this many items.")


class ReadArguments(ProjectArguments):
    view: Literal["accepted", "working_draft"] = Field(
        default="accepted",
        description="accepted: the project as it is; working_draft: with every staged change group applied.",
    )


class AccessArguments(ProjectArguments):
    """session.request_access: the project, and for stateless clients the handle (omitted the first time)."""


class FindArguments(ReadArguments):
    text: str | None = Field(default=None, max_length=200, description="Substring of name, type or documentation.")
    kind: Literal["pou", "variable", "type", "config", "resource", "task", "instance"] | None = None
    type: str | None = Field(default=None, max_length=200, description="Exact declared type, POU type or base type.")
    limit: int = Limit
    cursor: str | None = CURSOR


class ElementArguments(ReadArguments):
    element_id: str = Field(max_length=500, description="A readable id such as pou/Main or pou/Main/var/Counter.")
    body_limit: int = Field(default=plcopen.DEFAULT_BODY_LIMIT, ge=1, le=plcopen.MAX_BODY_LIMIT)
    cursor: str | None = CURSOR


class VariablesArguments(ReadArguments):
    scope: str | None = Field(default=None, max_length=500, description="A POU, configuration or resource id.")
    section: str | None = Field(default=None, max_length=40, description="inputVars, localVars, globalVars, ...")
    limit: int = Limit
    cursor: str | None = CURSOR


class PageArguments(ReadArguments):
    limit: int = Limit
    offset: int = Field(default=0, ge=0, description="The next_offset of the previous answer, to continue.")


class PlacementArguments(ReadArguments):
    topic: str = Field(min_length=1, max_length=300, description="What you want to place, e.g. 'conveyor speed'.")
    limit: int = Field(default=10, ge=1, le=plcopen.MAX_LIMIT)


class ExportArguments(ReadArguments):
    offset: int = Field(default=0, ge=0, description="The next_offset of the previous answer, to continue.")


@tool("project.list", title="List projects")
def project_list(ctx: CallContext, args: NoArguments) -> dict[str, Any]:
    """The projects you may ask for, by slug and name. Start here, then project.overview."""
    projects = list(rights.visible_projects(ctx.token.owner)[: plcopen.MAX_LIMIT + 1])
    listing: dict[str, Any] = {"projects": [{"project": p.slug, "name": p.name} for p in projects[: plcopen.MAX_LIMIT]]}
    if len(projects) > plcopen.MAX_LIMIT:
        listing["truncated"] = f"only the first {plcopen.MAX_LIMIT} projects by slug are listed"
    return listing


@tool("project.overview", title="Project overview", arguments=ReadArguments, needs=NEEDS_GRANT, guidance=True)
def project_overview(ctx: CallContext, args: ReadArguments) -> dict[str, Any]:
    """What a project holds: counts of POUs by type and language, data types, configurations, resources,
    tasks, instances and variables, with its accepted revision."""
    return read(reads.overview, ctx.project, view=args.view)


@tool("project.find", title="Find elements", arguments=FindArguments, needs=NEEDS_GRANT)
def project_find(ctx: CallContext, args: FindArguments) -> dict[str, Any]:
    """Find POUs, variables, types, configurations, resources, tasks and instances by a name, type or
    documentation substring (case-insensitive). Returns element ids for project.get_element; pages with
    next_cursor."""
    return read(
        reads.find,
        ctx.project,
        view=args.view,
        text=args.text,
        kind=args.kind,
        type=args.type,
        limit=args.limit,
        cursor=args.cursor,
    )


@tool("project.get_element", title="Get an element", arguments=ElementArguments, needs=NEEDS_GRANT)
def project_get_element(ctx: CallContext, args: ElementArguments) -> dict[str, Any]:
    """One element by id: a POU with its interface and its ST/IL body (long bodies continue with
    next_cursor), a variable, a task with its instances, or a data type."""
    return read(
        reads.get_element,
        ctx.project,
        args.element_id,
        view=args.view,
        body_limit=args.body_limit,
        cursor=args.cursor,
    )


@tool("project.list_variables", title="List variables", arguments=VariablesArguments, needs=NEEDS_GRANT)
def project_list_variables(ctx: CallContext, args: VariablesArguments) -> dict[str, Any]:
    """Variables of a scope (a POU, configuration or resource id; all when omitted), optionally of one
    section such as inputVars or globalVars. Pages with next_cursor."""
    return read(
        reads.list_variables,
        ctx.project,
        view=args.view,
        scope=args.scope,
        section=args.section,
        limit=args.limit,
        cursor=args.cursor,
    )


@tool("project.check", title="Check a project", arguments=PageArguments, needs=NEEDS_GRANT)
def project_check(ctx: CallContext, args: PageArguments) -> dict[str, Any]:
    """Findings of the project (problems first, then advisories): invalid or duplicate names, unknown
    types, bad initial values or addresses, programs without a task, schema errors, and from parsing each
    ST text: syntax errors (st_syntax), vendor-dialect statements, undeclared or unused identifiers, calls of
    what is no function or instance, assignments to constants or inputs. A finding in ST code carries body
    (which text), line and column (from 1) so the exact spot can be fixed. Pages with next_offset."""
    return read(reads.check, ctx.project, limit=args.limit, offset=args.offset, view=args.view)


@tool("project.export", title="Export a project", arguments=ExportArguments, needs=NEEDS_GRANT)
def project_export(ctx: CallContext, args: ExportArguments) -> dict[str, Any]:
    """The project's PLCopen XML, 32,000 characters at a time (continue with next_offset). Prefer the
    bounded reads: a whole project can be large."""
    return read(reads.export, ctx.project, offset=args.offset, view=args.view)


@tool(
    "project.suggest_placement",
    title="Suggest where something belongs",
    arguments=PlacementArguments,
    needs=NEEDS_GRANT,
    guidance=True,
)
def project_suggest_placement(ctx: CallContext, args: PlacementArguments) -> dict[str, Any]:
    """Rank the POUs, configurations and resources where something about a topic belongs, by their names,
    documentation and the variables they declare; each POU names the task or resource instances it runs
    in. Use before change_group.stage to pick a scope."""
    return read(reads.suggest_placement, ctx.project, args.topic, limit=args.limit, view=args.view)


@tool("session.request_access", title="Request access to a project", arguments=AccessArguments, read_only=False)
def session_request_access(ctx: CallContext, args: AccessArguments) -> dict[str, Any]:
    """Ask the operators for access to a project for this session (the first project call does it too),
    or see where the request stands: pending, allowed, denied, revoked or ended. Stateless clients get a
    session_handle here (omit it the first time) and pass it with every project call."""
    project, session = ctx.project, ctx.session
    if session is None:
        session = mint_handle(ctx.token, ctx.revision, ctx.client_info)
    request = grants.raise_request(ctx.token, session, project)
    answer: dict[str, Any] = {"project": project.slug, "state": request.state}
    if session.transport == Transport.HANDLE:
        answer["session_handle"] = session.id
    return answer
