"""What every registered tool declares it needs is what the registry enforces, before its handler runs.

Each tool's handler is swapped for a spy that records whether it ran; every tool of the table (the
direct-write tools included) is then called through `Tool.run`, the registry's one way into a handler,
without the need it declares. A tool whose handler runs anyway fails the test, and the checker's own test
shows it would notice a gate that lets calls through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from access.grants import do_decide_access, raise_request
from access.models import AccessState, McpSession, Transport
from access.services import do_open_session, mint_handle
from forge_core.errors import Refusal
from mcp_api import registry
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from mcp_api.protocol import CallContext, respond
from mcp_api.registry import REGISTRY, Need, Tool
from mcp_api.tools.writes import register_write_tools, unregister_write_tools
from projects.models import Project
from tests.mcp_api.helpers import registered

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_on")]

# The one tool that names a project without needing a grant: it is how a session asks for one.
ASKS_FOR_THE_GRANT = {"session.request_access"}


@pytest.fixture
def override(settings) -> Iterator[None]:
    settings.FORGE_OVERRIDE_SECURITIES = True
    register_write_tools()
    yield
    unregister_write_tools()


@pytest.fixture
def line(cast) -> Project:
    return Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)


@pytest.fixture
def session(cast) -> McpSession:
    return do_open_session(cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")


class Spy:
    """Stands in for every handler: records which tools ran and with which project."""

    def __init__(self) -> None:
        self.ran: dict[str, str] = {}

    def handler_for(self, name: str):
        def handle(ctx: CallContext, args: Any) -> dict[str, Any]:
            self.ran[name] = ctx.project.slug if ctx.target is not None else ""
            return {}

        return handle


@pytest.fixture
def spy(monkeypatch, override) -> Spy:
    spy = Spy()
    for name, tool in list(REGISTRY.items()):
        monkeypatch.setitem(REGISTRY, name, dataclasses.replace(tool, handler=spy.handler_for(name)))
    return spy


def grant_tools() -> list[str]:
    return sorted(name for name, tool in REGISTRY.items() if Need.GRANT in tool.needs)


def context(cast, session: McpSession | None, *, caller=None) -> CallContext:
    member = caller or cast.operator
    revision = "2025-11-25" if session is not None else "2026-07-28"
    return CallContext(token=member.token, revision=revision, transport=Transport.STREAMABLE_HTTP, session=session)


def call(tool: Tool, ctx: CallContext, **arguments: Any) -> str | None:
    """Run the tool as tools/call does (its required arguments are not needed: the spy reads none);
    the refusal's code, or None when the handler ran."""
    try:
        tool.run(ctx, tool.arguments.model_construct(**arguments))
    except Refusal as refusal:
        return refusal.code
    return None


def grant_violations(cast, project: Project, session: McpSession, spy: Spy) -> list[str]:
    """The grant-needing tools whose handler runs without this session's grant, or whose refusal is not
    the consent gate's."""
    found = []
    for name in grant_tools():
        code = call(REGISTRY[name], context(cast, session), project=project.slug)
        if name in spy.ran or code not in ("FORGE_ERR_PROJECT_ACCESS_PENDING", "FORGE_ERR_PROJECT_ACCESS_DENIED"):
            found.append(f"{name}: {code or 'its handler ran'}")
    return found


def test_the_table_has_grant_tools_of_every_family(override):
    families = {name.rsplit(".", 1)[0] for name in grant_tools()}
    assert {"project", "draft", "change_group", "project.write"} <= families


def test_every_tool_that_names_a_project_needs_a_grant_unless_it_asks_for_one(override):
    names_a_project = {name for name, tool in REGISTRY.items() if "project" in tool.arguments.model_fields}
    assert names_a_project - set(grant_tools()) == ASKS_FOR_THE_GRANT


def test_no_grant_tool_runs_before_an_operator_decides(cast, line, session, spy):
    assert grant_violations(cast, line, session, spy) == []
    assert spy.ran == {}
    assert raise_request(cast.operator.token, session, line).state == AccessState.PENDING


def test_no_grant_tool_runs_on_a_denied_grant(cast, line, session, spy):
    request = raise_request(cast.operator.token, session, line)
    do_decide_access(request.pk, allow=False, user=cast.operator.user)

    codes = {name: call(REGISTRY[name], context(cast, session), project=line.slug) for name in grant_tools()}

    assert spy.ran == {}
    assert set(codes.values()) == {"FORGE_ERR_PROJECT_ACCESS_DENIED"}


def test_no_grant_tool_runs_for_a_stateless_call_without_a_session_handle(cast, line, spy):
    codes = {name: call(REGISTRY[name], context(cast, None), project=line.slug) for name in grant_tools()}

    assert spy.ran == {}
    assert set(codes.values()) == {"FORGE_ERR_PROJECT_ACCESS_PENDING"}


