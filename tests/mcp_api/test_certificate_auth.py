"""The MCP edge with team certificates: a chain in the scope's TLS extension (as the TLS listener sets it) is the
credential, a refused one is 401 with its reason whatever token comes with it, nothing a client writes in a
header is ever taken for a certificate, and an observer's role only reads."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async

from access.models import McpSession
from audit.models import AuditEvent, EventKind
from mcp_api.registry import REGISTRY
from tests.mcp_api.helpers import initialize_message, notification, post, rpc
from tests.team_tls import Member, issue_here, revoke_here

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

FORGED_HEADERS = (
    "x-client-cert",
    "ssl-client-cert",
    "x-ssl-client-cert",
    "x-forwarded-client-cert",
    "x-tls-client-cert",
)


@pytest.fixture
def alice(active, tmp_path, mcp_on) -> Member:
    return issue_here(active.caretaker, tmp_path / "client", "alice@team")


@pytest.fixture
def olive(active, tmp_path, mcp_on) -> Member:
    return issue_here(active.caretaker, tmp_path / "client", "olive@team", role="observer")


def tls(member: Member) -> dict:
    """The scope extension the TLS listener sets for a connection that presented `member`'s certificate."""
    return {"tls": {"client_cert_chain": [member.cert_pem], "client_cert_error": None, "server_cert": None}}


async def open_peer_session(member: Member) -> str:
    opened = await post(None, initialize_message(), extensions=tls(member))
    assert opened.status == 200, opened.body
    session_id = opened.headers["mcp-session-id"]
    done = await post(None, notification("notifications/initialized"), session_id=session_id, extensions=tls(member))
    assert done.status == 202
    return session_id


async def call(member: Member, session_id: str, name: str, arguments: dict | None = None, *, id: int = 5):
    message = rpc("tools/call", {"name": name, "arguments": arguments or {}}, id=id)
    response = await post(None, message, session_id=session_id, extensions=tls(member))
    assert response.status == 200, response.body
    return response.json()["result"]


@database_sync_to_async
def session_owner(session_id: str) -> str:
    return McpSession.objects.select_related("token__owner").get(pk=session_id).token.owner.get_username()


@database_sync_to_async
def last_tool_call(tool: str) -> AuditEvent:
    return AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool=tool).latest("seq")


async def test_a_roster_peer_s_certificate_opens_a_session_of_its_own_principal_without_a_token(alice):
    session_id = await open_peer_session(alice)

    assert await session_owner(session_id) == "peer:alice@team"
    status = await call(alice, session_id, "session.status")
    assert status["structuredContent"]["owner"] == "peer:alice@team"
    row = await last_tool_call("session.status")
    assert row.called_by == "peer:alice@team"


async def test_a_refused_certificate_is_401_with_its_reason_even_beside_a_valid_token(alice, active, cast):
    await database_sync_to_async(revoke_here)(active.caretaker, "alice@team")

    response = await post(cast.operator.raw_token, initialize_message(), extensions=tls(alice))

    assert response.status == 401
    error = response.json()["error"]
    assert error["data"] == {"reason": "revoked"}
    assert "revoked" in error["message"]
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_a_certificate_written_into_a_header_is_never_read(alice, cast):
    pem = alice.cert_pem
    forged = {name: quote(pem) for name in FORGED_HEADERS}

    without_token = await post(None, initialize_message(), extra=forged)
    with_token = await post(cast.operator.raw_token, initialize_message(), extra=forged)

    assert without_token.status == 401
    assert "Bearer" in without_token.json()["error"]["message"]
    assert with_token.status == 200
    assert await session_owner(with_token.headers["mcp-session-id"]) == cast.operator.token.owner.get_username()


async def test_a_scope_without_the_tls_extension_carries_no_certificate(alice):
    response = await post(None, initialize_message(), extensions={"tls": {"client_cert_chain": []}})

    assert response.status == 401


async def test_an_observer_sees_only_the_tools_that_change_nothing(olive):
    session_id = await open_peer_session(olive)

    listed = await post(None, rpc("tools/list", id=3), session_id=session_id, extensions=tls(olive))
    names = {tool["name"] for tool in listed.json()["result"]["tools"]}

    assert names
    assert all(REGISTRY[name].read_only for name in names)
    assert any(not tool.read_only for tool in REGISTRY.values())


async def test_an_observer_calling_a_tool_that_changes_something_is_refused_for_its_role(olive):
    session_id = await open_peer_session(olive)
    writer = next(tool for tool in REGISTRY.values() if not tool.read_only and "project" in tool.arguments.model_fields)

    result = await call(olive, session_id, writer.name, {"project": "anything"})

    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "FORGE_ERR_READ_ONLY_ROLE"
    assert json.loads(result["content"][0]["text"])["error"] == "FORGE_ERR_READ_ONLY_ROLE"
