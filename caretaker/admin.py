"""The caretaker's records in the console, read-only: peers, enrollment codes (prefixes only) and revocations.

They change only through `caretaker.services` (the caretaker screen, `console.caretaker_screens`, and the team
tools), which audits each change and keeps the signed roster in step; these lists are for finding and reading.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from caretaker.models import EnrollmentCode, Peer, Revocation
from forge_core.console import ReadOnlyModelAdmin
from forge_core.formatting import second_text


@admin.register(Peer)
class PeerAdmin(ReadOnlyModelAdmin):
    # The serial's first characters and the expiry's day (each whole as its tooltip; a peer's page shows them
    # whole), so the list fits a 1366 px screen beside the menu and the filters.
    list_display = ("name", "role", "state", "short_serial", "key_memorable_id", "expires", "approved_by")
    list_filter = ("state", "role")
    search_fields = ("name", "serial", "fingerprint_sha256", "key_fingerprint", "key_memorable_id", "endpoint")
    date_hierarchy = "created_at"

    @admin.display(description="serial", ordering="serial")
    def short_serial(self, peer: Peer) -> str:
        return format_html('<code title="{}">{}</code>', peer.serial, f"{peer.serial[:8]}…" if peer.serial else "")

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, peer: Peer) -> str:
        if peer.expires_at is None:
            return "-"
        return format_html(
            '<time title="{}">{}</time>', second_text(peer.expires_at), timezone.localtime(peer.expires_at).date()
        )


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
