"""Operator tokens: bearer credentials for operators' scripts on the operator API.

The model was born in `mcp_api` and keeps its table (`db_table`), so a database migrated before it moved
here works unchanged (console/migrations/0001_initial.py).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from access.models import BearerToken


class OperatorToken(BearerToken):
    """A bearer token for an operator's scripts on the operator API (/api/). Only its SHA-256 digest is stored.

    Unlike a `ClientToken` it never opens an MCP session: it acts as its operator, with the operator's
    permissions, on the endpoints the console's screens also serve. It has no expiry and keeps no last use.
    """

    kind = "operator"
    holder_field = "user"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="operator_tokens")

    class Meta(BearerToken.Meta):
        db_table = "mcp_api_operatortoken"
