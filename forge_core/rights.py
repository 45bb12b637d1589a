"""Project rights for the apps that may not import `projects` (DESIGN section 2): `confirmations` shows a
pending confirmation only to who may view its project and lets only who may approve changes to it decide.

The projects app answers (`projects.rights`); this module finds it by the dotted path in
`FORGE_PROJECT_RIGHTS`, as the executor finds its capability adapters, so the dependency stays pointed
down. Projects are named by slug here, the form a confirmation records.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from types import ModuleType
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet


@cache
def _rights() -> ModuleType:
    return import_module(settings.FORGE_PROJECT_RIGHTS)


def can_view(user: User | AnonymousUser, slug: str) -> bool:
    """Whether `user` may see the project `slug` (and what concerns it); False for a project that does not exist."""
    return bool(_rights().can_view_slug(user, slug))


def can_approve(user: User | AnonymousUser, slug: str) -> bool:
    """Whether `user` may approve changes to the project `slug`."""
    return bool(_rights().can_approve_slug(user, slug))


def view_and_approve(user: User | AnonymousUser, slug: str) -> tuple[bool, bool]:
    """`can_view` and `can_approve` of the project `slug` together, from one read of it."""
    may_view, may_approve = _rights().view_and_approve_slug(user, slug)
    return bool(may_view), bool(may_approve)


def visible_slugs(user: User | AnonymousUser) -> QuerySet[Any] | None:
    """The slugs of the projects `user` may see, as a subquery to filter by; None when that is all of them."""
    found: QuerySet[Any] | None = _rights().visible_slugs(user)
    return found
