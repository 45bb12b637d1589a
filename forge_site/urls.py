"""HTTP routes served by Django (the MCP transports are routed in asgi.py)."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from forge_site import views

admin.site.site_header = "Forge MCP console"
admin.site.site_title = "Forge MCP"
admin.site.index_title = "Console"

urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("console/", admin.site.urls),
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("api/audit/", include("audit.urls")),
]
