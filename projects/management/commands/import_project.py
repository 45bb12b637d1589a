"""`python manage.py import_project FILE --slug S [--name N] [--bind]`: register a PLCopen project."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from projects.files import PathOutsideRoot
from projects.services import ProjectRefused, do_bind_project, do_import_project


class Command(BaseCommand):
    help = "Register a PLCopen TC6 2.01 project: copy it under FORGE_PROJECTS_ROOT, or bind it where it lies."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--slug", required=True, help="the project's short name in URLs and tools")
        parser.add_argument("--name", default="", help="display name (default: the file's contentHeader name)")
        parser.add_argument("--bind", action="store_true", help="register the file in place (inside the root)")

    def handle(self, *args, file: Path, slug: str, name: str, bind: bool, **options) -> None:
        try:
            if bind:
                project = do_bind_project(file, slug=slug, name=name, acting_user="manage.py")
            else:
                project = do_import_project(_read(file), slug=slug, name=name, acting_user="manage.py")
        except (ProjectRefused, PathOutsideRoot) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Registered {project.slug} ({project.name}) at {project.path}, revision 1.")


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {file}: {exc.strerror}") from None
