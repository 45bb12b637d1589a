"""`python manage.py roster_accept [--incoming] [PEERS REVOKED]`: consider a roster signed elsewhere now, as
the watcher of FORGE_ROSTER_DIR/incoming/ does while the server runs, and print the verdict."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from caretaker import services
from caretaker.management import shell_actor
from forge_core.errors import Refusal

BAD_ARGUMENT = 2
TAKEN = ("accepted", "same")


class Command(BaseCommand):
    help = (
        "Consider a signed roster (PEERS REVOKED files, or --incoming for the pairs in FORGE_ROSTER_DIR/incoming/): "
        "accepted only when it verifies against the trust store and is newer. Exit status 1 unless accepted or same."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("files", nargs="*", type=Path, metavar="FILE", help="peers.toml revoked.toml")
        parser.add_argument(
            "--incoming", action="store_true", help="consider the pairs waiting in FORGE_ROSTER_DIR/incoming/"
        )

    def handle(self, *args, files: list[Path], incoming: bool, **options) -> None:
        if incoming == bool(files):
            raise CommandError("Give either --incoming or the two files PEERS REVOKED.", returncode=BAD_ARGUMENT)
        try:
            verdicts = services.consider_incoming(actor=shell_actor()) if incoming else [self._consider_files(files)]
        except Refusal as refused:
            raise CommandError(refused.message, returncode=1) from None
        if not verdicts:
            self.stdout.write("No complete pair (NAME.peers.toml with NAME.revoked.toml) is waiting in incoming/.")
        for verdict in verdicts:
            self.stdout.write(f"{verdict.outcome}: {verdict.message}")
        if any(verdict.outcome not in TAKEN for verdict in verdicts):
            raise CommandError(
                "Not accepted: " + "; ".join(v.outcome for v in verdicts if v.outcome not in TAKEN), returncode=1
            )

    def _consider_files(self, files: list[Path]) -> services.Verdict:
        if len(files) != 2:
            raise CommandError("Give the two files of a roster: PEERS REVOKED.", returncode=BAD_ARGUMENT)
        peers_path, revoked_path = files
        try:
            peers_toml, revoked_toml = peers_path.read_bytes(), revoked_path.read_bytes()
        except OSError as exc:
            raise CommandError(f"{exc.filename}: cannot read it ({exc.strerror})", returncode=BAD_ARGUMENT) from None
        return services.consider_roster(peers_toml, revoked_toml, source=f"manage.py {peers_path}", actor=shell_actor())
