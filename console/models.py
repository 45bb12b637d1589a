"""Operator tokens: bearer credentials for operators' scripts on the operator API.

The model was born in `mcp_api` and keeps its table (`db_table`), so a database migrated before it moved
here works unchanged (console/migrations/0001_initial.py).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class OperatorToken(models.Model):
    """A bearer token for an operator's scripts on the operator API (/api/). Only its SHA-256 digest is stored.

    Unlike a `ClientToken` it never opens an MCP session: it acts as its operator, with the operator's
    permissions, on the endpoints the console's screens also serve.
    """

    label = models.CharField(max_length=200, help_text="What the token is for, shown in the audit log.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="operator_tokens")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, help_text="The first characters, to recognise it.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "mcp_api_operatortoken"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"
