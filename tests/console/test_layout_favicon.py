"""The site's icon: /favicon.ico, which every browser asks for on every page, answers with the console's own
SVG (it was a 404), and the console's pages link the same file."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from django.http import HttpRequest

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}svg"


def icon_bytes(response) -> bytes:
    return b"".join(response.streaming_content)


def test_favicon_ico_answers_with_the_consoles_svg_icon(client):
    response = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert "max-age=86400" in response["Cache-Control"]
    assert ET.fromstring(icon_bytes(response)).tag == SVG


def test_favicon_ico_refuses_a_post_with_405(client):
    assert client.post("/favicon.ico").status_code == 405


def test_the_console_login_page_and_the_dashboard_link_the_same_icon(client, cast):
    link = '<link rel="icon" href="/static/console/favicon.svg" type="image/svg+xml">'
    assert link in client.get("/console/login/").content.decode()

    assert client.login(request=HttpRequest(), username="olivia", password="olivia-password-123")
    assert link in client.get("/console/").content.decode()
