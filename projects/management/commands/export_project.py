"""`python manage.py export_project S [-o F]`: write a project's file (to stdout without -o)."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from projects.files import write_atomically
from projects.models import Project
from projects.services import export_bytes


class Command(BaseCommand):
    help = "Export a registered project as PLCopen XML (deterministic: the same state gives the same bytes)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug")
        parser.add_argument("-o", "--output", type=Path, default=None)

    def handle(self, *args, slug: str, output: Path | None, **options) -> None:
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise CommandError(f"No project {slug!r}; 'python manage.py import_project' registers one.")
        data = export_bytes(project)
        if output is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            write_atomically(output.resolve(), data)
            self.stderr.write(f"Wrote {output} ({len(data)} bytes).")
