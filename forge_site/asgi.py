"""ASGI entry point: the MCP transports as Channels consumers, everything else through Django."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")

from forge_site.django_views import application as django_views

django_application = django_views()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from console.stream import ConsoleEventsConsumer  # noqa: E402
from mcp_api.consumers import LegacyMessagesConsumer, LegacySseConsumer, StreamableHttpConsumer  # noqa: E402
from mcp_api.tools import ensure_loaded  # noqa: E402

ensure_loaded()

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                path("mcp", StreamableHttpConsumer.as_asgi()),
                path("mcp/", StreamableHttpConsumer.as_asgi()),
                path("sse", LegacySseConsumer.as_asgi()),
                path("messages/", LegacyMessagesConsumer.as_asgi()),
                # The console's live feed reads the operator's login from the session cookie.
                path("console/events", AuthMiddlewareStack(ConsoleEventsConsumer.as_asgi())),
                # The console's stylesheets and scripts (the admin's static files under STATIC_URL) come
                # from the installed apps through Django itself: a console on loopback needs no
                # collectstatic step and no web server in front. Everything else goes to the views.
                # (channels routes ASGI applications through Django's re_path; django-stubs types it for views.)
                re_path(r"", ASGIStaticFilesHandler(django_application)),  # type: ignore[arg-type]
            ]
        ),
    }
)
