"""Console screens of access requests, MCP sessions and the switch (the tokens' and principals' are in
`console.identities`, registered with these)."""

from __future__ import annotations

from axes import admin as axes_admin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import re_path, reverse
from django.utils.html import format_html

from access.grants import do_decide_access, do_revoke_access
from access.limits import counted_since
from access.models import AccessRequest, AccessState, McpSession, OpenStream, ServerState
from access.services import do_switch_mcp
from console import identities as identities  # registers the token and principal screens
from console.columns import ago
from console.confirmed import DecidedOnRecords, Decision, decide, decide_each
from forge_core.console import ReadOnlyModelAdmin
from projects.rights import can_grant


@admin.register(McpSession)
class McpSessionAdmin(ReadOnlyModelAdmin):
    """MCP sessions as an operator reads them: who and which client, and on a session's page its grants (the
    access requests it raised, with their decisions) and the event streams it holds open."""

    list_display = ("short_id", "client", "transport", "opened", "last_seen", "grants", "streams", "state")
    list_filter = ("transport", "protocol_version", "ended_at")
    list_select_related = ("token__owner",)
    search_fields = ("id", "token__label", "token__owner__username")
    change_form_template = "admin/access/mcpsession/session.html"

    def get_queryset(self, request: HttpRequest):
        allowed = Count("access_requests", filter=Q(access_requests__state=AccessState.ALLOWED), distinct=True)
        streams = OpenStream.objects.filter(session_id=OuterRef("pk"), seen_at__gte=counted_since())
        return (
            super()
            .get_queryset(request)
            .annotate(
                allowed_grants=allowed,
                open_streams=Subquery(streams.values("session_id").annotate(n=Count("pk")).values("n")),
            )
        )

    @admin.display(description="session", ordering="id")
    def short_id(self, session: McpSession) -> str:
        return f"{session.id[:8]}…"

    @admin.display(description="client (principal)", ordering="token__label")
    def client(self, session: McpSession) -> str:
        return f"{session.token.label} ({session.token.owner.get_username()})"

    @admin.display(description="opened", ordering="created_at")
    def opened(self, session: McpSession) -> str:
        return ago(session.created_at)

    @admin.display(description="last seen", ordering="last_seen_at")
    def last_seen(self, session: McpSession) -> str:
        return ago(session.last_seen_at, empty="not since it opened")

    @admin.display(description="state", ordering="ended_at")
    def state(self, session: McpSession) -> str:
        return format_html("ended {}", ago(session.ended_at)) if session.ended_at else "open"

    @admin.display(description="grants", ordering="allowed_grants")
    def grants(self, session: McpSession) -> int:
        return session.allowed_grants  # type: ignore[attr-defined]

    @admin.display(description="streams")
    def streams(self, session: McpSession) -> int:
        return session.open_streams or 0  # type: ignore[attr-defined]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None):
        session = self.get_object(request, unquote(object_id))
        if session is None or not self.has_view_permission(request, session):
            raise Http404("No such session.")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Session {session.id[:8]}… of {session.token.label}",
            "session": session,
            "grants": session.access_requests.select_related("project").order_by("-created_at"),
            "streams": OpenStream.objects.filter(session_id=session.id).order_by("opened_at"),
            "streams_counted_since": counted_since(),
        }
        return TemplateResponse(request, self.change_form_template, context)


