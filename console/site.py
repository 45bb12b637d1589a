"""The console's front page: the MCP switch, client configurations, what waits for a decision, open sessions.

`ConsoleSite` is the Django admin site of the console (installed as the default site by
`forge_site.apps.ConsoleAdminConfig`, so every `admin.register` lands on it). It adds the dashboard to
the admin's index, above the usual list of apps, one POST endpoint that turns the switch through
`do_switch_mcp`, like the `mcp_switch` command and the server-state actions do, the short address
of a pending confirmation that write tools give their clients (`/console/confirmations/<id>/`), and the
working-draft screens (`console.draft_screens`, under `/console/drafts/`) and the caretaker's
(`console.caretaker_screens`, under `/console/caretaker/`). The client
configurations here are also what `demo_setup` prints, there with the demo token filled in. Claude Desktop's
comes twice: through `npx mcp-remote`, and through this checkout's own stdio bridge (`mcp_stdio`), which
finds the server without a URL and reads the token from a 0600 file, so that one holds no token.

When this process serves HTTPS (`runmcp --tls-port`), the dashboard also shows the server certificate's
fingerprint art (what a member compares with what a client shows before trusting it) and the configurations
of a team member who presents the certificate the caretaker issued instead of a token: curl, the official
Python SDK and Claude Code through `mcp_stdio`, with placeholders for the member's files.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.http.request import split_domain_port
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, re_path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from access import tls
from access.hotpath import mcp_enabled
from access.models import AccessRequest, AccessState, McpSession, ServerState, Transport
from access.services import do_switch_mcp
from audit.models import EventKind
from caretaker import trust
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
from projects.writers import SharedFile, shared_files

log = logging.getLogger(__name__)

TOKEN_PLACEHOLDER = "<your token>"
STDIO_TOKEN_FILE = "client-token"
OPEN_SESSIONS_SHOWN = 50


def client_configurations(url: str, sse_url: str, token: str, token_file: Path | None = None) -> dict[str, object]:
    """Ready configurations for the usual clients, keyed by client; dicts are JSON files, strings commands.
    `token_file` is where this checkout's stdio bridge reads the client token (the dashboard's default file
    unless given)."""
    header = {"Authorization": f"Bearer {token}"}
    token_file = token_file or stdio_token_file()
    return {
        # Claude Desktop's config file starts local (stdio) servers; mcp-remote bridges one to this URL.
        "claude_desktop": {
            "mcpServers": {
                "forge": {"command": "npx", "args": ["mcp-remote", url, "--header", f"Authorization: Bearer {token}"]}
            }
        },
        # Or this checkout's own bridge, which finds the running server of its data folder (no URL) and reads
        # the token from a file only its owner may read, so none is in the client's configuration.
        "claude_desktop_stdio": {"mcpServers": {"forge": stdio_server(token_file)}},
        "stdio_token_file": stdio_token_file_command(token_file),
        "claude_code": f"claude mcp add --transport http forge {url} --header 'Authorization: Bearer {token}'",
        "cursor": {"mcpServers": {"forge": {"url": url, "headers": header}}},
        "inspector": f"npx @modelcontextprotocol/inspector --cli {url} --transport http "
        f"--header 'Authorization: Bearer {token}' --method tools/list",
        "legacy_sse": {"url": sse_url, "headers": header},
    }


def stdio_token_file() -> Path:
    """The file the dashboard's stdio configuration names for the client token: in this data folder's private
    secrets folder (0700)."""
    return Path(settings.FORGE_SECRETS_DIR) / STDIO_TOKEN_FILE


def stdio_server(token_file: Path) -> dict[str, Any]:
    """How a stdio client starts this checkout's bridge: its virtualenv's Python, manage.py by absolute path,
    and the data folder, so it finds the server this process belongs to without a URL."""
    return {
        "command": sys.executable,
        "args": [str(Path(settings.BASE_DIR) / "manage.py"), "mcp_stdio", "--token-file", str(token_file)],
        "env": {"FORGE_DATA_DIR": str(settings.FORGE_DATA_DIR)},
    }


def stdio_token_file_command(token_file: Path) -> str:
    """A shell command that stores a pasted token in `token_file`, readable by its owner only (the bridge refuses
    a looser file). The token is typed into `cat`, so it is in no command line and no shell history."""
    quoted = shlex.quote(str(token_file))
    return f"(umask 077 && mkdir -p {shlex.quote(str(token_file.parent))} && cat > {quoted} && chmod 600 {quoted})"


@dataclass(frozen=True)
class MemberFiles:
    """Where a team member keeps the files a mutual-TLS client needs (PEM): the certificate the caretaker
    issued, its private key, and the server's certificate (or the CA bundle that issued it) to check it by."""

    cert: str = "~/.config/forge/alice.crt"
    key: str = "~/.config/forge/alice.key"
    ca: str = "~/.config/forge/forge-server.crt"


