"""Django's views (the console, the operator, audit and draft APIs) behind one thread hop per request.

Django's own ASGI handler keeps its middleware asynchronous and runs each synchronous part in a hop of its own:
the request half and the response half of every middleware, then the view, each time into a thread made for
that request. With the nine middleware of `settings.MIDDLEWARE` that was 18 hops and a new thread per request,
whose first database statement also opened a new connection: a console page or an operator API call spent
more in hand-offs than in its view (an operator's `approve` waited about 11 ms outside the view on the machine
of docs/PERFORMANCE.md).

This handler builds Django's synchronous middleware chain instead and runs the whole of it, middleware and
view, in one hop into the views' own pool of threads (`forge_core.workers`, `FORGE_VIEW_WORKERS`), whose
threads keep their database connections as the MCP pool's do. Reading the body, the request signals and
sending the response stay Django's. An async view (`readyz`) still works: Django runs it on the server's loop
from the pool thread.
"""

from __future__ import annotations

from typing import Any

import django
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

from forge_core.workers import VIEWS, in_pool


class OneHopHandler(ASGIHandler):
    """Django's ASGI handler whose middleware chain and view run in one hop into the views' pool."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)  # the synchronous chain: no hop around each middleware

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await in_pool(self.get_response, VIEWS)(request)
        return response


def application() -> Any:
    """What `django.core.asgi.get_asgi_application` makes, with the one-hop handler."""
    django.setup(set_prefix=False)
    return OneHopHandler()
