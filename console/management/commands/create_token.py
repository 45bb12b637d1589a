"""`python manage.py create_token --user NAME --label LABEL`: a new client token, printed alone last."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from access.services import do_create_token


class Command(BaseCommand):
    help = "Create an MCP client token for a user. The token is printed once, alone on the last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="the token's owner (a console user)")
        parser.add_argument("--create-user", action="store_true", help="create the user when missing")
        parser.add_argument("--label", required=True, help="the client's name, shown in the audit log")
        parser.add_argument("--expires-days", type=int, default=None, help="expire after this many days")

    def handle(self, *args, user: str, create_user: bool, label: str, expires_days: int | None, **options):
        if not label.strip():
            raise CommandError("--label must not be empty: it names the client in the audit log.")
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days must be 1 or more.")
        User = get_user_model()
        owner = User.objects.filter(username=user).first()
        if owner is None:
            if not create_user:
                raise CommandError(f"No user {user!r}; pass --create-user to create one.")
            owner = User.objects.create_user(username=user)
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        new = do_create_token(owner=owner, label=label.strip(), expires_at=expires_at, acting_user="manage.py")
        self.stderr.write(f"Created token {new.token.prefix}… for {owner.get_username()} ({label}). Shown once:")
        self.stdout.write(new.raw)
