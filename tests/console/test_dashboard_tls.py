"""The dashboard while this process serves HTTPS: the server certificate's fingerprint, memorable ID, randomart,
names and expiry, for an operator to compare with what a member's client shows; and a member's configurations
with the team certificate (curl, the Python SDK, Claude Code through mcp_stdio) against the HTTPS address, with
placeholders for the member's files. Without HTTPS, neither is on the page."""

from __future__ import annotations

import html

import pytest
from django.http import HttpRequest
from django.test import Client
from django.urls import reverse

from caretaker.randomart import key_art
from console.site import SHOWN_CONFIGURATIONS, MemberFiles, mtls_configurations
from tests.serving_tls import serving_tls, trust_a_team_ca

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:index"
MTLS_KEYS = ["mtls_curl", "mtls_python_sdk", "mtls_claude_code"]


@pytest.fixture
def operator_client(client, cast, settings, tmp_path) -> Client:
    settings.FORGE_TRUST_DIR = tmp_path / "trust"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "forge.example.test"]
    assert client.login(request=HttpRequest(), username="olivia", password="olivia-password-123")
    return client


def page_of(client: Client) -> str:
    response = client.get(reverse(DASHBOARD), HTTP_HOST="forge.example.test:8000")
    assert response.status_code == 200
    return response.content.decode()


def test_without_tls_the_dashboard_shows_no_certificate_and_no_mtls_configurations(operator_client):
    response = operator_client.get(reverse(DASHBOARD))
    page = response.content.decode()

    assert response.context["dashboard"].tls is None
    assert 'id="tls-certificate"' not in page
    assert 'id="mtls-configurations"' not in page
    assert [c.key for c in response.context["dashboard"].configurations] == [key for key, _, _ in SHOWN_CONFIGURATIONS]


def test_serving_tls_the_dashboard_shows_the_server_certificates_fingerprint_art(operator_client, tmp_path):
    with serving_tls(tmp_path / "secrets", port=8443) as certificate:
        page = page_of(operator_client)

    art = key_art(certificate.certificate)
    assert 'id="tls-certificate"' in page
    assert f'<strong id="tls-memorable-id">{art.memorable_id}</strong>' in page
    assert f'<pre class="randomart" id="tls-randomart">{html.escape(art.randomart)}</pre>' in page
    assert f'<code id="tls-key-fingerprint">{art.fingerprint}</code>' in page
    assert f'<code id="tls-fingerprint">{certificate.describe()["fingerprint_sha256"]}</code>' in page
    assert "<code>localhost</code>, <code>127.0.0.1</code>, <code>::1</code>" in page
    assert f'title="{certificate.certificate.not_valid_after_utc.isoformat()}"' in page
    assert "https://forge.example.test:8443/mcp" in page
    assert "The trust store holds no CA yet" in page


def test_serving_tls_the_dashboard_gives_a_members_mtls_configurations_against_the_https_address(
    operator_client, tmp_path
):
    trust_a_team_ca()
    with serving_tls(tmp_path / "secrets", port=8443):
        response = operator_client.get(reverse(DASHBOARD), HTTP_HOST="forge.example.test:8000")
    page = response.content.decode()
    shown = {c.key: c.text for c in response.context["dashboard"].tls.configurations}

    assert list(shown) == MTLS_KEYS
    assert shown == mtls_configurations("https://forge.example.test:8443/mcp")
    for key in MTLS_KEYS:
        assert f'id="configuration-text-{key}"' in page
    assert "Team members may present the certificate the caretaker issued" in page
    assert shown["mtls_claude_code"] == (
        "claude mcp add forge -- python /path/to/forge-mcp/manage.py mcp_stdio "
        "--url https://forge.example.test:8443/mcp --cert ~/.config/forge/alice.crt "
        "--key ~/.config/forge/alice.key --ca ~/.config/forge/forge-server.crt"
    )
    assert shown["mtls_curl"].startswith(
        "curl --cert ~/.config/forge/alice.crt --key ~/.config/forge/alice.key "
        "--cacert ~/.config/forge/forge-server.crt"
    )
    assert 'cafile=Path("~/.config/forge/forge-server.crt")' in shown["mtls_python_sdk"]
    assert 'streamable_http_client("https://forge.example.test:8443/mcp", http_client=http)' in shown["mtls_python_sdk"]
    # The certificate is the credential: no token, nor a place for one.
    assert not any("Bearer" in text or "token" in text for text in shown.values())


def test_the_mtls_configurations_quote_file_paths_for_the_shell_and_keep_a_leading_home():
    files = MemberFiles(cert="~/my certs/bob.crt", key="/keys/bob's.key", ca="server.crt")

    curl = mtls_configurations("https://h:1/mcp", files)["mtls_curl"]

    assert curl.startswith("curl --cert ~/'my certs/bob.crt' --key '/keys/bob'\"'\"'s.key' --cacert server.crt")


def test_the_dashboard_with_tls_runs_no_inline_script_or_style(operator_client, tmp_path):
    with serving_tls(tmp_path / "secrets"):
        page = page_of(operator_client)

    assert " style=" not in page
    assert "<style" not in page
    assert "<script>" not in page
