"""A tool call that fails inside with an unexpected error: the client gets a bare -32603 (no library text), what
the handler did is rolled back, and the attempt is still on the audit record."""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import EventKind
from mcp_api.jsonrpc import INTERNAL_ERROR
from mcp_api.registry import Arguments, Tool
from tests.mcp_api.helpers import audit_events, open_session, post, registered, rpc

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def _broken(ctx: Any, args: Arguments) -> dict[str, Any]:
    raise RuntimeError("a bug inside the tool")


@pytest.mark.usefixtures("mcp_on")
async def test_a_call_that_fails_inside_still_leaves_its_audit_row(cast):
    session_id = await open_session(cast.operator.raw_token, "2025-06-18")
    tool = Tool(name="test.broken", title="Broken", description="Fails inside.", arguments=Arguments, handler=_broken)

    with registered(tool):
        response = await post(
            cast.operator.raw_token,
            rpc("tools/call", {"name": "test.broken", "arguments": {}}, id=11),
            session_id=session_id,
        )

    assert response.status == 200
    assert response.json()["id"] == 11
    assert response.error_code == INTERNAL_ERROR
    assert "a bug inside" not in response.body.decode()
    [call] = await audit_events(EventKind.TOOL_CALL)
    assert (call.tool, call.outcome, call.session) == ("test.broken", "internal_error", session_id)
