"""Console pages carry a Content-Security-Policy (console/csp.py) and serve nothing it would refuse: no
inline script, no inline style, no inline event handler."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from console.csp import CONSOLE_POLICY

pytestmark = pytest.mark.django_db

INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=", re.IGNORECASE)


def test_the_policy_allows_only_the_consoles_own_origin_and_no_framing():
    assert CONSOLE_POLICY == (
        "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; "
        "object-src 'none'; base-uri 'self'; form-action 'self'"
    )


def test_the_login_page_carries_the_policy(client):
    response = client.get(reverse("admin:login"))

    assert response.status_code == 200
    assert response["Content-Security-Policy"] == CONSOLE_POLICY


@pytest.mark.parametrize(
    "page",
    ["admin:index", "admin:drafts", "admin:audit_auditevent_changelist", "admin:access_accessrequest_changelist"],
)
def test_a_console_page_carries_the_policy_and_serves_no_inline_script_or_style(client, cast, page):
    client.force_login(cast.operator.user)

    response = client.get(reverse(page))

    assert response.status_code == 200
    assert response["Content-Security-Policy"] == CONSOLE_POLICY
    assert INLINE.findall(response.content.decode()) == []


def test_the_lockout_page_carries_the_policy_and_serves_no_inline_script_or_style(client, cast, settings):
    settings.AXES_FAILURE_LIMIT = 1

    response = client.post(reverse("admin:login"), {"username": "olivia", "password": "wrong-password-42"})

    assert response.status_code == 429
    assert response["Content-Security-Policy"] == CONSOLE_POLICY
    assert INLINE.findall(response.content.decode()) == []


def test_an_address_outside_the_console_is_not_given_the_consoles_policy(client):
    response = client.get("/healthz")

    assert "Content-Security-Policy" not in response
