"""Who may do what with a project: its model permissions (held by the operators group) or the same
permission on one project (django-guardian object permissions), for a user who is active.

`view_project` lets a principal see a project at all: its reads over MCP, its working draft and the pending
confirmations that would change it, in the console and the operator API. `grant_access` lets an operator
decide a session's access request; `approve_change` lets one approve a change to it (a pending
confirmation) or accept or discard its working draft. A project a user may not view is, to that user,
one that does not exist.

The gates (`access.grants`), the MCP edge and the console ask here; `confirmations`, which may not import
this app, asks through `forge_core.rights` by project slug (the functions ending in `_slug` below).
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from projects.models import Project, project_by_slug

# Each check takes whoever a request comes from, as request.user is typed: the anonymous user holds no
# permission, so it is refused (and audited where it is an attempt) like any other user without one.


def _has(user: User | AnonymousUser, codename: str, project: Project) -> bool:
    perm = f"projects.{codename}"
    return user.is_active and (user.has_perm(perm) or user.has_perm(perm, project))


def can_view(user: User | AnonymousUser, project: Project) -> bool:
    return _has(user, "view_project", project)


def can_grant(user: User | AnonymousUser, project: Project) -> bool:
    return _has(user, "grant_access", project)


def can_approve(user: User | AnonymousUser, project: Project) -> bool:
    """Whether `user` may approve changes to the project: its pending confirmations and its working draft."""
    return _has(user, "approve_change", project)


def visible_projects(user: User | AnonymousUser) -> QuerySet[Project]:
    """The projects this user may view, in slug order."""
    projects = Project.objects.order_by("slug")
    if user.is_active and user.has_perm("projects.view_project"):
        return projects
    from guardian.shortcuts import get_objects_for_user

    return get_objects_for_user(user, "projects.view_project", klass=projects, accept_global_perms=False)


# --- by slug, for `forge_core.rights` ------------------------------------------------------------------


def _by_slug(slug: str) -> Project | None:
    return next(iter(project_by_slug(slug)), None)


def can_view_slug(user: User | AnonymousUser, slug: str) -> bool:
    project = _by_slug(slug)
    return project is not None and can_view(user, project)


def can_approve_slug(user: User | AnonymousUser, slug: str) -> bool:
    project = _by_slug(slug)
    return project is not None and can_approve(user, project)


def view_and_approve_slug(user: User | AnonymousUser, slug: str) -> tuple[bool, bool]:
    """Whether `user` may view the project `slug`, and whether it may approve changes to it (both False for a
    project that does not exist), from one read of it: a decision asks both."""
    project = _by_slug(slug)
    if project is None:
        return False, False
    return can_view(user, project), can_approve(user, project)


def visible_slugs(user: User | AnonymousUser) -> QuerySet | None:
    """The slugs of the projects `user` may view, as a subquery; None when that is every project."""
    if user.is_active and user.has_perm("projects.view_project"):
        return None
    return visible_projects(user).order_by().values("slug")
