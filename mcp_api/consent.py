"""The consent gates as a tool call meets them: the MCP switch (gate 1), then this session's grant on the
project (gate 2), each refusal a tool error that tells the client what to do next.

The grants themselves (access requests, operators' decisions) live in `access.grants`; a call with no
grant raises the request there, for an operator to decide.
"""

from __future__ import annotations

from access.grants import raise_request
from access.hotpath import mcp_enabled
from access.models import AccessState, ClientToken, McpSession
from mcp_api.registry import ToolError
from projects.models import Project


def require_grant(token: ClientToken, session: McpSession | None, project: Project) -> None:
    """Let a project call through only on an allowed grant; otherwise raise the refusal that says why."""
    if not mcp_enabled():
        raise ToolError(
            "FORGE_ERR_MCP_DISABLED",
            "MCP is switched off by the operators of this Forge server. Ask an operator to switch it on in "
            "the Forge console.",
        )
    if session is None:
        raise ToolError(
            "FORGE_ERR_PROJECT_ACCESS_PENDING",
            "This stateless call names no session handle. Call session.request_access with the project to "
            "get one, then pass it as session_handle with every project call.",
        )
    request = raise_request(token, session, project)
    if request.state == AccessState.PENDING:
        raise ToolError(
            "FORGE_ERR_PROJECT_ACCESS_PENDING",
            f"Access to {project.slug} waits for an operator's decision in the Forge console. Ask again "
            "later; session.status lists your pending requests.",
            project=project.slug,
        )
    if request.state != AccessState.ALLOWED:
        raise ToolError(
            "FORGE_ERR_PROJECT_ACCESS_DENIED",
            f"Access to {project.slug} was {request.state} by an operator. Ask the operators of this Forge "
            "server if you need it.",
            project=project.slug,
        )
