"""The Content-Security-Policy of the console's pages.

Every page under the console's address (the admin site, its login and lockout pages, the draft and
confirmation screens) is served with a policy that lets the browser load scripts, styles, images, fonts
and connections (the live feed's EventSource, the pages' own fetches) from the console's own origin only,
run no inline script or style, never frame the page, load no plugin, and post forms only back to the
console. The console's scripts and styles are static files for that reason (console/static/console/).
Django 5.2 has no built-in policy middleware (it arrives in 6.0 as SECURE_CSP), so this is one.
"""

from __future__ import annotations

from functools import cache

from django.http import HttpRequest, HttpResponseBase
from django.urls import reverse
from django.utils.deprecation import MiddlewareMixin

CONSOLE_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    ]
)


@cache
def console_prefix() -> str:
    return reverse("admin:index")


class ConsoleContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Adds CONSOLE_POLICY to every response under the console's address (sync and async alike)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if request.path.startswith(console_prefix()) and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = CONSOLE_POLICY
        return response
