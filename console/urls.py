"""The operator API's HTTP routes, mounted at /api/ (see `console.api`, `console.draft_api` and `console.caretaker_api`)."""

from __future__ import annotations

from django.urls import path

from console import api, caretaker_api, draft_api

app_name = "console"

urlpatterns = [
    path("sessions", api.sessions, name="sessions"),
    path("access-requests", api.access_requests, name="access-requests"),
    path("access-requests/<int:request_id>/allow", api.allow, name="allow-access"),
    path("access-requests/<int:request_id>/deny", api.deny, name="deny-access"),
    path("access-requests/<int:request_id>/revoke", api.revoke, name="revoke-access"),
    path("mcp", api.mcp_switch, name="mcp-switch"),
    path("drafts", draft_api.drafts, name="drafts"),
    path("drafts/<slug:slug>", draft_api.draft, name="draft"),
    path("drafts/<slug:slug>/accept", draft_api.accept, name="accept-draft"),
    path("drafts/<slug:slug>/discard", draft_api.discard, name="discard-draft"),
    path("caretaker/peers", caretaker_api.peers, name="caretaker-peers"),
    path("caretaker/peers/<str:name>/codes", caretaker_api.codes, name="caretaker-codes"),
]
