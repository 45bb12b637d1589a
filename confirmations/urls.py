"""The operator API's routes for confirmations and contracts, mounted at /api/ (see `confirmations.api`)."""

from __future__ import annotations

from django.urls import path

from confirmations import api

app_name = "confirmations"

urlpatterns = [
    path("confirmations", api.confirmations, name="confirmations"),
    path("confirmations/<uuid:confirmation_id>", api.confirmation, name="confirmation"),
    path("confirmations/<uuid:confirmation_id>/approve", api.approve, name="approve"),
    path("confirmations/<uuid:confirmation_id>/deny", api.deny, name="deny"),
    path("contracts", api.contracts, name="contracts"),
    path("contracts/<uuid:contract_id>", api.contract, name="contract"),
    path("contracts/<uuid:contract_id>/rollback", api.rollback, name="rollback"),
    path("contracts/<uuid:contract_id>/resolve", api.resolve, name="resolve"),
]
