"""Reading a registered project for clients: one function per read, each naming its view and revision.

These are what the MCP read tools call. Every response says which view it shows (`accepted` until the
working draft exists), which project, and the accepted revision, so a client can tell whether two
answers describe the same state. Limits and cursors are those of `projects.plcopen`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from projects import drafts, findings, placement
from projects.models import Project
from projects.plcopen import documents, queries
from projects.services import current_document

EXPORT_CHUNK = 32_000
ACCEPTED = "accepted"
WORKING_DRAFT = "working_draft"


@dataclass(frozen=True)
class Viewed:
    """A project's document in one view, and the frame every answer about it carries."""

    document: documents.ProjectDocument
    frame: dict[str, Any]


def _opened(project: Project, view: str) -> Viewed:
    if view == WORKING_DRAFT:
        materialized = drafts.current(project)
        draft = materialized.draft
        frame = {
            "view": WORKING_DRAFT,
            "project": project.slug,
            "accepted_revision": draft.base_revision,
            "working_revision": draft.working_revision,
        }
        return Viewed(materialized.document, frame)
    opened = current_document(project)
    frame = {"view": "accepted", "project": opened.project.slug, "accepted_revision": opened.project.accepted_revision}
    return Viewed(opened.document, frame)


def _framed(opened: Viewed, content: dict[str, Any]) -> dict[str, Any]:
    return {**opened.frame, **content}


def overview(project: Project, view: str = ACCEPTED) -> dict[str, Any]:
    opened = _opened(project, view)
    return _framed(opened, queries.overview(opened.document))


def find(project: Project, view: str = ACCEPTED, **query: Any) -> dict[str, Any]:
    opened = _opened(project, view)
    return _framed(opened, queries.find(opened.document, **query))


def get_element(project: Project, element_id: str, view: str = ACCEPTED, **options: Any) -> dict[str, Any]:
    opened = _opened(project, view)
    return _framed(opened, queries.get_element(opened.document, element_id, **options))


def list_variables(project: Project, view: str = ACCEPTED, **query: Any) -> dict[str, Any]:
    opened = _opened(project, view)
    return _framed(opened, queries.list_variables(opened.document, **query))


def check(project: Project, *, limit: int, offset: int, view: str = ACCEPTED) -> dict[str, Any]:
    """Schema errors and findings of the accepted project, problems first."""
    opened = _opened(project, view)
    return _framed(opened, check_page(opened.document, limit=limit, offset=offset))


def check_page(document: documents.ProjectDocument, *, limit: int, offset: int) -> dict[str, Any]:
    """One page of a document's findings with the counts of all of them (what `check` frames)."""
    found = findings.document_findings(document)
    page = found[offset : offset + limit]
    content: dict[str, Any] = {
        "counts": {
            "problem": sum(f["severity"] == "problem" for f in found),
            "advisory": sum(f["severity"] == "advisory" for f in found),
        },
        "findings": page,
    }
    if offset + limit < len(found):
        content["next_offset"] = offset + limit
    return content


# Each parsed document's text, made once: a client reads a large project in many chunks, and serializing
# it whole for each one cost 0.1 s a chunk on a 50,000-variable project. The documents a view opens are
# the process's cached ones, which nothing modifies, and their text goes with them.
_texts: weakref.WeakKeyDictionary[documents.ProjectDocument, str] = weakref.WeakKeyDictionary()


def _text(document: documents.ProjectDocument) -> str:
    text = _texts.get(document)
    if text is None:
        text = _texts[document] = documents.serialize(document).decode(document.encoding)
    return text


def export(project: Project, *, offset: int, limit: int = EXPORT_CHUNK, view: str = ACCEPTED) -> dict[str, Any]:
    """The project's XML, in chunks: an unbounded answer would spend a client's whole context."""
    opened = _opened(project, view)
    return _framed(opened, export_page(opened.document, offset=offset, limit=limit))


def export_page(document: documents.ProjectDocument, *, offset: int, limit: int = EXPORT_CHUNK) -> dict[str, Any]:
    """One chunk of a document's XML (what `export` frames)."""
    text = _text(document)
    content: dict[str, Any] = {"length": len(text), "offset": offset, "xml": text[offset : offset + limit]}
    if offset + limit < len(text):
        content["next_offset"] = offset + limit
    return content


def suggest_placement(project: Project, topic: str, *, limit: int, view: str = ACCEPTED) -> dict[str, Any]:
    opened = _opened(project, view)
    return _framed(opened, placement.suggest_placement(opened.document, topic, limit))
