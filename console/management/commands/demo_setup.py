"""`python manage.py demo_setup`: the quickstart's demo operator and demo token, made once and reused.

The person and the AI client are two identities: the demo operator (`operator`) logs in to the console,
and the demo client token belongs to its own principal (`demo-client`), who is no operator and may view
the demo project only, so the audit log tells what the client asked from what the person decided. The
demo operator's password and the demo client token are kept in `$FORGE_DATA_DIR/secrets/` (mode 0600); the
password is printed on the run that makes the operator, and later runs keep the operator's password as it is
(so nobody is logged out); the database holds only the token's digest.
A token kept from an earlier version that belongs to the operator is revoked and replaced. Prints the URLs and a ready client configuration (the console's dashboard shows the same
configurations, with a placeholder for the token).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from guardian.shortcuts import assign_perm

from access.services import authenticate_token, do_create_token, do_revoke_token, do_switch_mcp
from console.operators import do_create_operator
from console.site import client_configurations
from projects.demo import demo_project_bytes
from projects.files import inside_root
from projects.models import Project
from projects.services import do_bind_project, do_import_project

DEMO_OPERATOR = "operator"
DEMO_CLIENT = "demo"  # the token's label
DEMO_PRINCIPAL = "demo-client"  # who the token stands for: not an operator
DEMO_PROJECT = "demo-conveyor"


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")


class Command(BaseCommand):
    help = "Create (once) the demo operator and demo client token and print how to connect."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host: str, port: int, **options) -> None:
        folder = settings.FORGE_SECRETS_DIR
        password_file, token_file = folder / "demo-operator-password", folder / "demo-token"
        # The password is made and printed once, with the operator; later runs leave both alone (a new
        # hash would log out every browser of the operator), so a password changed since is kept too.
        made = not User.objects.filter(username=DEMO_OPERATOR).exists()
        if made and not password_file.exists():
            _write_secret(password_file, secrets.token_urlsafe(12))
        password = password_file.read_text().strip() if password_file.exists() else ""
        do_create_operator(DEMO_OPERATOR, password, acting_user="demo_setup", reset_password=False)
        if made:
            login = f"login {DEMO_OPERATOR} / {password}"
        else:
            login = f"login {DEMO_OPERATOR}, with the password printed when it was made ({password_file})"
        project = ensure_demo_project()
        principal = ensure_demo_principal(project)
        token = token_file.read_text().strip() if token_file.exists() else ""
        kept = authenticate_token(token)
        if kept is not None and kept.owner_id != principal.pk:
            do_revoke_token(kept, acting_user="demo_setup")  # an earlier version gave the operator's identity
            kept = None
        if kept is None:
            token = do_create_token(owner=principal, label=DEMO_CLIENT, acting_user="demo_setup").raw
            _write_secret(token_file, token)
        # A fresh install starts with MCP off; the demo is for trying it, so it switches it on (audited).
        do_switch_mcp(True, acting_user="demo_setup")
        base = f"http://{host}:{port}"
        url, sse_url = f"{base}/mcp", f"{base}/sse"
        configurations = client_configurations(url, sse_url, token, token_file=token_file)
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"MCP (Streamable HTTP): {url}",
                    f"MCP (legacy SSE):      {sse_url}",
                    f"Client token:          {token}",
                    f"Console:               {base}/console/  ({login})",
                    f"Demo project:          {DEMO_PROJECT}  (try project.overview with project={DEMO_PROJECT!r})",
                    "MCP is switched on for the demo; 'python manage.py mcp_switch off' (or the console) turns it off.",
                    "Access: a session's first project call asks for it; a stateless client (revision 2026-07-28) is",
                    "refused with FORGE_ERR_PROJECT_ACCESS_PENDING until it calls session.request_access, which asks",
                    "and returns the session_handle to pass with every project call. Allow it in the console.",
                    "",
                    "Client configuration (Claude Desktop, claude_desktop_config.json):",
                    json.dumps(configurations["claude_desktop"], indent=2),
                    "Or this checkout's stdio bridge, which finds the running server by itself and reads the token",
                    f"from {token_file}:",
                    json.dumps(configurations["claude_desktop_stdio"], indent=2),
                    "Claude Code: " + str(configurations["claude_code"]),
                    "",
                ]
            )
        )


def ensure_demo_project() -> Project:
    """Register the demo project once; a demo file left in the projects root is bound, not overwritten."""
    found = Project.objects.filter(slug=DEMO_PROJECT).first()
    if found is not None:
        return found
    path = inside_root(f"{DEMO_PROJECT}.xml")
    if path.exists():
        return do_bind_project(path, slug=DEMO_PROJECT, acting_user="demo_setup")
    return do_import_project(demo_project_bytes(), slug=DEMO_PROJECT, acting_user="demo_setup")


def ensure_demo_principal(project: Project) -> User:
    """The demo client's own principal: no console login, no operator group, view_project on the demo project."""
    principal, created = User.objects.get_or_create(username=DEMO_PRINCIPAL)
    if created:
        principal.set_unusable_password()
        principal.save(update_fields=["password"])
    assign_perm("projects.view_project", principal, project)
    return principal
