"""`manage.py recover_contracts`: what `runmcp` does at start-up, for an operator after a crash.

Contracts whose process ended while they were in flight move to RECONCILIATION (EXECUTING, ROLLING_BACK),
FAILED (PREPARING) or EXPIRED (PREPARED); none is carried out again. Approved confirmations whose contract
will not run any more are marked failed. Resolve reconciliations in the console afterwards.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from confirmations.services import recover


class Command(BaseCommand):
    help = "Hand contracts interrupted by a crash to reconciliation (never re-sends them)."

    def handle(self, *args, **options) -> None:
        moved = recover(actor="recover_contracts")
        for contract in moved:
            self.stdout.write(f"{contract.memorable_id}  {contract.label}  -> {contract.state}")
        self.stdout.write(f"{len(moved)} contract(s) recovered.")
