"""The audit event row. Rows are only ever added, through `audit.services.record`."""

from __future__ import annotations

from django.db import models


class EventKind(models.TextChoices):
    TOOL_CALL = "tool_call"
    SESSION_OPENED = "session_opened"
    SESSION_ENDED = "session_ended"
    TOKEN_CREATED = "token_created"
    TOKEN_REVOKED = "token_revoked"
    AUTH_REFUSED = "auth_refused"
    ORIGIN_REFUSED = "origin_refused"
    CONSOLE_LOGIN = "console_login"
    OPERATOR_CREATED = "operator_created"


class AuditEvent(models.Model):
    ts = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=40, choices=EventKind.choices, db_index=True)
    tool = models.CharField(max_length=100, blank=True, db_index=True)
    arguments = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=200, blank=True)
    called_by = models.CharField(max_length=200, blank=True, db_index=True)
    session = models.CharField(max_length=100, blank=True, db_index=True)
    client_label = models.CharField(max_length=200, blank=True)
    project = models.CharField(max_length=100, blank=True, db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.tool or ''} {self.outcome}".strip()

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("audit events are append-only; record a new event instead")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("audit events are append-only and cannot be deleted")
