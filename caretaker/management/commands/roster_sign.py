"""`python manage.py roster_sign`: sign the roster again with the next sequence number (a fresh expiry), through
the executor like every roster change. Only an active caretaker signs; otherwise the command says what is missing."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from caretaker import services
from caretaker.management import shell_actor
from forge_core.errors import Refusal


class Command(BaseCommand):
    help = "Sign the roster (peers.toml, revoked.toml, crl.pem in FORGE_ROSTER_DIR) again; prints the new sequence."

    def handle(self, *args, **options) -> None:
        try:
            outcome = services.do_sign_roster(actor=shell_actor())
        except Refusal as refused:
            raise CommandError(refused.message, returncode=1) from None
        if not outcome.verified:
            raise CommandError(
                f"The roster was not signed: contract {outcome.memorable_id} ended {outcome.state}"
                f"{f' ({outcome.detail})' if outcome.detail else ''}.",
                returncode=1,
            )
        self.stdout.write(
            f"Signed roster sequence {outcome.settled['roster_sequence']} (contract {outcome.memorable_id})."
        )
