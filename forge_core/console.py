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


def is_operator(user: AbstractUser | AnonymousUser) -> bool:
    """Whether `user` is a console operator: an active superuser, or active staff in the operators group."""
    if not user.is_active:
        return False
    return user.is_superuser or (user.is_staff and user.groups.filter(name=OPERATORS_GROUP).exists())


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
