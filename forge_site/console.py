"""Shared pieces of the console (the extended Django admin)."""

from __future__ import annotations

from django.contrib import admin


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """A console list of records people read but never add, edit or delete (logs, sessions)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
