"""The console's front page: the MCP switch, client configurations, what waits for a decision, open sessions.

`ConsoleSite` is the Django admin site of the console (installed as the default site by
`forge_site.apps.ConsoleAdminConfig`, so every `admin.register` lands on it). It adds the dashboard to
the admin's index, above the usual list of apps, one POST endpoint that turns the switch through
`do_switch_mcp`, like the `mcp_switch` command and the server-state actions do, the short address
of a pending confirmation that write tools give their clients (`/console/confirmations/<id>/`), and the
working-draft screens (`console.draft_screens`, under `/console/drafts/`) and the caretaker's
(`console.caretaker_screens`, under `/console/caretaker/`). The client
configurations here are also what `demo_setup` prints, there with the demo token filled in.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, re_path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from access.hotpath import mcp_enabled
from access.models import AccessRequest, AccessState, McpSession, ServerState, Transport
from access.services import do_switch_mcp
from caretaker.activation import may_act
from caretaker.models import Peer
from confirmations.console import confirmation_link
from confirmations.models import ConfirmationState, Contract, ContractState
from confirmations.services import visible_to
from console.acceptance import waiting
from console.caretaker_screens import CaretakerScreens, expiring_certificates
from console.draft_screens import DraftScreens
from console.login_guard import login_failing_closed, logout_failing_closed
from forge_core.console import is_operator
from forge_core.errors import AuditUnavailable

log = logging.getLogger(__name__)

TOKEN_PLACEHOLDER = "<your token>"
OPEN_SESSIONS_SHOWN = 50


def client_configurations(url: str, sse_url: str, token: str) -> dict[str, object]:
    """Ready configurations for the usual clients, keyed by client; dicts are JSON files, strings commands."""
    header = {"Authorization": f"Bearer {token}"}
    return {
        # Claude Desktop's config file starts local (stdio) servers; mcp-remote bridges one to this URL.
        "claude_desktop": {
            "mcpServers": {
                "forge": {"command": "npx", "args": ["mcp-remote", url, "--header", f"Authorization: Bearer {token}"]}
            }
        },
        "claude_code": f"claude mcp add --transport http forge {url} --header 'Authorization: Bearer {token}'",
        "cursor": {"mcpServers": {"forge": {"url": url, "headers": header}}},
        "inspector": f"npx @modelcontextprotocol/inspector --cli {url} --transport http "
        f"--header 'Authorization: Bearer {token}' --method tools/list",
        "legacy_sse": {"url": sse_url, "headers": header},
    }


@dataclass(frozen=True)
class ClientConfiguration:
    key: str
    client: str
    where: str
    text: str


# (key in client_configurations, client, where the text goes)
SHOWN_CONFIGURATIONS = [
    ("claude_desktop", "Claude Desktop", "claude_desktop_config.json"),
    ("claude_code", "Claude Code", "a terminal"),
    ("cursor", "Cursor", "~/.cursor/mcp.json, or .cursor/mcp.json in a project"),
    ("inspector", "MCP Inspector", "a terminal (lists the tools)"),
]


def shown_configurations(request: HttpRequest) -> list[ClientConfiguration]:
    """The configurations filled with the address the operator reached the console at. Raw tokens are
    shown once, when made, and never stored, so a placeholder stands where the token goes."""
    configurations = client_configurations(
        request.build_absolute_uri("/mcp"), request.build_absolute_uri("/sse"), TOKEN_PLACEHOLDER
    )
    shown = []
    for key, client, where in SHOWN_CONFIGURATIONS:
        value = configurations[key]
        text = value if isinstance(value, str) else json.dumps(value, indent=2)
        shown.append(ClientConfiguration(key=key, client=client, where=where, text=text))
    return shown


@dataclass(frozen=True)
class SwitchPosition:
    enabled: bool
    changed_by: str
    changed_at: datetime | None


def switch_position() -> SwitchPosition:
    # The state is read as the hot path reads it (no row, or an unreadable one, is off): the console
    # shows what clients get. The row only adds who turned it last.
    state = ServerState.objects.filter(pk=1).first()
    return SwitchPosition(
        enabled=mcp_enabled(),
        changed_by=state.changed_by if state else "",
        changed_at=state.changed_at if state else None,
    )


@dataclass(frozen=True)
class OpenSessions:
    total: int
    by_transport: list[tuple[str, int]]
    shown: list[McpSession]


def open_sessions() -> OpenSessions:
    """Sessions not ended yet, newest first, at most OPEN_SESSIONS_SHOWN of them, with their counts."""
    sessions = McpSession.objects.filter(ended_at__isnull=True)
    counts = dict(sessions.order_by().values_list("transport").annotate(n=Count("pk")))
    by_transport = [(value, counts[value]) for value in Transport.values if counts.get(value)]
    shown = list(sessions.select_related("token__owner").order_by("-created_at")[:OPEN_SESSIONS_SHOWN])
    return OpenSessions(total=sum(counts.values()), by_transport=by_transport, shown=shown)


@dataclass(frozen=True)
class Dashboard:
    switch: SwitchPosition
    may_switch: bool
    sessions: OpenSessions | None  # None for staff who may not see the sessions list either
    configurations: list[ClientConfiguration]
    # What waits for an operator, each None without the permission to view it: access requests and
    # confirmations waiting for a decision, contracts waiting for a reconciliation, working drafts
    # waiting for a review.
    pending_requests: int | None
    pending_confirmations: int | None
    reconciliations: int | None
    drafts_waiting: int | None = None
    # Certificates that expire soon, for a user who may act as the team's caretaker (None for anyone else).
    expiring_certificates: list[Peer] | None = None

    @property
    def shows_waiting_items(self) -> bool:
        return any(
            count is not None
            for count in (self.pending_requests, self.pending_confirmations, self.reconciliations, self.drafts_waiting)
        )


def dashboard(request: HttpRequest) -> Dashboard:
    user = request.user
    may_see_sessions = user.has_perm("access.view_mcpsession")
    return Dashboard(
        switch=switch_position(),
        may_switch=is_operator(user),
        sessions=open_sessions() if may_see_sessions else None,
        configurations=shown_configurations(request),
        pending_requests=(
            AccessRequest.objects.filter(state=AccessState.PENDING).count()
            if user.has_perm("access.view_accessrequest")
            else None
        ),
        # Counted as the confirmations screen shows them, which expires what is due when it is read.
        pending_confirmations=(
            visible_to(user).filter(state=ConfirmationState.PENDING, expires_at__gt=timezone.now()).count()
            if user.has_perm("confirmations.view_pendingconfirmation")
            else None
        ),
        reconciliations=(
            Contract.objects.filter(state=ContractState.RECONCILIATION).count()
            if user.has_perm("confirmations.view_contract")
            else None
        ),
        drafts_waiting=waiting(user).count() if user.has_perm("projects.view_project") else None,
        expiring_certificates=expiring_certificates() if may_act(user) else None,
    )


@require_POST
def switch_mcp(request: HttpRequest) -> HttpResponse:
    """The dashboard's switch button: `position` is "on" or "off"."""
    if not is_operator(request.user):
        raise PermissionDenied("Only operators turn the MCP switch.")
    position = request.POST.get("position")
    if position not in ("on", "off"):
        messages.error(request, "The switch takes on or off; nothing changed.")
        return HttpResponseRedirect(reverse("admin:index"))
    try:
        changed = do_switch_mcp(position == "on", acting_user=request.user.get_username())
    except AuditUnavailable:
        log.exception("switching MCP %s from the console: the audit row could not be written", position)
        messages.error(request, "MCP was not switched: the audit log could not be written (see the server log).")
        return HttpResponseRedirect(reverse("admin:index"))
    if not changed:
        messages.info(request, f"MCP was already {position}.")
    elif position == "on":
        messages.success(request, "MCP switched on: clients can use the tools their tokens and grants allow.")
    else:
        messages.success(request, "MCP switched off: every client's access ends; open streams are told.")
    return HttpResponseRedirect(reverse("admin:index"))


