"""The one error family: a service's refusal, as each edge shows it (DESIGN section 12).

One behaviour per edge: an MCP tool's result, a JSON-RPC error where a refusal meets a method outside a
tool call, a REST body (RFC 9457 problem details, for a refusal and for the framework's own errors alike),
and a console message.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.messages import constants, get_messages
from django.test import Client
from rest_framework.test import APIClient

from access.grants import do_decide_access, raise_request
from access.models import AccessRequest, Transport
from access.services import do_open_session
from forge_core.errors import AuditUnavailable, Refusal
from mcp_api import protocol
from mcp_api.jsonrpc import INTERNAL_ERROR
from mcp_api.protocol import CallContext, respond
from mcp_api.registry import NoArguments, Tool
from projects.models import Project
from tests.mcp_api.helpers import registered

pytestmark = pytest.mark.django_db

PROBLEM_JSON = "application/problem+json"


@pytest.fixture
def decided(cast) -> AccessRequest:
    project = Project.objects.create(slug="line-3", name="Line 3", path="line-3.xml", fingerprint="0" * 64)
    session = do_open_session(cast.caretaker.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    request = raise_request(cast.caretaker.token, session, project)
    return do_decide_access(request.pk, allow=False, user=cast.operator.user)


def tools_call(cast, name: str) -> dict:
    ctx = CallContext(token=cast.operator.token, revision="2025-11-25", transport=Transport.STREAMABLE_HTTP)
    return respond(ctx, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name}})


def refusing_tool(refusal: Exception) -> Tool:
    def handler(ctx, args):
        raise refusal

    return Tool(
        name="test.refuses",
        title="Refuses",
        description="Always refuses.",
        arguments=NoArguments,
        handler=handler,
        when_off=True,
    )


def test_a_refusal_in_a_tool_call_is_an_error_result_with_its_code_message_and_details(cast):
    refusal = Refusal("FORGE_ERR_STALE_REVISION", "The draft moved on; read draft.status.", current_working_revision=4)

    with registered(refusing_tool(refusal)):
        result = tools_call(cast, "test.refuses")["result"]

    structured = {
        "error": "FORGE_ERR_STALE_REVISION",
        "message": "The draft moved on; read draft.status.",
        "current_working_revision": 4,
    }
    assert result["isError"] is True
    assert result["structuredContent"] == structured
    assert [json.loads(item["text"]) for item in result["content"]] == [structured]


def test_a_refusal_outside_a_tool_call_is_a_jsonrpc_internal_error_naming_its_code(cast, monkeypatch):
    def tools_list(ctx, params):
        raise AuditUnavailable("disk full")

    monkeypatch.setitem(protocol.METHODS, "tools/list", protocol.Method(tools_list))
    ctx = CallContext(token=cast.operator.token, revision="2025-11-25", transport=Transport.STREAMABLE_HTTP)

    error = respond(ctx, {"jsonrpc": "2.0", "id": 8, "method": "tools/list"})["error"]

    assert error["code"] == INTERNAL_ERROR
    assert error["message"].startswith("FORGE_ERR_AUDIT_UNAVAILABLE: The audit log cannot be written")
    assert error["data"]["error"] == "FORGE_ERR_AUDIT_UNAVAILABLE"
    assert "disk full" not in json.dumps(error)


def test_a_refusal_on_the_rest_api_is_problem_details(cast, decided):
    client = APIClient()
    client.force_login(cast.operator.user)

    response = client.post(f"/api/access-requests/{decided.pk}/allow")

    assert response.status_code == 409
    assert response["Content-Type"] == PROBLEM_JSON
    assert response.json() == {
        "type": "about:blank",
        "title": "Conflict",
        "status": 409,
        "detail": "This request is denied already; nothing was changed.",
        "code": "FORGE_ERR_ACCESS_ALREADY_DECIDED",
    }


def test_a_refusal_of_the_framework_on_the_rest_api_is_problem_details_too(cast):
    client = APIClient()
    client.force_login(cast.operator.user)

    response = client.get("/api/access-requests", {"colour": "red"})

    assert response.status_code == 400
    assert response["Content-Type"] == PROBLEM_JSON
    body = response.json()
    assert (body["type"], body["title"], body["status"], body["code"]) == (
        "about:blank",
        "Bad Request",
        400,
        "FORGE_ERR_BAD_PARAMETER",
    )
    assert body["detail"].startswith("Unknown parameter 'colour'")


def test_the_schema_documents_refusals_as_problem_details(cast):
    client = APIClient()
    client.force_login(cast.operator.user)

    document = client.get("/api/schema/", {"format": "json"}).json()

    refused = document["paths"]["/api/access-requests/{request_id}/allow"]["post"]["responses"]["409"]
    assert list(refused["content"]) == [PROBLEM_JSON]
    problem = document["components"]["schemas"]["ProblemDetails"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}


def test_a_refusal_on_a_console_screen_is_an_error_message(cast, decided):
    client = Client()
    client.force_login(cast.operator.user)

    page = client.post(
        "/console/access/accessrequest/", {"action": "allow", "_selected_action": [str(decided.pk)]}, follow=True
    )

    shown = [(message.level, message.message) for message in get_messages(page.wsgi_request)]
    assert shown == [(constants.ERROR, f"Request {decided.pk}: This request is denied already; nothing was changed.")]
