"""HTTP routes served by Django (the MCP transports are routed in asgi.py)."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from console.caretaker_screens import public_crl
from forge_site import views

urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("console/", admin.site.urls),
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    # The team CA's certificate revocation list, public like every CRL (docs/CARETAKER.md).
    path("crl.pem", public_crl, name="crl"),
    path("api/audit/", include("audit.urls")),
    # The OpenAPI description of the REST APIs, and Swagger UI on it (its scripts served locally).
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("console.urls")),
    path("api/", include("confirmations.urls")),
]
