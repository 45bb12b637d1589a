"""Shared pieces of the console (the extended Django admin) that every app's screens and APIs use: who is
an operator, the base of an operator credential, the read-only list, and how a refusal
reaches an operator on a console screen (`refused`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication

from forge_core.errors import Refusal

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser, AnonymousUser, User

OPERATORS_GROUP = "operators"


def is_operator(user: AbstractUser | AnonymousUser, *, in_operators_group: bool | None = None) -> bool:
    """Whether `user` is a console operator: an active superuser, or active staff in the operators group.
    `in_operators_group`, the membership when the caller read it with the user (`in_operators_group_sql`), spares
    the read of it here."""
    if not user.is_active:
        return False
    if user.is_superuser or not user.is_staff:
        return user.is_superuser
    if in_operators_group is None:
        return user.groups.filter(name=OPERATORS_GROUP).exists()
    return in_operators_group


def in_operators_group_sql(user_id_column: str) -> str:
    """SQL for whether the user in `user_id_column` (a quoted column of the caller's query) is in the operators
    group: to read the membership with the user, in one statement, where `is_operator` would read it after. The
    group's name is this module's constant, written in as a literal, so the caller's query keeps its own parameters
    alone."""
    from django.contrib.auth.models import Group, User  # not at import: the auth models need the app registry

    membership = User.groups.through._meta.db_table
    name = OPERATORS_GROUP.replace("'", "''")
    return (
        f'EXISTS (SELECT 1 FROM "{membership}" m INNER JOIN "{Group._meta.db_table}" g ON g."id" = m."group_id" '
        f'WHERE m."user_id" = {user_id_column} AND g."name" = \'{name}\')'
    )


def signed_in(user: User | AnonymousUser) -> User:
    """The account behind a request that a login requirement let through (the console's views, REST
    framework's IsAuthenticated), as the user it is; refused (403) should it be the anonymous user after all."""
    from django.contrib.auth.models import AnonymousUser  # not at import: the auth models need the app registry

    if isinstance(user, AnonymousUser):
        raise PermissionDenied("Sign in first.")
    return user


def refused(request: HttpRequest, refusal: Refusal, *, about: str = "") -> None:
    """A refusal on a console screen: its message (after what it was `about`, for one of several items) as an
    error message on the page the operator lands on next."""
    messages.error(request, f"{about}: {refusal.message}" if about else refusal.message)


class OperatorAuthentication(BaseAuthentication):
    """The base of a REST authentication whose credential stands for a console operator (an operator token):
    the operator APIs accept it beside a console login and refuse every other token. Its `authenticate` answers
    only a user it has found to be an operator (`is_operator`) in the same request, so the operator APIs'
    permission does not ask again. It lives here rather
    than in forge_core.rest because settings load authentication classes while REST framework is still
    importing its views, which forge_core.rest needs."""


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """A console list of records people read but never add, edit or delete (logs, sessions)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
