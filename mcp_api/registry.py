"""The tool registry: every MCP tool is one declaration in one table, and the one gate in front of it.

A tool declares its name, description, a strict pydantic argument model (from which the published
`inputSchema` is generated, so schema and validation cannot drift), annotations, what it needs
(`token`, `grant`, `override`, `caretaker`) and its handler. `tools/list` shows the tools the principal
is authorized for under the deployment's flags, in registration order; `tools/call` validates the
arguments and calls `Tool.run`, which resolves the call's session, project and grant once (`admit`) and
only then runs the handler, so what a tool declares is exactly what is enforced and no handler looks a
project up or checks a grant itself. A tool (or a service it calls) refuses by raising
`forge_core.errors.Refusal`, which the method layer turns into a result with `isError: true` and its
`FORGE_ERR_*` code, never a JSON-RPC error. The tools themselves are declared in `mcp_api.tools`, whose package
imports every module of them in the order `tools/list` shows them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.conf import settings
from pydantic import BaseModel, ConfigDict, ValidationError

from access import grants, peers
from access.models import AccessState, McpSession, Transport
from access.services import find_session
from caretaker import activation
from forge_core.errors import Refusal
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from projects import rights
from projects.models import Project

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext


AUTHORING_GUIDANCE = (
    "How to change a project: read it first (project.overview, project.find, project.get_element); "
    "change_group.begin with a title and rationale; change_group.check your operations; change_group.stage "
    "them in small batches; fix the findings each answer reports (those in ST code name the body, line and "
    "column); then change_group.submit. A person reviews "
    "the working draft and decides in the Forge console: never tell the user a change is in the project "
    "before that."
)


class Need(StrEnum):
    TOKEN = "token"
    GRANT = "grant"
    OVERRIDE = "override"
    CARETAKER = "caretaker"


READ_ONLY_ROLE_NAMES = ", ".join(sorted(peers.READ_ONLY_ROLES))

NEEDS_GRANT = frozenset({Need.TOKEN, Need.GRANT})
"""A project tool's needs: a client token and this session's grant on the project its arguments name."""


class Arguments(BaseModel):
    """Base of every tool's argument model: unknown arguments are refused, not ignored."""

    model_config = ConfigDict(extra="forbid", str_max_length=100_000)


