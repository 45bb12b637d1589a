"""Reading a registered project for clients: one function per read, each naming its view and revision.

These are what the MCP read tools call. Every response says which view it shows (`accepted` until the
working draft exists), which project, and the accepted revision, so a client can tell whether two
answers describe the same state. Limits and cursors are those of `projects.plcopen`.
"""

from __future__ import annotations

from typing import Any

from projects import findings, placement, plcopen
from projects.models import Project
from projects.services import Opened, current_document

EXPORT_CHUNK = 32_000


def _framed(opened: Opened, content: dict[str, Any]) -> dict[str, Any]:
    return {
        "view": "accepted",
        "project": opened.project.slug,
        "accepted_revision": opened.project.accepted_revision,
        **content,
    }


def overview(project: Project) -> dict[str, Any]:
    opened = current_document(project)
    return _framed(opened, plcopen.overview(opened.document))


def find(project: Project, **query: Any) -> dict[str, Any]:
    opened = current_document(project)
    return _framed(opened, plcopen.find(opened.document, **query))


def get_element(project: Project, element_id: str, **options: Any) -> dict[str, Any]:
    opened = current_document(project)
    return _framed(opened, plcopen.get_element(opened.document, element_id, **options))


def list_variables(project: Project, **query: Any) -> dict[str, Any]:
    opened = current_document(project)
    return _framed(opened, plcopen.list_variables(opened.document, **query))


def check(project: Project, *, limit: int, offset: int) -> dict[str, Any]:
    """Schema errors and findings of the accepted project, problems first."""
    opened = current_document(project)
    found = [f.to_dict() for f in findings.check(opened.document.root)]
    found += [
        {"code": "schema_invalid", "severity": "problem", "element_id": "", "message": f"line {e.line}: {e.message}"}
        for e in plcopen.validate(opened.document)
    ]
    found.sort(key=lambda f: (f["severity"] != "problem", f["element_id"], f["code"]))
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
    return _framed(opened, content)


def export(project: Project, *, offset: int, limit: int = EXPORT_CHUNK) -> dict[str, Any]:
    """The project's XML, in chunks: an unbounded answer would spend a client's whole context."""
    opened = current_document(project)
    text = plcopen.serialize(opened.document).decode(opened.document.encoding)
    content: dict[str, Any] = {"length": len(text), "offset": offset, "xml": text[offset : offset + limit]}
    if offset + limit < len(text):
        content["next_offset"] = offset + limit
    return _framed(opened, content)


def suggest_placement(project: Project, topic: str, *, limit: int) -> dict[str, Any]:
    opened = current_document(project)
    return _framed(opened, placement.suggest_placement(opened.document, topic, limit))
