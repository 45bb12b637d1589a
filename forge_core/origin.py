"""Host and Origin checks of every MCP request and of the console's live feed (DNS rebinding protection).

A browser page on another site can reach a server bound to loopback through DNS rebinding; it cannot
forge the `Origin` and `Host` headers it sends. So a request whose Origin is present and not loopback
(or listed in `FORGE_ALLOWED_ORIGINS`), or whose Host is not in `ALLOWED_HOSTS`, is refused with 403.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def host_allowed(host: str | None) -> bool:
    if host is None:
        return True  # HTTP/1.0 clients; browsers always send Host
    return _host_in(host, tuple(settings.ALLOWED_HOSTS))


@lru_cache(maxsize=1024)  # every request asks; a client sends the same Host each time
def _host_in(host: str, allowed: tuple[str, ...]) -> bool:
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


def origin_allowed(origin: str | None) -> bool:
    if origin is None:
        return True  # not a browser: nothing to rebind
    if origin in settings.FORGE_ALLOWED_ORIGINS:
        return True
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and hostname in LOOPBACK_HOSTS


def refusal_reason(headers: dict[str, str]) -> str | None:
    """Why this request must be refused, or None when Host and Origin are acceptable."""
    if not host_allowed(headers.get("host")):
        return (
            f"Host {headers.get('host', '')[:100]!r} is not allowed. Connect to 127.0.0.1 or localhost, or add "
            "the name to FORGE_ALLOWED_HOSTS."
        )
    if not origin_allowed(headers.get("origin")):
        return (
            f"Origin {headers.get('origin', '')[:100]!r} is not allowed. Browser clients must be served from "
            "a loopback origin or listed in FORGE_ALLOWED_ORIGINS."
        )
    return None
