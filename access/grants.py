"""Gate 2, per-session grants: nothing about a project reaches a session until an operator allows it.

A grant is an `AccessRequest` keyed by (principal, session handle, project). The first project call of a
session (or `session.request_access`) raises the request, and the call is refused with
FORGE_ERR_PROJECT_ACCESS_PENDING until an operator with `grant_access` on the project allows or denies
it. A grant ends on deny, revoke, MCP switched off, token revoked, or session end. Every decision bumps
the session's `context_generation`, so a client can tell that what it may do has changed.

Projects a principal may not view are indistinguishable from projects that do not exist. The MCP edge
applies the gates to each tool call (`mcp_api.registry.admit`); operators decide here, from the
console's screens, the operator API or `manage.py access_requests`.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from access import limits
from access.models import AccessRequest, AccessState, ClientToken, McpSession
from audit.models import EventKind
from audit.services import record
from confirmations.services import do_cancel_confirmations
from forge_core.errors import Refusal
from forge_core.live import notify_console
from projects.models import Project
from projects.rights import can_grant

OPEN_STATES = (AccessState.PENDING, AccessState.ALLOWED)


class AccessDecisionRefused(Refusal):
    """A decision that cannot be made (already decided, no permission); nothing was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)


class NoSuchAccessRequest(AccessDecisionRefused):
    """The request id names no access request."""

    code, status = "FORGE_ERR_NO_SUCH_ACCESS_REQUEST", 404

    def __init__(self, request_id: object) -> None:
        super().__init__(
            f"There is no access request {request_id}; the console's Access requests screen (or GET "
            "/api/access-requests) lists them."
        )


class GrantNotPermitted(AccessDecisionRefused):
    """The deciding user lacks `grant_access` on the request's project (the attempt is audited)."""

    code, status = "FORGE_ERR_NO_GRANT_ACCESS", 403


class AccessAlreadyDecided(AccessDecisionRefused):
    """The request is no longer in the state the decision needs."""

    code, status = "FORGE_ERR_ACCESS_ALREADY_DECIDED", 409


def raise_request(token: ClientToken, session: McpSession, project: Project) -> AccessRequest:
    """The session's request for the project, raised now if there is none (or the last one ended); refused
    (`limits.LimitReached`) when the token has its cap of requests waiting for an operator."""
    with transaction.atomic():
        request, created = AccessRequest.objects.select_for_update().get_or_create(
            token=token, session=session, project=project
        )
        if created or request.state == AccessState.ENDED:
            # A refusal rolls the new row back with the rest of this transaction.
            limits.check_access_request_cap(token, besides=request)
            if not created:
                request.state, request.decided_at, request.decided_by = AccessState.PENDING, None, ""
                request.save(update_fields=["state", "decided_at", "decided_by"])
            notify_console("access_requests")
            record(
                EventKind.ACCESS_REQUEST,
                outcome="pending",
                called_by=token.owner.get_username(),
                session=session.id,
                client_label=token.label,
                project=project.slug,
            )
    return request


def do_decide_access(request_id: int, *, allow: bool, user: User | AnonymousUser) -> AccessRequest:
    """Allow or deny a pending request, as an operator with `grant_access` on its project."""
    _require_permission(request_id, user, "grant")
    with transaction.atomic():
        request = _locked(request_id)
        if request.state != AccessState.PENDING:
            raise AccessAlreadyDecided(f"This request is {request.state} already; nothing was changed.")
        _decide(request, AccessState.ALLOWED if allow else AccessState.DENIED, user)
    return request


def do_revoke_access(request_id: int, *, user: User | AnonymousUser) -> AccessRequest:
    """End an allowed grant: the session's next project call is refused, and its pending confirmations on the
    project are cancelled."""
    _require_permission(request_id, user, "revoke")
    with transaction.atomic():
        request = _locked(request_id)
        if request.state != AccessState.ALLOWED:
            raise AccessAlreadyDecided(f"Only an allowed grant can be revoked; this one is {request.state}.")
        _decide(request, AccessState.REVOKED, user)
        do_cancel_confirmations(
            "grant_revoked",
            sessions=[request.session_id],
            project=request.project.slug,
            acting_user=user.get_username(),
        )
    return request


def _require_permission(request_id: int, user: User | AnonymousUser, verb: str) -> None:
    """Refuse (and audit the attempt, in its own transaction) a decision by a user without grant_access."""
    request = AccessRequest.objects.select_related("token__owner", "project").filter(pk=request_id).first()
    if request is None:
        raise NoSuchAccessRequest(request_id)
    if not can_grant(user, request.project):
        _audit_decision(request, user, "refused: no grant_access permission")
        raise GrantNotPermitted(f"You may not {verb} access to {request.project.slug}; ask its owner.")


def _locked(request_id: int) -> AccessRequest:
    request = (
        AccessRequest.objects.select_for_update()
        .select_related("token__owner", "session", "project")
        .filter(pk=request_id)
        .first()
    )
    if request is None:
        raise NoSuchAccessRequest(request_id)
    return request


def _decide(request: AccessRequest, state: AccessState, user: User | AnonymousUser) -> None:
    request.state, request.decided_at, request.decided_by = state, timezone.now(), user.get_username()
    request.save(update_fields=["state", "decided_at", "decided_by"])
    McpSession.objects.filter(pk=request.session_id).update(context_generation=F("context_generation") + 1)
    notify_console("access_requests")
    _audit_decision(request, user, str(state))


def _audit_decision(request: AccessRequest, user: User | AnonymousUser, outcome: str) -> None:
    record(
        EventKind.ACCESS_DECISION,
        arguments={"request": request.pk, "principal": request.token.owner.get_username()},
        outcome=outcome,
        called_by=user.get_username(),
        session=request.session_id,
        client_label=request.token.label,
        project=request.project.slug,
    )


def end_grants(
    *,
    reason: str,
    session: McpSession | None = None,
    token: ClientToken | None = None,
    owner: User | None = None,
    project: Project | None = None,
) -> int:
    """End the open requests and grants of a session, of a token, of every token of an owner, on one project
    or on all (none of them given: everyone's).

    Runs inside the caller's transaction (session end, token revocation, MCP switched off, a project hidden
    from a principal).
    """
    open_requests = AccessRequest.objects.filter(state__in=OPEN_STATES)
    if session is not None:
        open_requests = open_requests.filter(session=session)
    if token is not None:
        open_requests = open_requests.filter(token=token)
    if owner is not None:
        open_requests = open_requests.filter(token__owner=owner)
    if project is not None:
        open_requests = open_requests.filter(project=project)
    sessions = list(open_requests.values_list("session_id", flat=True).distinct())
    ended = open_requests.update(state=AccessState.ENDED, decided_at=timezone.now(), decided_by=reason)
    if ended:
        McpSession.objects.filter(pk__in=sessions).update(context_generation=F("context_generation") + 1)
    return ended


def grants_of(session: McpSession) -> list[dict[str, str]]:
    return [
        {"project": r.project.slug, "state": r.state}
        for r in AccessRequest.objects.filter(session=session).select_related("project").order_by("project__slug")
    ]