def test_no_tool_runs_on_a_session_handle_that_is_not_the_callers(cast, line, spy):
    handle = mint_handle(cast.other_operator.token, "2026-07-28", {})
    takes_a_handle = sorted(name for name, tool in REGISTRY.items() if "session_handle" in tool.arguments.model_fields)

    codes = {
        name: call(REGISTRY[name], context(cast, None), project=line.slug, session_handle=handle.id)
        for name in takes_a_handle
    }

    # A caretaker tool is refused before any handle is looked up while this server is no caretaker.
    assert spy.ran == {}
    assert codes == {
        name: "FORGE_ERR_NOT_CARETAKER" if Need.CARETAKER in REGISTRY[name].needs else "FORGE_ERR_NOT_FOUND"
        for name in takes_a_handle
    }


def test_no_tool_runs_on_a_project_the_principal_may_not_view(cast, line, spy):
    session = do_open_session(cast.caretaker.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    names_a_project = sorted(name for name, tool in REGISTRY.items() if "project" in tool.arguments.model_fields)

    codes = {
        name: call(REGISTRY[name], context(cast, session, caller=cast.caretaker), project=line.slug)
        for name in names_a_project
    }

    assert spy.ran == {}
    assert set(codes.values()) == {"FORGE_ERR_NOT_FOUND"}


def test_every_grant_tool_receives_its_granted_project(cast, line, session, spy):
    request = raise_request(cast.operator.token, session, line)
    do_decide_access(request.pk, allow=True, user=cast.operator.user)

    codes = {name: call(REGISTRY[name], context(cast, session), project=line.slug) for name in grant_tools()}

    assert set(codes.values()) == {None}
    assert spy.ran == dict.fromkeys(grant_tools(), "line-3")


def test_an_override_tool_is_unknown_where_override_is_off(cast, line, session, spy, settings):
    settings.FORGE_OVERRIDE_SECURITIES = False
    override_tools = sorted(name for name, tool in REGISTRY.items() if Need.OVERRIDE in tool.needs)
    assert override_tools

    for name in override_tools:
        ctx = context(cast, session)
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {}}}
        assert respond(ctx, message)["error"]["code"] == INVALID_PARAMS
        with pytest.raises(RpcError):
            REGISTRY[name].run(ctx, REGISTRY[name].arguments.model_construct(project=line.slug))
    assert spy.ran == {}


def test_a_caretaker_tool_is_refused_until_the_caller_is_the_caretaker(cast, session, monkeypatch):
    ran = []
    caretaker_tool = Tool(
        name="test.caretaker",
        title="Caretaker only",
        description="A tool only the caretaker may call.",
        arguments=registry.NoArguments,
        handler=lambda ctx, args: ran.append(ctx.called_by) or {},
        needs=frozenset({Need.TOKEN, Need.CARETAKER}),
    )
    with registered(caretaker_tool) as tool:
        assert call(tool, context(cast, session)) == "FORGE_ERR_NOT_CARETAKER"
        assert ran == []

        monkeypatch.setattr(registry, "is_caretaker", lambda ctx: True)
        assert call(tool, context(cast, session)) is None
    assert ran == ["olivia"]


def test_a_tool_that_needs_a_grant_must_take_a_project_argument():
    with pytest.raises(ValueError, match="must name the project"):
        registry.register(
            Tool(
                name="test.projectless",
                title="Projectless",
                description="Needs a grant but names no project.",
                arguments=registry.NoArguments,
                handler=lambda ctx, args: {},
                needs=registry.NEEDS_GRANT,
            )
        )
    assert "test.projectless" not in REGISTRY


def test_the_checker_notices_a_gate_that_lets_calls_through(cast, line, session, spy, monkeypatch):
    monkeypatch.setattr(registry, "admit", lambda tool, ctx, arguments: None)

    violations = grant_violations(cast, line, session, spy)

    assert [found.split(":")[0] for found in violations] == grant_tools()
    assert set(spy.ran) == set(grant_tools())


def test_the_gate_reads_nothing_twice_for_a_granted_call(cast, line, session, override, django_assert_num_queries):
    request = raise_request(cast.operator.token, session, line)
    do_decide_access(request.pk, allow=True, user=cast.operator.user)
    tool = REGISTRY["project.overview"]
    ctx = context(cast, session)
    ctx.token.owner.has_perm("projects.view_project")  # the owner's permissions, as an earlier call loaded them

    # The project, then the grant (its savepoint, the locked read, the release): the switch was read by
    # the method layer already and the session came with the transport.
    with django_assert_num_queries(4):
        registry.admit(tool, ctx, tool.arguments.model_construct(project=line.slug))
    assert ctx.project == line
