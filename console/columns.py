"""Compact list columns for the console's lists, so every column fits beside the menu and the filters on a
1366 px screen: an instant as how long ago it was (the exact instant, to the second with its offset, as its
tooltip), and a token's standing in one word or two."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince, timeuntil

from access.models import BearerToken, ClientToken
from forge_core.formatting import second_text


def ago(value: datetime | None, *, empty: str = "") -> SafeString:
    if value is None:
        return format_html("{}", empty)
    return format_html(
        '<time datetime="{}" title="{}">{} ago</time>', value.isoformat(), second_text(value), timesince(value, depth=1)
    )


def token_standing(token: BearerToken) -> SafeString:
    """Active, expiring (when), expired, or revoked (when)."""
    if token.revoked_at is not None:
        return format_html("revoked {}", ago(token.revoked_at))
    expires_at = token.expires_at if isinstance(token, ClientToken) else None
    if expires_at is None:
        return format_html("{}", "active")
    if expires_at <= timezone.now():
        return format_html(
            'expired <time title="{}">{} ago</time>', second_text(expires_at), timesince(expires_at, depth=1)
        )
    return format_html(
        'active, expires <time title="{}">in {}</time>', second_text(expires_at), timeuntil(expires_at, depth=1)
    )
