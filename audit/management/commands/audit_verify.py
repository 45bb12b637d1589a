"""`python manage.py audit_verify [--jsonl PATH] [--against FILE ...]`: check the audit chain, its mirror,
its tree and its checkpoints, and that the log is no shorter than any checkpoint kept outside it."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.kept import SavedCheckpoint
from audit.mirror import MirrorError
from audit.verify import rebuild_mirror as rewrite_mirror
from audit.verify import verify_log

BAD_ARGUMENT = 2  # the command was not run as asked (a file it cannot read); 1 is reserved for a failed check


class Command(BaseCommand):
    help = "Verify the audit log: prints 'ok N events' or the first bad event and why (exit status 1)."
    # It diagnoses what the start-up checks (audit.E001, audit.E002) report, so it must run when they fail.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--jsonl", type=Path, default=None, help="the mirror to compare (FORGE_AUDIT_LOG)")
        parser.add_argument("--no-mirror", action="store_true", help="check the database only")
        parser.add_argument(
            "--rebuild-mirror", action="store_true", help="after a sound check of the database, rewrite the mirror"
        )
        parser.add_argument(
            "--against",
            type=Path,
            action="append",
            default=[],
            metavar="FILE",
            help="a signed checkpoint saved earlier (as /api/audit/checkpoint serves it): the log must be at "
            "least as long and extend the same tree (repeatable)",
        )

    def handle(
        self, *args, jsonl: Path | None, no_mirror: bool, rebuild_mirror: bool, against: list[Path], **options
    ) -> None:
        saved = []
        for path in against:
            try:
                saved.append(SavedCheckpoint.read(path))
            except OSError as exc:
                raise CommandError(
                    f"--against {path}: cannot read it ({exc.strerror})", returncode=BAD_ARGUMENT
                ) from None
        mirror = None if (no_mirror or rebuild_mirror) else (jsonl or settings.FORGE_AUDIT_LOG)
        report = verify_log(mirror, saved)
        if not report.ok:
            self.stdout.write(str(report))
            raise CommandError(str(report.finding), returncode=1)
        if rebuild_mirror:
            path = jsonl or settings.FORGE_AUDIT_LOG
            try:
                self.stdout.write(f"rebuilt {path} with {rewrite_mirror(path)} lines")
            except MirrorError as exc:
                raise CommandError(str(exc), returncode=1) from None
        self.stdout.write(str(report))