# The certificate is the credential: no token in these. The placeholders name a member's files, never a secret.
PLACEHOLDER_FILES = MemberFiles()

CURL_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}},
}

PYTHON_SDK_CLIENT = """import asyncio
import ssl
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

tls = ssl.create_default_context(cafile=Path({ca}).expanduser())
tls.load_cert_chain(Path({cert}).expanduser(), Path({key}).expanduser())


async def main() -> None:
    async with httpx2.AsyncClient(verify=tls) as http:
        async with Client(streamable_http_client({url}, http_client=http)) as client:
            print((await client.call_tool("session.status", {{}})).structured_content)


asyncio.run(main())
"""


def mtls_configurations(url: str, files: MemberFiles = PLACEHOLDER_FILES) -> dict[str, str]:
    """A team member's configurations over HTTPS with the certificate the caretaker issued (no token), keyed by
    client like `client_configurations`: curl, the official Python SDK, and Claude Code through `mcp_stdio`."""
    cert, key, ca = (_shell_path(path) for path in (files.cert, files.key, files.ca))
    return {
        "mtls_curl": f"curl --cert {cert} --key {key} --cacert {ca} \\\n"
        "  -H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json' \\\n"
        f"  -d {shlex.quote(json.dumps(CURL_INITIALIZE, separators=(',', ':')))} \\\n"
        f"  {shlex.quote(url)}",
        "mtls_python_sdk": PYTHON_SDK_CLIENT.format(
            url=json.dumps(url), cert=json.dumps(files.cert), key=json.dumps(files.key), ca=json.dumps(files.ca)
        ).strip(),
        # Claude Code starts the stdio bridge of a Forge checkout on the member's machine; the bridge presents
        # the certificate (Claude Code's own HTTP transport has no client certificates).
        "mtls_claude_code": f"claude mcp add forge -- python /path/to/forge-mcp/manage.py mcp_stdio --url {shlex.quote(url)} "
        f"--cert {cert} --key {key} --ca {ca}",
    }


def _shell_path(path: str) -> str:
    # A leading ~/ stays unquoted so the shell expands it; the rest is quoted as a shell word.
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass(frozen=True)
class ClientConfiguration:
    key: str
    client: str
    where: str
    text: str


# (key in client_configurations, client, where the text goes)
SHOWN_CONFIGURATIONS = [
    ("claude_desktop", "Claude Desktop", "claude_desktop_config.json"),
    (
        "claude_desktop_stdio",
        "Claude Desktop through mcp_stdio",
        "claude_desktop_config.json (finds the running server by itself; reads the token file below)",
    ),
    ("stdio_token_file", "mcp_stdio's token file", "a terminal: run it, paste the token, press Enter, then Ctrl-D"),
    ("claude_code", "Claude Code", "a terminal"),
    ("cursor", "Cursor", "~/.cursor/mcp.json, or .cursor/mcp.json in a project"),
    ("inspector", "MCP Inspector", "a terminal (lists the tools)"),
]

# The same for a team member with a certificate, shown while this process serves HTTPS.
SHOWN_MTLS_CONFIGURATIONS = [
    ("mtls_curl", "curl", "a terminal (opens a session)"),
    ("mtls_python_sdk", "Python SDK (mcp)", "a Python script"),
    ("mtls_claude_code", "Claude Code", "a terminal, on a machine with a Forge checkout (runs mcp_stdio)"),
]


def shown_configurations(request: HttpRequest) -> list[ClientConfiguration]:
    """The configurations filled with the address the operator reached the console at. Raw tokens are
    shown once, when made, and never stored, so a placeholder stands where the token goes."""
    configurations = client_configurations(
        request.build_absolute_uri("/mcp"), request.build_absolute_uri("/sse"), TOKEN_PLACEHOLDER
    )
    return _shown(configurations, SHOWN_CONFIGURATIONS)


def _shown(configurations: dict[str, Any], which: list[tuple[str, str, str]]) -> list[ClientConfiguration]:
    shown = []
    for key, client, where in which:
        value = configurations[key]
        text = value if isinstance(value, str) else json.dumps(value, indent=2)
        shown.append(ClientConfiguration(key=key, client=client, where=where, text=text))
    return shown


@dataclass(frozen=True)
class ServedTls:
    """This process's HTTPS listener as the dashboard shows it: the address a member connects to, the server
    certificate's description (`access.tls.served`), and whether members may present a certificate."""

    mcp_url: str
    port: int
    certificate: dict[str, Any]
    expires_at: datetime
    mutual: bool
    configurations: list[ClientConfiguration]


