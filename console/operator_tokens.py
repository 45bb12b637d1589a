"""Operator tokens: how an operator's scripts reach the operator API (/api/) without a console login.

An operator token stands for its operator: the API sees the operator as the request's user, so every
decision made with it is audited under the operator's name, as one made in the console is. Only
operators (`forge_core.console.is_operator`) get one, and a token whose user is no longer an operator
authorizes nothing. The raw value starts with `fop_`, so it cannot be mistaken for a client token
(`fmcp_`), which never authorizes the operator API; it is shown once and only its digest is kept.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from access.services import token_digest
from audit.models import EventKind
from audit.services import record
from console.models import OperatorToken
from forge_core.console import OPERATOR_TOKEN_PREFIX, is_operator
from forge_core.errors import AuditUnavailable


class NotAnOperator(Exception):
    """Operator tokens are only made for console operators; nothing was created."""


@dataclass(frozen=True)
class NewOperatorToken:
    token: OperatorToken
    raw: str


def do_create_operator_token(user: User, label: str, *, acting_user: str = "") -> NewOperatorToken:
    """Create an operator token and return it with its raw value, which is shown once and never stored."""
    if not is_operator(user):
        raise NotAnOperator(
            f"{user.get_username()} is not a console operator; operator tokens act as an operator. "
            "Make them one first (manage.py create_operator)."
        )
    raw = OPERATOR_TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = OperatorToken.objects.create(label=label, user=user, digest=token_digest(raw), prefix=raw[:12])
        record(
            EventKind.TOKEN_CREATED,
            arguments={"label": label, "operator": user.get_username(), "kind": "operator", "prefix": token.prefix},
            outcome="created",
            called_by=acting_user or user.get_username(),
            client_label=label,
        )
    return NewOperatorToken(token=token, raw=raw)


def do_revoke_operator_token(token: OperatorToken, *, acting_user: str) -> None:
    """Revoke an operator token at once: its next request is refused."""
    with transaction.atomic():
        updated = OperatorToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if not updated:
            return
        record(
            EventKind.TOKEN_REVOKED,
            # "prefix", not "token": the audit log redacts values under a key named token.
            arguments={"prefix": token.prefix, "kind": "operator"},
            outcome="revoked",
            called_by=acting_user,
            client_label=token.label,
        )
    token.refresh_from_db(fields=["revoked_at"])


def authenticate_operator_token(raw: str, path: str) -> OperatorToken | None:
    """The usable operator token for a presented `fop_` value, its user loaded; a refused one is audited."""
    token = None
    if raw.startswith(OPERATOR_TOKEN_PREFIX) and len(raw) <= 200:
        token = OperatorToken.objects.select_related("user").filter(digest=token_digest(raw)).first()
    if token is None or token.revoked_at is not None or not is_operator(token.user):
        with contextlib.suppress(AuditUnavailable):  # the refusal stands either way
            record(EventKind.AUTH_REFUSED, arguments={"path": path}, outcome="bad_operator_token")
        return None
    return token