class NoArguments(Arguments):
    """A tool that takes no arguments (any given is refused)."""


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    arguments: type[Arguments]
    handler: Callable[[CallContext, Any], dict[str, Any]]
    needs: frozenset[Need] = frozenset({Need.TOKEN})
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True
    secret_arguments: frozenset[str] = field(default_factory=frozenset)
    when_off: bool = False  # answers while MCP is switched off (never returns project content)

    def run(self, ctx: CallContext, arguments: Arguments) -> dict[str, Any]:
        """Admit the call (every need this tool declares), then run its handler."""
        admit(self, ctx, arguments)
        return self.handler(ctx, arguments)

    def input_schema(self) -> dict[str, Any]:
        return _clean_schema(self.arguments.model_json_schema())

    def descriptor(self) -> dict[str, Any]:
        """The tool as `tools/list` publishes it. Built once per tool, on first use (pydantic's schema
        generation costs about a millisecond a tool); each call gets its own outer dict, whose nested
        values (inputSchema, annotations) are shared and never changed by anyone."""
        return dict(self._published)

    @functools.cached_property
    def _published(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema(),
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
            # A governed mutation waits for an operator, so a client may follow it as a task (`mcp_api.tasks`).
            **({"execution": {"taskSupport": "optional"}} if self.waits_for_operator else {}),
        }

    @functools.cached_property
    def handler_is_generator(self) -> bool:
        """Whether the handler yields (a tool that talks with its client, `mcp_api.dialogue`); asked on every call."""
        return inspect.isgeneratorfunction(self.handler)

    @property
    def waits_for_operator(self) -> bool:
        """Whether a call suspends into a pending confirmation: the governed mutations (direct writes, team)."""
        return not self.read_only and bool({Need.OVERRIDE, Need.CARETAKER} & self.needs)

    def parse(self, raw: Any) -> Arguments:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise RpcError(INVALID_PARAMS, f"Invalid params: 'arguments' of {self.name} must be an object.")
        try:
            return self.arguments.model_validate(raw)
        except ValidationError as exc:
            problems = [
                {"path": ".".join(str(part) for part in err["loc"]) or "(arguments)", "message": err["msg"]}
                for err in exc.errors(include_url=False, include_input=False)
            ]
            first = problems[0]
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params for {self.name}: {first['path']}: {first['message']}. "
                "See the tool's inputSchema in tools/list.",
                {"tool": self.name, "errors": problems},
            ) from None


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles: the descriptions say what each argument is."""
    schema = {key: value for key, value in schema.items() if key != "title"}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["properties"] = {
            name: {key: value for key, value in prop.items() if key != "title"} for name, prop in properties.items()
        }
    schema.setdefault("properties", {})
    schema["type"] = "object"
    return schema


REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    if tool.name in REGISTRY:
        raise ValueError(f"tool {tool.name} is registered twice")
    if Need.GRANT in tool.needs and "project" not in tool.arguments.model_fields:
        raise ValueError(f"tool {tool.name} needs a grant, so its arguments must name the project")
    if Need.GRANT in tool.needs and tool.when_off:
        raise ValueError(f"tool {tool.name} needs a grant, so it cannot answer while MCP is off")
    REGISTRY[tool.name] = tool
    return tool


# --- the gate: what a tool declares is what a call must have -----------------------------------------


def is_caretaker(ctx: CallContext | None = None) -> bool:
    """Whether this server is the team's active caretaker (DESIGN section 10: all four conditions of
    `caretaker.activation` hold); the tools that need one are refused and hidden until then."""
    return activation.is_caretaker()


def admit(tool: Tool, ctx: CallContext, arguments: Arguments) -> None:
    """Resolve the call's session and project and check every need the tool declares, before its handler
    runs; raise the refusal that says what to do next. What this resolves is on `ctx` for the handler:
    `ctx.session` (the transport's session, or a stateless client's session handle) and `ctx.project`.

    The master switch is checked before this (`protocol`), for every tool not declared `when_off`.
    """
    if Need.OVERRIDE in tool.needs and not settings.FORGE_OVERRIDE_SECURITIES:
        raise unknown_tool(tool.name)
    if not tool.read_only and peers.is_read_only(ctx.token):
        raise Refusal(
            "FORGE_ERR_READ_ONLY_ROLE",
            f"{tool.name} changes something, and this team member's roster role ({READ_ONLY_ROLE_NAMES}) only "
            "reads; ask the team's caretaker for another role.",
        )
    if Need.CARETAKER in tool.needs and not is_caretaker(ctx):
        raise activation.NotCaretaker(
            f"{tool.name} needs this server to be the team's active caretaker, and it is not; ask your team's "
            "caretaker. What is missing: " + " ".join(activation.missing())
        )
    # The model's field values: `getattr` of a field the model lacks costs pydantic an exception on every call.
    given = arguments.__dict__
    slug = given.get("project")
    if isinstance(slug, str):
        ctx.target = _visible_project(ctx, slug)
    handle = given.get("session_handle")
    if ctx.session is None and isinstance(handle, str):
        ctx.session = _session_of_handle(ctx, handle)
    if Need.GRANT in tool.needs:
        _require_grant(ctx, ctx.project)


def _visible_project(ctx: CallContext, slug: str) -> Project:
    """The project, if this principal may view it; otherwise the same answer as for no such project."""
    project = Project.objects.filter(slug=slug.strip().lower()).first()
    if project is None or not rights.can_view(ctx.token.owner, project):
        raise Refusal(
            "FORGE_ERR_NOT_FOUND", f"There is no project {slug!r}. Call project.list for the projects you may read."
        )
    return project


def _session_of_handle(ctx: CallContext, handle: str) -> McpSession:
    """A stateless client's session: the one its handle names."""
    session = find_session(ctx.token, handle)
    if session is None or session.transport != Transport.HANDLE:
        raise Refusal(
            "FORGE_ERR_NOT_FOUND",
            "This session handle is unknown or has ended. Call session.request_access without one for a new handle.",
        )
    return session


