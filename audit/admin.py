"""The audit log in the console: read-only, filterable, with the chain check as a button."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse

from audit.models import AuditCheckpoint, AuditEvent
from audit.verify import verify_log
from forge_core.console import ReadOnlyModelAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    list_display = ("seq", "ts", "kind", "tool", "outcome", "called_by", "client_label", "session", "project")
    list_filter = ("kind", "tool", "called_by", "project", "ts")
    search_fields = ("tool", "called_by", "client_label", "session", "project", "outcome")
    date_hierarchy = "ts"
    readonly_fields = [f.name for f in AuditEvent._meta.fields]
    change_list_template = "admin/audit/auditevent/change_list.html"

    def get_urls(self):
        verify = self.admin_site.admin_view(self.verify_view)
        return [path("verify/", verify, name="audit_auditevent_verify"), *super().get_urls()]

    def verify_view(self, request: HttpRequest):
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:audit_auditevent_changelist"))
        report = verify_log(settings.FORGE_AUDIT_LOG)
        level = messages.SUCCESS if report.ok else messages.ERROR
        self.message_user(request, f"Audit log check: {report}", level)
        return HttpResponseRedirect(reverse("admin:audit_auditevent_changelist"))


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(ReadOnlyModelAdmin):
    list_display = ("size", "created_at")
    readonly_fields = ("size", "created_at", "note")
    exclude = ("root",)
