from django.contrib import admin

from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("id", "ts", "kind", "tool", "outcome", "called_by", "client_label", "session", "project")
    list_filter = ("kind", "tool")
    search_fields = ("tool", "called_by", "client_label", "session", "project", "outcome")
    date_hierarchy = "ts"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
