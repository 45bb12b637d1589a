"""`python manage.py create_operator NAME --password-file F`: a console user with operator rights."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.operators import do_create_operator


class Command(BaseCommand):
    help = "Create (or update the password of) a console operator. The password is read from a file."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name")
        parser.add_argument("--password-file", required=True, type=Path)

    def handle(self, *args, name: str, password_file: Path, **options) -> None:
        try:
            password = password_file.read_text().rstrip("\r\n")
        except OSError as exc:
            raise CommandError(f"Cannot read {password_file}: {exc.strerror}.") from None
        try:
            validate_password(password)
        except ValidationError as exc:
            raise CommandError("Password refused: " + " ".join(exc.messages)) from None
        user, created = do_create_operator(name, password, acting_user="manage.py")
        self.stdout.write(f"{'Created' if created else 'Updated'} operator {user.get_username()}.")
