"""`python manage.py caretaker_init_ca [--key-type ed25519|rsa4096] [--common-name NAME]`: create the team CA
under FORGE_CA_DIR (never over an existing one) and show the fingerprint art people compare it by."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from caretaker import ca, services
from caretaker.management import shell_actor
from caretaker.randomart import key_art


class Command(BaseCommand):
    help = "Create the team CA (ca.key 0600, ca.crt) under FORGE_CA_DIR and trust it; refused if one exists."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--key-type", choices=ca.KEY_TYPES, default="ed25519", help="the CA's key (ed25519)")
        parser.add_argument("--common-name", default="Forge Team CA", help="the CA's name (Forge Team CA)")

    def handle(self, *args, key_type: str, common_name: str, **options) -> None:
        try:
            team_ca = services.do_create_ca(key_type, actor=shell_actor(), common_name=common_name)
        except services.CaretakerRefusal as refused:
            raise CommandError(refused.message, returncode=1) from None
        except ValueError as exc:  # a common name the CA cannot carry
            raise CommandError(f"--common-name: {exc}", returncode=1) from None
        art = key_art(team_ca.certificate)
        self.stdout.write(f"Created the team CA {team_ca.common_name!r} ({art.key_type} {art.bits}).")
        self.stdout.write(f"Certificate fingerprint (SHA-256): {team_ca.fingerprint_sha256}")
        self.stdout.write(f"Key fingerprint: {art.fingerprint}")
        self.stdout.write(f"Memorable ID: {art.memorable_id}")
        self.stdout.write(art.randomart)
