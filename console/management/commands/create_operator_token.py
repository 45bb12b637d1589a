"""`python manage.py create_operator_token NAME [--label L]`: an operator API token, printed alone last."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.operator_tokens import NotAnOperator, do_create_operator_token


class Command(BaseCommand):
    help = (
        "Create a token for the operator API (/api/) that acts as the operator NAME. The token is printed once, "
        "alone on the last line."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="the operator the token acts as (see create_operator)")
        parser.add_argument("--label", default="", help="what the token is for, shown in the audit log")

    def handle(self, *args, name: str, label: str, **options) -> None:
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise CommandError(f"No user {name!r}; create the operator first with 'manage.py create_operator'.")
        label = label.strip() or f"{name} (operator API)"
        try:
            new = do_create_operator_token(user, label, acting_user="manage.py")
        except NotAnOperator as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"Created operator token {new.token.prefix}… for {name} ({label}). Shown once:")
        self.stdout.write(new.raw)
