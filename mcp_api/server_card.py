"""What a client may learn about this server before it connects: the MCP Server Card (SEP-2127) at
`GET /mcp/server-card` (the MCP endpoint's URL plus `/server-card`, the place the Server Card extension
reserves), and the catalogs that point at it, `/.well-known/ai-catalog.json` (the AI Catalog) and
`/.well-known/mcp/catalog.json` (the MCP Catalog, its MCP-only subset).

The card names the server, its version and its remotes: the Streamable HTTP endpoint with every revision it
speaks, and the legacy HTTP+SSE endpoint with 2024-11-05, each as the request's own scheme and Host reach it.
It lists no tool, resource or prompt (those depend on who asks, and a card is the same for everyone), names no
project and carries no secret. It is public, so no token is asked for, and cacheable for an hour. A Host outside ALLOWED_HOSTS is
refused by Django as on every page (400); a browser Origin is checked as on the MCP endpoints (a 403 that says
why, audited), and an allowed one may read the documents (CORS).
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import split_domain_port
from django.views.decorators.http import require_safe

from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable
from forge_core.origin import refusal_reason
from mcp_api.protocol import SERVER_INFO, SERVER_VERSION
from mcp_api.revisions import ALL_REVISIONS

CARD_SCHEMA = "https://static.modelcontextprotocol.io/schemas/v2/server-card.schema.json"
CARD_TYPE = "application/mcp-server-card+json"
AI_CATALOG_TYPE = "application/ai-catalog+json"
CARD_NAME = "dev.forge/forge-mcp"  # reverse-DNS namespace / name; the namespace of Forge's own _meta keys
CARD_DESCRIPTION = "IEC 61131-3 PLC projects (PLCopen XML) for AI clients; people approve every change."
MAX_AGE_SECONDS = 3600
LEGACY_REVISIONS = ["2024-11-05"]

AUTHORIZATION = {
    "name": "Authorization",
    "description": "Bearer and a Forge client token (fmcp_...) an operator made in the console or with "
    "'manage.py create_token'. Over HTTPS a team member's client certificate may stand in for it.",
    "isRequired": True,
    "isSecret": True,
}


@require_safe
def server_card(request: HttpRequest) -> HttpResponse:
    refused = _refused(request)
    if refused is not None:
        return refused
    base = _base(request)
    card = {
        "$schema": CARD_SCHEMA,
        "name": CARD_NAME,
        "version": SERVER_VERSION,
        "title": SERVER_INFO["title"],
        "description": CARD_DESCRIPTION,
        "remotes": [
            {
                "type": "streamable-http",
                "url": f"{base}/mcp",
                "headers": [AUTHORIZATION],
                "supportedProtocolVersions": list(ALL_REVISIONS),
            },
            {
                "type": "sse",
                "url": f"{base}/sse",
                "headers": [AUTHORIZATION],
                "supportedProtocolVersions": LEGACY_REVISIONS,
            },
        ],
    }
    return _public(request, card, CARD_TYPE)


@require_safe
def ai_catalog(request: HttpRequest) -> HttpResponse:
    refused = _refused(request)
    if refused is not None:
        return refused
    return _public(request, {"specVersion": "1.0", "entries": [_entry(request)]}, AI_CATALOG_TYPE)


@require_safe
def mcp_catalog(request: HttpRequest) -> HttpResponse:
    refused = _refused(request)
    if refused is not None:
        return refused
    entry = {**_entry(request), "displayName": SERVER_INFO["title"]}
    return _public(request, {"specVersion": "draft", "entries": [entry]}, "application/json")


def _entry(request: HttpRequest) -> dict[str, Any]:
    """The catalog entry of this server: a discovery URN anchored on the Host it was asked through (the
    publisher's domain, as the catalogs' `urn:air` convention asks), and where its card is."""
    domain, _port = split_domain_port(request.get_host())
    publisher = domain.strip("[]").replace(":", "-")  # an IPv6 literal holds colons, which separate URN parts
    return {
        "identifier": f"urn:air:{publisher}:mcp:{CARD_NAME.rpartition('/')[2]}",
        "type": CARD_TYPE,
        "url": f"{_base(request)}/mcp/server-card",
    }


def _base(request: HttpRequest) -> str:
    return f"{request.scheme}://{request.get_host()}"


def _refused(request: HttpRequest) -> HttpResponse | None:
    """A 403 naming the reason, audited, for a browser Origin (or Host) this server does not serve."""
    sent = {name: request.headers.get(name) for name in ("host", "origin")}
    reason = refusal_reason({name: value for name, value in sent.items() if value is not None})
    if reason is None:
        return None
    with contextlib.suppress(AuditUnavailable):
        record(EventKind.ORIGIN_REFUSED, arguments={"path": request.path[:200], "reason": reason}, outcome="refused")
    return JsonResponse({"error": "forbidden", "message": f"Forbidden: {reason}"}, status=403)


def _public(request: HttpRequest, document: dict[str, Any], content_type: str) -> HttpResponse:
    response = JsonResponse(document, content_type=content_type, json_dumps_params={"ensure_ascii": False})
    response["Cache-Control"] = f"public, max-age={MAX_AGE_SECONDS}"
    # A browser page on an allowed origin may read it; any other origin was refused above.
    origin = request.headers.get("Origin")
    if origin is not None:
        response["Access-Control-Allow-Origin"] = origin
    response["Vary"] = "Origin"
    return response