@admin.register(ServerState)
class ServerStateAdmin(admin.ModelAdmin):
    """The master switch. Off: only server_info and session.status answer any client."""

    list_display = ("__str__", "changed_by", "changed_at")
    actions = ["switch_on", "switch_off"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # only through the actions below, which audit the switch

    def get_queryset(self, request):
        ServerState.objects.get_or_create(pk=1)
        return super().get_queryset(request)

    @admin.action(description="Switch MCP on")
    def switch_on(self, request, queryset) -> None:
        self._switch(request, True)

    @admin.action(description="Switch MCP off (ends every client's access; open streams are told)")
    def switch_off(self, request, queryset) -> None:
        self._switch(request, False)

    def _switch(self, request, enabled: bool) -> None:
        changed = do_switch_mcp(enabled, acting_user=request.user.get_username())
        word = "on" if enabled else "off"
        self.message_user(request, f"MCP switched {word}." if changed else f"MCP was already {word}.", messages.SUCCESS)


def _allow(pk: int, request: HttpRequest) -> object:
    return do_decide_access(pk, allow=True, user=request.user)


def _deny(pk: int, request: HttpRequest) -> object:
    return do_decide_access(pk, allow=False, user=request.user)


def _revoke(pk: int, request: HttpRequest) -> object:
    return do_revoke_access(pk, user=request.user)


# The decisions on an access request, by name, and the states each one applies to. The row buttons, the
# record's page and the bulk actions all call the same action functions (access.grants), which audit.
ACCESS_DECISIONS = {
    "allow": Decision(
        "allow",
        "Allow",
        "Let this session work on {record.project.slug}?",
        "Allowed {record.token.label} on {record.project.slug}.",
        destructive=False,
        act=_allow,
    ),
    "deny": Decision(
        "deny",
        "Deny",
        "Deny this session access to {record.project.slug}? Its project calls stay refused; the client may ask again "
        "from a new session.",
        "Denied {record.token.label} on {record.project.slug}.",
        destructive=True,
        act=_deny,
    ),
    "revoke": Decision(
        "revoke",
        "Revoke",
        "Revoke this session's access to {record.project.slug}? Its next project call is refused and its pending "
        "confirmations on the project are cancelled.",
        "Revoked {record.token.label} on {record.project.slug}.",
        destructive=True,
        act=_revoke,
    ),
}
OPEN_DECISIONS = {
    AccessState.PENDING: ("allow", "deny"),
    AccessState.ALLOWED: ("revoke",),
}


@admin.register(AccessRequest)
class AccessRequestAdmin(DecidedOnRecords, ReadOnlyModelAdmin):
    """Access requests (gate 2): allow, deny or revoke, from a row, from the request's page, or for several at
    once. Each decision is audited with the deciding user."""

    list_display = ("project_slug", "principal", "client_label", "decision", "session_link", "asked")
    list_filter = ("state", "project")
    list_select_related = ("project", "token__owner")
    search_fields = ("project__slug", "token__label", "token__owner__username", "session__id")
    actions = ["allow", "deny", "revoke"]
    change_list_template = "admin/access/accessrequest/change_list.html"

    @admin.display(description="principal", ordering="token__owner__username")
    def principal(self, request: AccessRequest) -> str:
        return request.token.owner.get_username()

    @admin.display(description="client")
    def client_label(self, request: AccessRequest) -> str:
        return request.token.label

    @admin.display(description="project", ordering="project__slug")
    def project_slug(self, request: AccessRequest) -> str:
        return request.project.slug

    @admin.display(description="state", ordering="state")
    def decision(self, request: AccessRequest) -> str:
        if request.decided_by:
            return f"{request.get_state_display()} by {request.decided_by}"
        return request.get_state_display()

    @admin.display(description="asked", ordering="created_at")
    def asked(self, request: AccessRequest) -> str:
        return ago(request.created_at)

    @admin.display(description="session", ordering="session_id")
    def session_link(self, request: AccessRequest) -> str:
        # Its first characters, linked to the session's page (the whole id would push the decisions off a
        # 1366 px screen); the search box still finds a request by the whole id.
        url = reverse("admin:access_mcpsession_change", args=[quote(request.session_id)])
        return format_html('<a href="{}" title="{}">{}…</a>', url, request.session_id, request.session_id[:8])

    def decisions_for(self, request: HttpRequest, access_request: AccessRequest) -> list[tuple[Decision, str]]:
        """The decisions the request's state allows, with their addresses; none for a user who may not grant
        access to its project (the action would refuse them)."""
        if not can_grant(request.user, access_request.project):
            return []
        return [
            (ACCESS_DECISIONS[name], reverse("admin:access_accessrequest_decide", args=[access_request.pk, name]))
            for name in OPEN_DECISIONS.get(AccessState(access_request.state), ())
        ]

    def get_urls(self):
        return [
            re_path(
                rf"^(?P<pk>\d+)/(?P<name>{'|'.join(ACCESS_DECISIONS)})/$",
                self.admin_site.admin_view(self.decide_view),
                name="access_accessrequest_decide",
            ),
            *super().get_urls(),
        ]

    def decide_view(self, request: HttpRequest, pk: str, name: str) -> HttpResponse:
        access_request = (
            AccessRequest.objects.select_related("project", "token__owner", "session").filter(pk=pk).first()
        )
        if access_request is None or not self.has_view_permission(request):
            raise Http404("No such access request.")
        facts = [
            ("Project", access_request.project),
            ("Principal", access_request.token.owner.get_username()),
            ("Client", access_request.token.label),
            ("Session", access_request.session_id),
            ("State", access_request.get_state_display()),
        ]
        fallback = reverse("admin:access_accessrequest_change", args=[pk])
        return decide(self, request, access_request, ACCESS_DECISIONS[name], fallback=fallback, facts=facts)

    @admin.action(description="Allow the selected pending requests")
    def allow(self, request, queryset) -> None:
        self._decide(request, queryset, ACCESS_DECISIONS["allow"])

    @admin.action(description="Deny the selected pending requests")
    def deny(self, request, queryset) -> None:
        self._decide(request, queryset, ACCESS_DECISIONS["deny"])

    @admin.action(description="Revoke the selected allowed grants")
    def revoke(self, request, queryset) -> None:
        self._decide(request, queryset, ACCESS_DECISIONS["revoke"])

    def _decide(self, request, queryset, decision: Decision) -> None:
        pks = queryset.values_list("pk", flat=True)
        decide_each(self, request, pks, decision, noun="Request", done="Decided {count} request(s).")


class LoginRecords:
    """django-axes' login records are read, never edited: their pages keep no Save button over fields that
    cannot change. Deleting stays (removing a user's attempts is how an operator lifts a lockout)."""

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


for model, records_admin in (
    (AccessAttempt, axes_admin.AccessAttemptAdmin),
    (AccessLog, axes_admin.AccessLogAdmin),
    (AccessFailureLog, axes_admin.AccessFailureLogAdmin),
):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
        admin.site.register(model, type(records_admin.__name__, (LoginRecords, records_admin), {}))