def _require_grant(ctx: CallContext, project: Project) -> None:
    """Let a project call through only on this session's allowed grant; otherwise raise the refusal that
    says why (raising the access request for an operator on the first call)."""
    if ctx.session is None:
        raise Refusal(
            "FORGE_ERR_PROJECT_ACCESS_PENDING",
            "This stateless call names no session handle. Call session.request_access with the project to "
            "get one, then pass it as session_handle with every project call.",
        )
    request = grants.raise_request(ctx.token, ctx.session, project)
    if request.state == AccessState.PENDING:
        raise Refusal(
            "FORGE_ERR_PROJECT_ACCESS_PENDING",
            f"Access to {project.slug} waits for an operator's decision in the Forge console. Ask again "
            "later; session.status lists your pending requests.",
            project=project.slug,
        )
    if request.state != AccessState.ALLOWED:
        raise Refusal(
            "FORGE_ERR_PROJECT_ACCESS_DENIED",
            f"Access to {project.slug} was {request.state} by an operator. Ask the operators of this Forge "
            "server if you need it.",
            project=project.slug,
        )


def unknown_tool(name: Any) -> RpcError:
    return RpcError(
        INVALID_PARAMS, f"Unknown tool {str(name)[:100]!r}. Call tools/list for the tools this server offers."
    )


def tool(
    name: str,
    *,
    title: str,
    arguments: type[Arguments] = NoArguments,
    needs: frozenset[Need] = frozenset({Need.TOKEN}),
    read_only: bool = True,
    destructive: bool = False,
    idempotent: bool = True,
    secret_arguments: frozenset[str] = frozenset(),
    when_off: bool = False,
    guidance: bool = False,
) -> Callable[[Callable[[CallContext, Any], dict[str, Any]]], Callable[[CallContext, Any], dict[str, Any]]]:
    """Declare a tool; the handler's docstring is its description (with the authoring guidance after it
    for the reads an agent makes before it writes)."""

    def decorate(
        handler: Callable[[CallContext, Any], dict[str, Any]],
    ) -> Callable[[CallContext, Any], dict[str, Any]]:
        description = " ".join((handler.__doc__ or "").split())
        register(
            Tool(
                name=name,
                title=title,
                description=f"{description} {AUTHORING_GUIDANCE}" if guidance else description,
                arguments=arguments,
                handler=handler,
                needs=needs,
                read_only=read_only,
                destructive=destructive,
                idempotent=idempotent,
                secret_arguments=secret_arguments,
                when_off=when_off,
            )
        )
        return handler

    return decorate


def visible_tools(mcp_on: bool = True, *, read_only: bool = False) -> list[Tool]:
    """The tools a principal sees, filtered by the deployment's flags, the caretaker's activation, the master
    switch (while MCP is off, only the tools that say so) and, for a team member whose roster role only reads,
    to the tools that change nothing."""
    override = settings.FORGE_OVERRIDE_SECURITIES
    caretaker = override and is_caretaker()  # never active without override: no lookup in default deployments
    return [
        t
        for t in REGISTRY.values()
        if (override or Need.OVERRIDE not in t.needs)
        and (caretaker or Need.CARETAKER not in t.needs)
        and (mcp_on or t.when_off)
        and (t.read_only or not read_only)
    ]


def find_tool(name: Any) -> Tool | None:
    """A registered tool of this deployment, whether or not the switch lets it answer now."""
    if not isinstance(name, str):
        return None
    found = REGISTRY.get(name)
    if found is None or (Need.OVERRIDE in found.needs and not settings.FORGE_OVERRIDE_SECURITIES):
        return None
    return found


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def decode_cursor(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(str(cursor).encode()))["offset"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        offset = None
    if not isinstance(offset, int) or offset < 0:
        raise RpcError(INVALID_PARAMS, "Invalid params: unknown cursor. Pass back a nextCursor from tools/list.")
    return offset


def list_page(cursor: Any, *, mcp_on: bool, read_only: bool = False) -> dict[str, Any]:
    tools = visible_tools(mcp_on, read_only=read_only)
    offset = decode_cursor(cursor)
    size = settings.FORGE_TOOLS_PAGE_SIZE
    page: dict[str, Any] = {"tools": [t.descriptor() for t in tools[offset : offset + size]]}
    if offset + size < len(tools):
        page["nextCursor"] = encode_cursor(offset + size)
    return page
