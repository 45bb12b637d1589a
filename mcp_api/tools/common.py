"""What the tool modules share, so that no tool module imports another: the arguments every project
tool takes, the refusals of a project read, and a confirmation's outcome as a tool result (which the
transport also sends when a waiting write call's confirmation is decided).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from forge_core.errors import Refusal
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from mcp_api.registry import Arguments
from mcp_api.results import console_url as console_url
from mcp_api.results import outcome_result as outcome_result
from projects import plcopen
from projects.services import ProjectUnavailable


class ProjectArguments(Arguments):
    """A tool's arguments that name a project: the registry resolves it (and, for a tool that needs one,
    the grant) before the handler runs."""

    project: str = Field(max_length=100, description="The project's slug, from project.list.")
    session_handle: str | None = Field(
        default=None,
        max_length=64,
        description="Stateless (2026-07-28) clients only: the handle session.request_access gave you.",
    )


CURSOR = Field(default=None, max_length=2000, description="The next_cursor of the previous page, to continue.")


def read(call: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run a read; a bad cursor or limit is the client's to fix (-32602), an unknown element a refusal."""
    try:
        return call(*args, **kwargs)
    except ProjectUnavailable as exc:
        raise Refusal("FORGE_ERR_NOT_FOUND", f"The project cannot be read now: {exc}.") from None
    except plcopen.ElementNotFound as exc:
        raise Refusal(
            "FORGE_ERR_NOT_FOUND", f"{exc}. Use project.find or project.overview to see the element ids."
        ) from None
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}.") from None
