"""`python manage.py audit_verify [--jsonl PATH]`: check the audit chain, its mirror and its checkpoints."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.verify import rebuild_mirror as rewrite_mirror
from audit.verify import verify_log


class Command(BaseCommand):
    help = "Verify the audit log: prints 'ok N events' or the first bad event and why (exit status 1)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--jsonl", type=Path, default=None, help="the mirror to compare (FORGE_AUDIT_LOG)")
        parser.add_argument("--no-mirror", action="store_true", help="check the database only")
        parser.add_argument(
            "--rebuild-mirror", action="store_true", help="after a sound check of the database, rewrite the mirror"
        )

    def handle(self, *args, jsonl: Path | None, no_mirror: bool, rebuild_mirror: bool, **options) -> None:
        mirror = None if (no_mirror or rebuild_mirror) else (jsonl or settings.FORGE_AUDIT_LOG)
        report = verify_log(mirror)
        if not report.ok:
            self.stdout.write(str(report))
            raise CommandError(str(report.finding), returncode=1)
        if rebuild_mirror:
            path = jsonl or settings.FORGE_AUDIT_LOG
            self.stdout.write(f"rebuilt {path} with {rewrite_mirror(path)} lines")
        self.stdout.write(str(report))
