"""Tools that work before consent and never return project content: `server_info`, `session.status`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from pydantic import Field

from access import grants, hotpath, tls
from access.models import Transport
from caretaker import trust
from mcp_api import registry
from mcp_api.protocol import SERVER_NAME, SERVER_VERSION, CallContext
from mcp_api.registry import Arguments, NoArguments, tool
from mcp_api.revisions import ALL_REVISIONS


@tool("server_info", title="Server information", when_off=True)
def server_info(ctx: CallContext, args: NoArguments) -> dict[str, Any]:
    """What this Forge MCP server is: its version, the MCP revisions and transports it speaks, whether
    the deployment runs in override mode, and the team certificate authorities it trusts.

    `tls` is null unless this process serves HTTPS; then it gives the port and the server certificate: its
    SHA-256 fingerprint, memorable ID and randomart (compare them with what your client shows before you trust
    the certificate), names and expiry. `mtls` says whether a team member may present the certificate the
    caretaker issued instead of a token: HTTPS is served and the trust store holds a CA."""
    cas = trust.trusted()
    served = tls.served()
    return {
        "name": SERVER_NAME,
        "version": SERVER_VERSION,
        "revisions": list(ALL_REVISIONS),
        "transports": {"streamable_http": "/mcp", "legacy_sse": "/sse", "stdio": "python manage.py mcp_stdio"},
        "override_securities": settings.FORGE_OVERRIDE_SECURITIES,
        "mcp_enabled": hotpath.mcp_enabled(ctx.token),
        "trust_store_cas": [entry.describe() for entry in cas],
        "caretaker": {"active": registry.is_caretaker()},
        "tls": served,
        "mtls": served is not None and bool(cas),
    }


class StatusArguments(Arguments):
    session_handle: str | None = Field(
        default=None,
        max_length=64,
        description="Stateless (2026-07-28) clients: the handle session.request_access gave you, to see its "
        "grants and context generation.",
    )


@tool("session.status", title="Session status", arguments=StatusArguments, when_off=True)
def session_status(ctx: CallContext, args: StatusArguments) -> dict[str, Any]:
    """Who this session is and what it may do: the negotiated revision, the principal and client label,
    the session id (none for stateless clients), its grants and its context generation (pass it as
    expected_context_generation to the change_group tools)."""
    session = ctx.session
    return {
        "revision": ctx.revision,
        "transport": ctx.transport,
        "principal": ctx.token.principal,
        "owner": ctx.called_by,
        "client_label": ctx.token.label,
        "client_info": ctx.client_info,
        "session_id": session.id if session is not None and session.transport != Transport.HANDLE else None,
        "session_handle": session.id if session is not None and session.transport == Transport.HANDLE else None,
        "stateless": ctx.stateless,
        "context_generation": session.context_generation if session is not None else 0,
        "access": grants.grants_of(session) if session is not None else [],
        **_switch_status(ctx),
    }


def _switch_status(ctx: CallContext) -> dict[str, Any]:
    if hotpath.mcp_enabled(ctx.token):
        return {"mcp_enabled": True}
    return {
        "mcp_enabled": False,
        "what_to_do": "MCP is switched off: ask an operator to switch it on in the Forge console (dashboard).",
    }
