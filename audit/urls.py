"""The audit log's HTTP API, mounted at /api/audit/ (see `audit.api`)."""

from __future__ import annotations

from django.urls import path

from audit import api

app_name = "audit"

urlpatterns = [
    path("events", api.events, name="events"),
    path("checkpoint", api.checkpoint, name="checkpoint"),
    path("proof/inclusion", api.inclusion_proof, name="inclusion-proof"),
    path("proof/consistency", api.consistency_proof, name="consistency-proof"),
]