def served_tls(request: HttpRequest) -> ServedTls | None:
    """None unless this process serves HTTPS; the address is the host the operator reached the console at, on
    the TLS port."""
    served = tls.served()
    if served is None:
        return None
    host, _ = split_domain_port(request.get_host())
    url = f"https://{host}:{served['port']}/mcp"
    return ServedTls(
        mcp_url=url,
        port=served["port"],
        certificate=served["certificate"],
        expires_at=datetime.fromisoformat(served["certificate"]["not_after"]),
        mutual=bool(trust.trusted()),
        configurations=_shown(mtls_configurations(url), SHOWN_MTLS_CONFIGURATIONS),
    )


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
    # The HTTPS listener and the mutual-TLS configurations, None while this process serves no TLS.
    tls: ServedTls | None = None
    # The switch's turns in the audit log, for a user who may read it (None for anyone else).
    switch_history_url: str | None = None
    # Projects whose file another running deployment also binds (projects.writers), for who may view projects.
    shared_files: list[SharedFile] | None = None

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
        tls=served_tls(request),
        switch_history_url=(
            f"{reverse('admin:audit_auditevent_changelist')}?kind={EventKind.MCP_SWITCHED}"
            if user.has_perm("audit.view_auditevent")
            else None
        ),
        shared_files=shared_files() if user.has_perm("projects.view_project") else None,
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
    their models moved to the access app: a bookmark or an old link (the app's index page included) lands on
    the same screen."""
    query = request.META.get("QUERY_STRING", "")
    return HttpResponsePermanentRedirect(f"{reverse('admin:index')}access/{rest}" + (f"?{query}" if query else ""))


def _screen_entry(name: str, object_name: str, url: str) -> dict[str, Any]:
    """A purpose-built screen as the admin's app list and side menu show a model: a name and a link, no Add."""
    return {
        "name": name,
        "object_name": object_name,
        "admin_url": url,
        "add_url": None,
        "view_only": True,
        "perms": {"view": True},
    }


# Model screens folded into the dashboard, which shows what they held: (app label, model name) -> the
# dashboard's panel. The menus leave them out, and their addresses land on the panel.
FOLDED_INTO_DASHBOARD = {("access", "serverstate"): "mcp-switch"}


class ConsoleSite(admin.AdminSite):
    site_header = "Forge MCP console"
    site_title = "Forge MCP"
    index_title = "Console"

    def get_urls(self) -> list[URLPattern | URLResolver]:
        return [
            path("mcp-switch/", self.admin_view(switch_mcp), name="mcp_switch"),
            re_path(r"^access/serverstate/(?P<rest>.*)$", self.admin_view(self.server_state), name="server_state"),
            path("confirmations/<uuid:confirmation_id>/", self.admin_view(confirmation_link), name="confirmation_link"),
            *DraftScreens(self).urls,
            *CaretakerScreens(self).urls,
            re_path(
                r"^mcp_api/(?P<rest>(?:(?:clienttoken|mcpsession|serverstate|accessrequest)/.*)?)$", moved_to_access
            ),
            *super().get_urls(),
        ]

    def login(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return login_failing_closed(request, lambda: super(ConsoleSite, self).login(request, extra_context))

    # The stubs narrow the admin's logout to a TemplateResponse; a logout that could not be recorded redirects.
    def logout(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:  # type: ignore[override]
        return logout_failing_closed(request, lambda: super(ConsoleSite, self).logout(request, extra_context))

    def server_state(self, request: HttpRequest, rest: str) -> HttpResponse:
        """The server state's screens, folded into the dashboard: its switch panel shows the one row (the
        switch, who turned it and when) and turns it. A visit lands on that panel; the list's switch actions
        (a POST, as scripts written for the old screen send) still run, and come back to the dashboard with
        their message."""
        if request.method == "POST" and not rest:
            return self._registry[ServerState].changelist_view(request)
        return HttpResponseRedirect(f"{reverse('admin:index')}#{FOLDED_INTO_DASHBOARD['access', 'serverstate']}")

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        """The admin's apps and models (the index's list and the side menu), without the screens folded into
        the dashboard and with the purpose-built screens a user may open: the working drafts among the
        projects, the caretaker's screen as an app of its own."""
        apps = []
        for app in super().get_app_list(request, app_label):
            models = [
                model
                for model in app["models"]
                if (app["app_label"], model["object_name"].lower()) not in FOLDED_INTO_DASHBOARD
            ]
            if app["app_label"] == "projects":
                models.append(_screen_entry("Working drafts", "WorkingDraft", reverse("admin:drafts")))
            if models:
                apps.append({**app, "models": models})
        if app_label in (None, "caretaker") and may_act(request.user):
            url = reverse("admin:caretaker")
            caretaker = _screen_entry("Team caretaker", "Caretaker", url)
            apps.append(
                {
                    "name": "Caretaker",
                    "app_label": "caretaker",
                    "app_url": url,
                    "has_module_perms": True,
                    "models": [caretaker],
                }
            )
        return apps

    def index(self, request: HttpRequest, extra_context: dict | None = None) -> TemplateResponse:
        return super().index(request, extra_context={"dashboard": dashboard(request), **(extra_context or {})})
