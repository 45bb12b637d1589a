from django.contrib import admin

from audit.models import AuditEvent
from forge_site.console import ReadOnlyModelAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "ts", "kind", "tool", "outcome", "called_by", "client_label", "session", "project")
    list_filter = ("kind", "tool")
    search_fields = ("tool", "called_by", "client_label", "session", "project", "outcome")
    date_hierarchy = "ts"

