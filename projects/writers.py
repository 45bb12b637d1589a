"""Two writers on one file: the projects of this deployment whose file another running deployment also binds.

Each running server publishes the digests of the project files it binds (`forge_core.instances`, the binding
record in the per-user runtime folder). A project whose file's digest is also in another live deployment's
record has two writers: each server believes it is the only one, so one's accepted change can be overwritten
by the other's. The warning is advisory: a crashed deployment leaves no live record, so it never blocks anyone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from forge_core import instances
from projects.files import PathOutsideRoot
from projects.models import Project
from projects.services import project_path

logger = logging.getLogger("forge.projects")


@dataclass(frozen=True)
class SharedFile:
    project: Project
    deployments: int  # how many other running deployments bind the same file


def _bound() -> list[tuple[Project, Path]]:
    bound = []
    for project in Project.objects.order_by("slug"):
        try:
            bound.append((project, project_path(project)))
        except PathOutsideRoot:
            continue  # a row whose path left the root is refused on every read; it binds nothing here
    return bound


def publish() -> None:
    """Write (or refresh) this server's binding record; a runtime folder that is not private is logged."""
    try:
        instances.publish_binding(settings.FORGE_DATA_DIR, [path for _, path in _bound()])
    except (instances.UnsafeFolder, OSError) as exc:
        logger.warning("cannot publish the project files this server binds (%s); two-writer warnings are off", exc)


def shared_files() -> list[SharedFile]:
    """This deployment's projects that another running deployment of this user also binds."""
    others = instances.other_bindings(settings.FORGE_DATA_DIR)
    if not others:
        return []
    shared = []
    for project, path in _bound():
        digest = instances.file_digest(path)
        count = len({other.data_fingerprint for other in others if digest in other.files})
        if count:
            shared.append(SharedFile(project=project, deployments=count))
    return shared
