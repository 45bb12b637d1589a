"""What the MCP edge itself keeps: a session's subscriptions to resources (`resources/subscribe`), and the
tasks (the Tasks extension) that stand for governed calls waiting for an operator.

A subscription is a row, not a set in a stream's memory, because the `resources/subscribe` request and the
session's stream may be served by different processes, and the change that must be announced may be made in a
third (an operator's approval, a management command). A task is a row for the same reason, and because the
Tasks extension asks that a task exist durably before the call that made it is answered.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class ResourceSubscription(models.Model):
    """One session's wish to hear `notifications/resources/updated` for one resource of one project."""

    session = models.ForeignKey("access.McpSession", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="+")
    uri = models.CharField(max_length=500)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "uri"], name="one_subscription_per_uri")]

    def __str__(self) -> str:
        return f"{self.session_id} -> {self.uri}"


class ApprovalTask(models.Model):
    """A governed call answered as a task (`mcp_api.tasks`): the handle a client polls while an operator decides
    the pending confirmation the call made. Its status is read from the confirmation, never stored twice."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    principal = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    token = models.ForeignKey("access.ClientToken", on_delete=models.CASCADE, related_name="+")
    session_id = models.CharField(max_length=64, blank=True)
    confirmation = models.OneToOneField("confirmations.PendingConfirmation", on_delete=models.CASCADE, related_name="+")
    revision = models.CharField(max_length=20, help_text="The protocol revision the task was made at: its wire shape.")
    ttl_ms = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        indexes = [models.Index(fields=["principal", "-created_at"], name="task_by_principal")]

    def __str__(self) -> str:
        return f"task {self.id} -> {self.confirmation_id}"
