"""`server_info` over MCP says whether this process serves HTTPS: null without it; with it, the port and the
server certificate's fingerprint art (what a member compares with what the client shows), and whether a member
may present a team certificate (`mtls`: HTTPS served and a CA in the trust store)."""

from __future__ import annotations

from typing import Any

import pytest

from access import tls
from caretaker.ca import cert_fingerprint
from caretaker.randomart import key_art
from tests.mcp_api.helpers import send, stateless_headers, stateless_rpc
from tests.serving_tls import serving_tls, trust_a_team_ca

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def trust_store_of_its_own(settings, tmp_path) -> None:
    settings.FORGE_TRUST_DIR = tmp_path / "trust"


async def server_info(token: str) -> dict[str, Any]:
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "tools/call", name="server_info"),
        body=stateless_rpc("tools/call", {"name": "server_info", "arguments": {}}),
    )
    assert response.status == 200
    result = response.json()["result"]
    assert result["isError"] is False
    return result["structuredContent"]


async def test_server_info_says_no_tls_when_this_process_serves_none(cast):
    assert tls.served() is None

    info = await server_info(cast.operator.raw_token)

    assert info["tls"] is None
    assert info["mtls"] is False


async def test_server_info_gives_the_served_certificates_port_and_fingerprint_art(cast, tmp_path):
    with serving_tls(tmp_path / "secrets", port=8443) as certificate:
        info = await server_info(cast.operator.raw_token)

    art = key_art(certificate.certificate)
    assert info["tls"]["port"] == 8443
    assert info["tls"]["certificate"] == {
        "subject": certificate.certificate.subject.rfc4514_string(),
        "names": ["localhost", "127.0.0.1", "::1"],
        "fingerprint_sha256": cert_fingerprint(certificate.certificate),
        "not_after": certificate.certificate.not_valid_after_utc.isoformat(),
        "generated": True,
        "certificate": certificate.cert_path.read_text(),
        "key_type": "ECDSA",
        "bits": 256,
        "fingerprint": art.fingerprint,
        "memorable_id": art.memorable_id,
        "randomart": art.randomart,
    }
    assert info["mtls"] is False  # no CA in the trust store: the listener asks for no client certificate
    assert tls.served() is None


async def test_server_info_says_mtls_once_tls_is_served_and_the_trust_store_holds_a_ca(cast, tmp_path):
    trust_a_team_ca()

    without_tls = await server_info(cast.operator.raw_token)
    with serving_tls(tmp_path / "secrets"):
        with_tls = await server_info(cast.operator.raw_token)

    assert (without_tls["mtls"], with_tls["mtls"]) == (False, True)
    assert len(with_tls["trust_store_cas"]) == 1
