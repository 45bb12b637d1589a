"""Reading a registered project for clients: one function per read, each naming its view and revision.

These are what the MCP read tools call. Every response says which view it shows (`accepted` until the
working draft exists), which project, and the accepted revision, so a client can tell whether two
answers describe the same state. Limits and cursors are those of `projects.plcopen`.

The content of an answer is a pure function of the document (`projects.document_reads`). In the accepted
view, when `runmcp` has started read processes (`projects.read_pool`), the server only fingerprints the
file (`services.read_file`) and a read process parses it and computes the content, so a check of a large project
does not hold the server's GIL. The working draft's reads run in process: the draft's document is the one
its stage calls edit here, and sending it would cost a serialization as long as most reads.
"""

from __future__ import annotations

from typing import Any

from projects import drafts, read_pool, services
from projects.document_reads import EXPORT_CHUNK, READS
from projects.models import Project
from projects.plcopen import documents
from projects.plcopen.elements import ElementNotFound

ACCEPTED = "accepted"
WORKING_DRAFT = "working_draft"


def _read(project: Project, view: str, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Read `name` of the project in `view`, framed with the view and revisions it describes."""
    if view == WORKING_DRAFT:
        materialized = drafts.current(project)
        draft = materialized.draft
        frame = {
            "view": WORKING_DRAFT,
            "project": project.slug,
            "accepted_revision": draft.base_revision,
            "working_revision": draft.working_revision,
        }
        return {**frame, **READS[name](materialized.document, *args, **kwargs)}
    pool = read_pool.running()
    if pool is None:
        opened = services.current_document(project)
        project, content = opened.project, READS[name](opened.document, *args, **kwargs)
    else:
        project, content = _read_in_pool(pool, project, name, *args, **kwargs)
    return {"view": ACCEPTED, "project": project.slug, "accepted_revision": project.accepted_revision, **content}


def _read_in_pool(
    pool: read_pool.ReadPool, project: Project, name: str, *args: Any, **kwargs: Any
) -> tuple[Project, dict[str, Any]]:
    """The accepted project and the read's content, computed in a read process (in the order `current_document`
    keeps: a file that does not parse is refused unrecorded; one that does is recorded whatever the read says)."""
    return services.with_file(project, lambda file: _run_in_pool(pool, project, file, name, *args, **kwargs))


def _run_in_pool(
    pool: read_pool.ReadPool, project: Project, file: services.ProjectFile, name: str, *args: Any, **kwargs: Any
) -> tuple[Project, dict[str, Any]]:
    try:
        content = pool.run(file.fingerprint, lambda: file.data, name, *args, **kwargs)
    except documents.ProjectFormatError as exc:
        raise services.not_a_project(project, exc) from None
    except read_pool.ReadProcessLost as exc:
        raise services.ProjectUnavailable(f"{exc}; ask again") from None
    except (ElementNotFound, ValueError):
        services.accepted(project, file.fingerprint)
        raise
    return services.accepted(project, file.fingerprint), content


def overview(project: Project, view: str = ACCEPTED) -> dict[str, Any]:
    return _read(project, view, "overview")


def find(project: Project, view: str = ACCEPTED, **query: Any) -> dict[str, Any]:
    return _read(project, view, "find", **query)


def get_element(project: Project, element_id: str, view: str = ACCEPTED, **options: Any) -> dict[str, Any]:
    return _read(project, view, "get_element", element_id, **options)


def list_variables(project: Project, view: str = ACCEPTED, **query: Any) -> dict[str, Any]:
    return _read(project, view, "list_variables", **query)


def check(project: Project, *, limit: int, offset: int, view: str = ACCEPTED) -> dict[str, Any]:
    """Schema errors and findings of the accepted project, problems first."""
    return _read(project, view, "check", limit=limit, offset=offset)


def export(project: Project, *, offset: int, limit: int = EXPORT_CHUNK, view: str = ACCEPTED) -> dict[str, Any]:
    """The project's XML, in chunks: an unbounded answer would spend a client's whole context."""
    return _read(project, view, "export", offset=offset, limit=limit)


def suggest_placement(project: Project, topic: str, *, limit: int, view: str = ACCEPTED) -> dict[str, Any]:
    return _read(project, view, "suggest_placement", topic, limit)
