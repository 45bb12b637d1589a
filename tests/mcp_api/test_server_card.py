"""The Server Card at /mcp/server-card and the catalogs that point at it: public (no token), cacheable, the
server's identity and its remotes as the request's Host reaches them, no tool list, no project; the Host and
Origin checked as on the MCP endpoints."""

from __future__ import annotations

import json

import pytest

from audit.models import AuditEvent, EventKind
from mcp_api.protocol import SERVER_VERSION
from mcp_api.revisions import ALL_REVISIONS
from mcp_api.server_card import CARD_SCHEMA, CARD_TYPE
from projects.models import Project
from tests.mcp_api.helpers import mcp_headers, send

pytestmark = pytest.mark.django_db


def get(client, path: str, **headers: str):
    return client.get(path, **{f"HTTP_{name.upper()}": value for name, value in headers.items()})


def test_the_card_names_the_server_and_its_remotes_as_the_host_reaches_them(client):
    response = get(client, "/mcp/server-card", host="localhost:8123")

    assert response.status_code == 200
    assert response["Content-Type"] == CARD_TYPE
    assert response["Cache-Control"] == "public, max-age=3600"
    card = json.loads(response.content)
    assert card["$schema"] == CARD_SCHEMA
    assert card["name"] == "dev.forge/forge-mcp"
    assert card["version"] == SERVER_VERSION
    assert 0 < len(card["description"]) <= 100
    streamable, legacy = card["remotes"]
    assert (streamable["type"], streamable["url"]) == ("streamable-http", "http://localhost:8123/mcp")
    assert streamable["supportedProtocolVersions"] == list(ALL_REVISIONS)
    assert (legacy["type"], legacy["url"], legacy["supportedProtocolVersions"]) == (
        "sse",
        "http://localhost:8123/sse",
        ["2024-11-05"],
    )
    assert streamable["headers"][0]["name"] == "Authorization"
    assert set(card) == {"$schema", "name", "version", "title", "description", "remotes"}  # no tools, no _meta


def test_over_https_the_remotes_are_https(client):
    response = client.get("/mcp/server-card", HTTP_HOST="127.0.0.1:8443", secure=True)

    assert [remote["url"] for remote in json.loads(response.content)["remotes"]] == [
        "https://127.0.0.1:8443/mcp",
        "https://127.0.0.1:8443/sse",
    ]


def test_the_card_names_no_project_and_no_token(client, cast):
    Project.objects.create(slug="secret-plant", name="Secret plant", path="/nowhere/secret.xml")

    body = get(client, "/mcp/server-card", host="127.0.0.1:8000").content.decode()

    assert "secret-plant" not in body and "Secret plant" not in body
    assert cast.operator.raw_token not in body and "fmcp_" in body  # the token's kind is named, never a token


def test_the_ai_catalog_points_at_the_card(client):
    response = get(client, "/.well-known/ai-catalog.json", host="localhost:8123")

    assert response["Content-Type"] == "application/ai-catalog+json"
    assert response["Cache-Control"] == "public, max-age=3600"
    assert json.loads(response.content) == {
        "specVersion": "1.0",
        "entries": [
            {
                "identifier": "urn:air:localhost:mcp:forge-mcp",
                "type": CARD_TYPE,
                "url": "http://localhost:8123/mcp/server-card",
            }
        ],
    }


def test_the_mcp_catalog_names_the_card_with_a_display_name(client):
    [entry] = json.loads(get(client, "/.well-known/mcp/catalog.json", host="[::1]:8000").content)["entries"]

    assert entry["identifier"] == "urn:air:--1:mcp:forge-mcp"
    assert entry["displayName"] == "Forge MCP"
    assert entry["url"] == "http://[::1]:8000/mcp/server-card"


def test_a_host_that_is_not_allowed_is_refused_as_everywhere_on_the_site(client):
    response = get(client, "/mcp/server-card", host="evil.example")

    assert response.status_code == 400  # Django's own refusal of a Host outside ALLOWED_HOSTS
    assert b"evil.example" not in response.content


def test_a_foreign_browser_origin_is_refused_and_audited(client):
    response = get(client, "/mcp/server-card", host="127.0.0.1:8000", origin="https://evil.example")

    assert response.status_code == 403
    assert "FORGE_ALLOWED_ORIGINS" in json.loads(response.content)["message"]
    [row] = AuditEvent.objects.filter(kind=EventKind.ORIGIN_REFUSED)
    assert row.arguments["path"] == "/mcp/server-card"


def test_the_catalog_refuses_a_foreign_origin_and_a_loopback_one_may_read_the_card(client):
    foreign = get(client, "/.well-known/ai-catalog.json", host="127.0.0.1:8000", origin="https://evil.example")
    loopback = get(client, "/mcp/server-card", host="127.0.0.1:8000", origin="http://localhost:6274")

    assert foreign.status_code == 403
    assert loopback.status_code == 200
    assert loopback["Access-Control-Allow-Origin"] == "http://localhost:6274"
    assert loopback["Vary"] == "Origin"


def test_only_get_and_head_are_answered(client):
    assert client.post("/mcp/server-card", HTTP_HOST="127.0.0.1:8000").status_code == 405
    assert client.head("/mcp/server-card", HTTP_HOST="127.0.0.1:8000").status_code == 200


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_the_asgi_router_sends_the_card_to_django_not_to_the_mcp_endpoint():
    response = await send("GET", "/mcp/server-card", headers=mcp_headers(None, accept=CARD_TYPE))

    assert response.status == 200
    assert json.loads(response.body)["remotes"][0]["url"] == "http://127.0.0.1:8000/mcp"
