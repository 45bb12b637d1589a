"""The runtime connectors' HTTP route, mounted at /api/ (see `access.runtime_api`)."""

from __future__ import annotations

from django.urls import path

from access import runtime_api

app_name = "access"

urlpatterns = [
    path("projects/<str:slug>/runtime-snapshots", runtime_api.runtime_snapshots, name="runtime-snapshots"),
]
