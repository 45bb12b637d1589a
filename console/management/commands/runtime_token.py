"""`python manage.py runtime_token create PROJECT --operator NAME [--label L] | revoke --prefix P | --id N | list`.

A runtime connector's token, bound to one project: `create` prints the raw token once, alone on the last line
(only its digest is kept); `revoke` refuses its next snapshot; `list` shows the tokens not revoked. Both
changes go through `access.runtime`, which writes their audit rows, as the console's runtime tokens screen does.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.models import RuntimeToken
from access.runtime import RuntimeTokenNotAllowed, do_create_runtime_token, do_revoke_runtime_token
from forge_core.console import is_operator
from projects.models import Project


class Command(BaseCommand):
    help = "Create, revoke or list runtime connector tokens (each posts the runtime snapshots of one project)."

    def add_arguments(self, parser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="make a token for PROJECT, printed once")
        create.add_argument("project", help="the project's slug")
        create.add_argument("--operator", required=True, help="the operator who answers for the connector")
        create.add_argument("--label", default="", help="the connector's name (the PLC or gateway), for the log")
        revoke = actions.add_parser("revoke", help="revoke a token at once")
        which = revoke.add_mutually_exclusive_group(required=True)
        which.add_argument("--prefix", help="the token's first characters, as 'list' shows them")
        which.add_argument("--id", dest="token_id", type=int, help="the token's id (see 'list')")
        actions.add_parser("list", help="the tokens not revoked yet")

    def handle(self, *args, action: str, **options) -> None:
        actions: dict[str, Callable[..., None]] = {
            "create": self.create,
            "revoke": self.revoke,
            "list": self.list_tokens,
        }
        actions[action](**options)

    def create(self, *, project: str, operator: str, label: str, **options) -> None:
        found = Project.objects.filter(slug=project.strip().lower()).first()
        if found is None:
            raise CommandError(f"No project {project!r}; the console's Projects list has their slugs.")
        user = get_user_model().objects.filter(username=operator).first()
        if user is None or not is_operator(user):
            raise CommandError(f"{operator!r} is not a console operator; name the operator who answers for it.")
        label = label.strip() or f"runtime connector of {found.slug}"
        try:
            new = do_create_runtime_token(found, label, created_by=user, acting_user="manage.py")
        except RuntimeTokenNotAllowed as refusal:
            raise CommandError(str(refusal)) from refusal
        self.stderr.write(f"Created runtime token {new.token.prefix}… for {found.slug} ({label}). Shown once:")
        self.stdout.write(new.raw)

    def revoke(self, *, prefix: str | None, token_id: int | None, **options) -> None:
        live = RuntimeToken.objects.filter(revoked_at__isnull=True).select_related("project", "created_by")
        if prefix is not None:
            found, named = live.filter(prefix=prefix.rstrip("…")), f"with prefix {prefix!r}"
        else:
            found, named = live.filter(pk=token_id or 0), f"with id {token_id}"
        tokens = list(found[:2])
        if not tokens:
            raise CommandError(
                f"No runtime token {named} is left to revoke; 'runtime_token list' shows those that are."
            )
        if len(tokens) > 1:
            raise CommandError(f"More than one runtime token is {named}; name it with --id (see 'runtime_token list').")
        do_revoke_runtime_token(tokens[0], acting_user="manage.py")
        self.stdout.write(f"Revoked runtime token {tokens[0].prefix}… of {tokens[0].project.slug} ({tokens[0].label}).")

    def list_tokens(self, **options) -> None:
        live = RuntimeToken.objects.filter(revoked_at__isnull=True).select_related("project").order_by("pk")
        for token in live:
            self.stdout.write(f"{token.pk} {token.prefix} {token.project.slug} {token.label}")
