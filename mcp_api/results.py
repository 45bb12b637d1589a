"""A tool's result as the wire carries it, built in one place for every path that answers a tool call: the
call itself (`mcp_api.protocol`), a write call's waiting stream, and the forms in which a governed call's
outcome reaches a client later (`editor.confirm`, a task's result, the retry of an `input_required` call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from confirmations.models import ConfirmationState
from forge_core.errors import Refusal
from mcp_api.jsonrpc import one_pass_encoder

OVERRIDE_BANNER = (
    "OVERRIDE MODE: this Forge server was started with FORGE_OVERRIDE_SECURITIES=1, so direct write tools "
    "(project.write.*) exist. Each still waits for an operator's approval in the Forge console; nothing is "
    "written until then."
)


_TEXT = one_pass_encoder(separators=(", ", ": "), default=str)
"""The structured content's text block: `json.dumps(..., ensure_ascii=False, default=str)`."""


@dataclass(frozen=True)
class Content:
    """A tool's answer as content blocks, for a result that is not one JSON object: text, an image, audio, an
    embedded resource (the MCP content types). Most tools return a dict, which becomes structured content."""

    blocks: tuple[dict[str, Any], ...]


def tool_result(structured: dict[str, Any] | Content, *, is_error: bool = False) -> dict[str, Any]:
    if isinstance(structured, Content):
        blocks = list(structured.blocks)
        if settings.FORGE_OVERRIDE_SECURITIES:
            blocks.append({"type": "text", "text": OVERRIDE_BANNER})
        return {"content": blocks, "isError": is_error}
    if settings.FORGE_OVERRIDE_SECURITIES:
        structured = {**structured, "warnings": [*structured.get("warnings", []), OVERRIDE_BANNER]}
    return {
        "content": [{"type": "text", "text": _TEXT(structured)}],
        "structuredContent": structured,
        "isError": is_error,
    }


def refused_result(refusal: Refusal) -> dict[str, Any]:
    """A refusal as a tool's result: `isError`, its code and message (and details) as structured content."""
    return tool_result(refusal.structured(), is_error=True)


def console_url(confirmation_id: Any) -> str:
    """Where an operator decides a pending confirmation."""
    return f"{settings.FORGE_PUBLIC_URL.rstrip('/')}/console/confirmations/{confirmation_id}/"


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


def outcome_tool_result(outcome: dict[str, Any]) -> dict[str, Any]:
    """A governed call's outcome as the tool result the call would have answered with."""
    structured, is_error = outcome_result(outcome)
    return tool_result(structured, is_error=is_error)