def moved_to_access(request: HttpRequest, rest: str) -> HttpResponse:
    """The screens of tokens, sessions, the switch and access requests were under /console/mcp_api/ until
    their models moved to the access app: a bookmark or an old link lands on the same screen."""
    query = request.META.get("QUERY_STRING", "")
    return HttpResponsePermanentRedirect(f"{reverse('admin:index')}access/{rest}" + (f"?{query}" if query else ""))


class ConsoleSite(admin.AdminSite):
    site_header = "Forge MCP console"
    site_title = "Forge MCP"
    index_title = "Console"

    def get_urls(self) -> list[URLPattern | URLResolver]:
        return [
            path("mcp-switch/", self.admin_view(switch_mcp), name="mcp_switch"),
            path("confirmations/<uuid:confirmation_id>/", self.admin_view(confirmation_link), name="confirmation_link"),
            *DraftScreens(self).urls,
            *CaretakerScreens(self).urls,
            re_path(r"^mcp_api/(?P<rest>(?:clienttoken|mcpsession|serverstate|accessrequest)/.*)$", moved_to_access),
            *super().get_urls(),
        ]

    def login(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return login_failing_closed(request, lambda: super(ConsoleSite, self).login(request, extra_context))

    # The stubs narrow the admin's logout to a TemplateResponse; a logout that could not be recorded redirects.
    def logout(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:  # type: ignore[override]
        return logout_failing_closed(request, lambda: super(ConsoleSite, self).logout(request, extra_context))

    def index(self, request: HttpRequest, extra_context: dict | None = None) -> TemplateResponse:
        return super().index(request, extra_context={"dashboard": dashboard(request), **(extra_context or {})})
