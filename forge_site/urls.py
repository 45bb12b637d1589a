"""HTTP routes served by Django (the MCP transports are routed in asgi.py)."""

from pathlib import Path

from django.contrib import admin
from django.http import FileResponse, HttpRequest
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

import console
from console.caretaker_screens import public_crl
from forge_site import views
from mcp_api import server_card

FAVICON = Path(console.__file__).resolve().parent / "static" / "console" / "favicon.svg"


@require_safe
@cache_control(max_age=86400)
def favicon(request: HttpRequest) -> FileResponse:
    """The console's icon (console/static/console/favicon.svg) at the address every browser asks a site for;
    the console's pages also link it by its static address."""
    return FileResponse(FAVICON.open("rb"), content_type="image/svg+xml")


urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("console/", admin.site.urls),
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("favicon.ico", favicon),
    # The team CA's certificate revocation list, public like every CRL (docs/CARETAKER.md).
    path("crl.pem", public_crl, name="crl"),
    # What a client learns before connecting: the MCP Server Card and the catalogs naming it (public).
    path("mcp/server-card", server_card.server_card, name="mcp-server-card"),
    path(".well-known/ai-catalog.json", server_card.ai_catalog),
    path(".well-known/mcp/catalog.json", server_card.mcp_catalog),
    path("api/audit/", include("audit.urls")),
    # The OpenAPI description of the REST APIs, and Swagger UI on it (its scripts served locally).
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("console.urls")),
    path("api/", include("confirmations.urls")),
    path("api/", include("access.urls")),  # runtime connectors' snapshots
]
