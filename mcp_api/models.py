"""What the MCP edge itself keeps: a session's subscriptions to resources (`resources/subscribe`).

A subscription is a row, not a set in a stream's memory, because the `resources/subscribe` request and the
session's stream may be served by different processes, and the change that must be announced may be made in a
third (an operator's approval, a management command).
"""

from __future__ import annotations

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
