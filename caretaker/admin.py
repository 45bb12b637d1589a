"""The caretaker's records in the console, read-only: peers, enrollment codes (prefixes only) and revocations.

They change only through `caretaker.services` (the caretaker screen, `console.caretaker_screens`, and the team
tools), which audits each change and keeps the signed roster in step; these lists are for finding and reading.
"""

from __future__ import annotations

from django.contrib import admin

from caretaker.models import EnrollmentCode, Peer, Revocation
from forge_core.console import ReadOnlyModelAdmin


@admin.register(Peer)
class PeerAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "role", "state", "serial", "key_memorable_id", "expires_at", "approved_by")
    list_filter = ("state", "role")
    search_fields = ("name", "serial", "fingerprint_sha256", "key_fingerprint", "key_memorable_id", "endpoint")
    date_hierarchy = "created_at"


@admin.register(EnrollmentCode)
class EnrollmentCodeAdmin(ReadOnlyModelAdmin):
    list_display = ("prefix", "peer", "created_by", "created_at", "expires_at", "used_at")
    list_select_related = ("peer",)
    search_fields = ("prefix", "peer__name", "created_by", "used_for")
    exclude = ("digest",)


@admin.register(Revocation)
class RevocationAdmin(ReadOnlyModelAdmin):
    list_display = ("serial", "name", "reason", "revoked_at", "revoked_by")
    search_fields = ("serial", "name", "fingerprint_sha256", "reason", "revoked_by")
    date_hierarchy = "revoked_at"
