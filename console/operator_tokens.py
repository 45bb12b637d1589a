"""Operator tokens: how an operator's scripts reach the operator API (/api/) without a console login.

An operator token stands for its operator: the API sees the operator as the request's user, so every
decision made with it is audited under the operator's name, as one made in the console is. Only
operators (`forge_core.console.is_operator`) get one, and a token whose user is no longer an operator
authorizes nothing. The raw value starts with `fop_`, so it cannot be mistaken for a client token
(`fmcp_`), which never authorizes the operator API; it is shown once and only its digest is kept. Minting,
the digest and the prefix check are `forge_core.tokens`', the audit rows `access.services`', the same as
for client tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from access.services import record_refused_token, record_token_event
from audit.models import EventKind
from console.models import OperatorToken
from forge_core import fastsql
from forge_core.console import in_operators_group_sql, is_operator
from forge_core.tokens import OPERATOR_TOKEN_PREFIX, mint_token, presented_digest


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
    minted = mint_token(OPERATOR_TOKEN_PREFIX)
    with transaction.atomic():
        token = OperatorToken.objects.create(label=label, user=user, digest=minted.digest, prefix=minted.shown)
        record_token_event(
            EventKind.TOKEN_CREATED, token, outcome="created", called_by=acting_user or user.get_username()
        )
    return NewOperatorToken(token=token, raw=minted.raw)


def do_revoke_operator_token(token: OperatorToken, *, acting_user: str) -> None:
    """Revoke an operator token at once: its next request is refused."""
    with transaction.atomic():
        if not token.mark_revoked():
            return
        record_token_event(EventKind.TOKEN_REVOKED, token, outcome="revoked", called_by=acting_user)
    token.refresh_from_db(fields=["revoked_at"])


def _tokens_with_membership() -> QuerySet[OperatorToken]:
    """Tokens with their user and whether that user is in the operators group, read in the token's one statement:
    every operator API request authenticates, and the membership was a second round trip of its own."""
    sql = in_operators_group_sql(f'"{OperatorToken._meta.db_table}"."user_id"')
    return OperatorToken.objects.select_related("user").annotate(
        in_operators=RawSQL(sql, [], output_field=BooleanField())
    )


# Compiled once (`fastsql.PreparedRead`): building it with the ORM at every request cost more than its round trip.
_token_by_digest = fastsql.PreparedRead(
    lambda digest: _tokens_with_membership().filter(digest=digest), OperatorToken._meta.get_field("digest")
)


def authenticate_operator_token(raw: str, path: str) -> OperatorToken | None:
    """The usable operator token for a presented `fop_` value, its user loaded; a refused one is audited."""
    digest = presented_digest(raw, OPERATOR_TOKEN_PREFIX)
    token: OperatorToken | None = next(iter(_token_by_digest(digest)), None) if digest is not None else None
    membership = None if token is None else token.in_operators  # type: ignore[attr-defined]  # the annotation
    if token is None or not token.is_usable() or not is_operator(token.user, in_operators_group=membership):
        record_refused_token(path, outcome="bad_operator_token")
        return None
    return token
