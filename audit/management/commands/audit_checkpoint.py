"""`python manage.py audit_checkpoint`: sign a checkpoint of the audit log now."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from audit.services import do_make_checkpoint


class Command(BaseCommand):
    help = "Sign a checkpoint (tree size and root hash) of the audit log, and print it."

    def handle(self, *args, **options) -> None:
        checkpoint = do_make_checkpoint()
        if checkpoint is None:
            self.stdout.write("no new events since the last checkpoint; nothing signed")
            return
        self.stdout.write(checkpoint.note)
