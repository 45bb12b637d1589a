"""`python manage.py revoke_token --label LABEL | --prefix PREFIX | --id N`: revoke a client token from a shell.

As from the console: its next request is refused, its open streams close (on the embedded channel layer
through the outbox the running server follows) and its sessions' pending confirmations are cancelled.
`--list` shows the tokens that can still be revoked.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from access.models import ClientToken
from access.services import do_revoke_token


class Command(BaseCommand):
    help = "Revoke an MCP client token, named by its label, the first characters shown for it, or its id."

    def add_arguments(self, parser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--label", help="the client's name the token was created with")
        which.add_argument("--prefix", help="the token's first characters, as the console shows them")
        which.add_argument("--id", dest="token_id", type=int, help="the token's id (see --list)")
        which.add_argument("--list", dest="listing", action="store_true", help="list the tokens not revoked yet")

    def handle(
        self, *args, label: str | None, prefix: str | None, token_id: int | None, listing: bool, **options
    ) -> None:
        live = ClientToken.objects.filter(revoked_at__isnull=True).select_related("owner").order_by("pk")
        if listing:
            for token in live:
                self.stdout.write(f"{token.pk} {token.prefix} {token.owner.get_username()} {token.label}")
            return
        if label is not None:
            found, named = live.filter(label=label), f"labelled {label!r}"
        elif prefix is not None:
            found, named = live.filter(prefix=prefix.rstrip("…")), f"with prefix {prefix!r}"
        else:
            found, named = live.filter(pk=token_id or 0), f"with id {token_id}"
        tokens = found[:2]
        if not tokens:
            raise CommandError(f"No token {named} is left to revoke; 'revoke_token --list' shows those that are.")
        if len(tokens) > 1:
            raise CommandError(f"More than one token is {named}; name it with --prefix or --id (see --list).")
        token = tokens[0]
        do_revoke_token(token, acting_user="manage.py")
        self.stdout.write(f"Revoked token {token.prefix}… of {token.owner.get_username()} ({token.label}).")
