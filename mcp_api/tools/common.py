"""What the tool modules share, so that no tool module imports another: the arguments every project
tool takes, the refusals of a project read, and a confirmation's outcome as a tool result (which the
transport also sends when a waiting write call's confirmation is decided).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from pydantic import Field

from confirmations.models import ConfirmationState
from forge_core.errors import Refusal
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from mcp_api.registry import Arguments
from projects import plcopen
from projects.services import ProjectUnavailable


def console_url(confirmation_id: Any) -> str:
    """Where an operator decides a pending confirmation."""
    return f"{settings.FORGE_PUBLIC_URL.rstrip('/')}/console/confirmations/{confirmation_id}/"


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


def outcome_result(outcome: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """An outcome (`confirmations.services.outcome_of`) as a tool result: (structured content, is_error)."""
    answer = dict(outcome)
    state = answer["state"]
    if state == ConfirmationState.EXECUTED:
        return answer, False
    if state in (ConfirmationState.PENDING, ConfirmationState.APPROVED):
        answer["message"] = (
            "Still waiting for an operator's decision in the Forge console; ask again later."
            if state == ConfirmationState.PENDING
            else "Approved; the change is being carried out. Ask again in a moment."
        )
        return answer, False
    return answer, True
