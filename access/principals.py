"""Client principals: the users client tokens act for, and which projects each may see.

A principal may ask for access to a project (and see it at all) only with `view_project` on it, a
django-guardian object permission (`projects.rights`). Operators set it here, from the console's
principals screen, rather than in Django's raw permission admin: one action function per change, which
checks that the operator may grant access to the project and audits the change (or the refused attempt)
as an access decision. Hiding a project from a principal also ends its sessions' grants on it and
cancels their pending confirmations there, as revoking each grant would.

Creating a client token for a principal that does not exist yet makes the principal with it, in the same
transaction and audit row (`do_create_token_for`).
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from guardian.shortcuts import assign_perm, remove_perm

from access.grants import end_grants
from access.models import McpSession
from access.services import NewToken, do_create_token
from audit.models import EventKind
from audit.services import record
from confirmations.services import do_cancel_confirmations
from forge_core.errors import Refusal
from forge_core.live import notify_console
from projects.models import Project
from projects.rights import can_grant

VIEW_PROJECT = "projects.view_project"


class NoSuchPrincipal(Refusal):
    code, status = "FORGE_ERR_NO_SUCH_PRINCIPAL", 404

    def __init__(self, name: str) -> None:
        super().__init__(
            self.code, f"There is no user {name!r}. Tick 'create the principal' to make one with the token."
        )


class VisibilityNotPermitted(Refusal):
    """The operator lacks `grant_access` on the project (the attempt is audited)."""

    code, status = "FORGE_ERR_NO_GRANT_ACCESS", 403

    def __init__(self, project: Project) -> None:
        super().__init__(
            self.code, f"You may not say who sees {project.slug}: that takes grant_access on it; ask its owner."
        )


def do_create_token_for(
    owner_name: str, *, create_owner: bool, label: str, expires_at: datetime | None, acting_user: str
) -> NewToken:
    """A client token for the principal named `owner_name`, made first when `create_owner` (with no password:
    a principal never signs in to the console). The token's audit row says whether the principal was made."""
    with transaction.atomic():
        owner = get_user_model().objects.filter(username=owner_name).first()
        created = owner is None
        if owner is None:
            if not create_owner:
                raise NoSuchPrincipal(owner_name)
            owner = get_user_model().objects.create_user(username=owner_name)
        return do_create_token(
            owner=owner, label=label, expires_at=expires_at, acting_user=acting_user, owner_created=created
        )


def sees_every_project(principal: User) -> bool:
    """Whether the principal holds `view_project` on the model (its own or a group's), not per project."""
    return principal.is_active and principal.has_perm(VIEW_PROJECT)


def with_visibility(principals: QuerySet) -> QuerySet:
    """The users annotated, in the same query, with what `sees_every_project` says (`every_project`) and how many
    projects they hold `view_project` on one by one (`projects_seen`): a list of principals makes no query a
    row."""
    from guardian.models import UserObjectPermission

    model_permission = Permission.objects.filter(codename="view_project", content_type__app_label="projects")
    held = model_permission.filter(Q(user=OuterRef("pk")) | Q(group__user=OuterRef("pk")))
    per_project = (
        UserObjectPermission.objects.filter(
            user=OuterRef("pk"), permission__codename="view_project", content_type__app_label="projects"
        )
        .order_by()
        .values("user")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return principals.annotate(
        every_project=Q(is_active=True) & (Q(is_superuser=True) | Exists(held)),
        projects_seen=Coalesce(Subquery(per_project), 0),
    )


def visible_project_ids(principal: User) -> set[int]:
    """The projects the principal holds `view_project` on, one by one (guardian's object permissions)."""
    from guardian.shortcuts import get_objects_for_user

    return set(
        get_objects_for_user(
            principal, VIEW_PROJECT, klass=Project, accept_global_perms=False, with_superuser=False
        ).values_list("pk", flat=True)
    )


def do_set_project_visibility(principal: User, project: Project, visible: bool, *, user: User | AnonymousUser) -> bool:
    """Let the principal see the project, or not. False when that was so already (nothing recorded)."""
    if not can_grant(user, project):
        _audit(principal, project, visible, user, "refused: no grant_access permission")
        raise VisibilityNotPermitted(project)
    if (project.pk in visible_project_ids(principal)) == visible:
        return False
    with transaction.atomic():
        if visible:
            assign_perm(VIEW_PROJECT, principal, project)
        else:
            remove_perm(VIEW_PROJECT, principal, project)
            end_grants(reason="project hidden from the principal", owner=principal, project=project)
            sessions = McpSession.objects.filter(token__owner=principal).values_list("id", flat=True)
            do_cancel_confirmations(
                "grant_revoked", sessions=sessions, project=project.slug, acting_user=user.get_username()
            )
        notify_console("access_requests")
        _audit(principal, project, visible, user, "project visible" if visible else "project hidden")
    return True


def _audit(principal: User, project: Project, visible: bool, user: User | AnonymousUser, outcome: str) -> None:
    record(
        EventKind.ACCESS_DECISION,
        arguments={"principal": principal.get_username(), "permission": "view_project", "visible": visible},
        outcome=outcome,
        called_by=user.get_username(),
        project=project.slug,
    )
