"""The project reads as pure functions of a parsed document, by name: what the server runs in process and
what a read process (`projects.read_process`) runs for it.

`projects.reads` opens a view of a project and frames the answer; the answer's content is one of these,
looked up in READS by the read's name, so the same name means the same computation on either side of the
process boundary. No Django, no database, no files: a read process imports this and nothing of the server.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from projects import findings, placement
from projects.plcopen import documents, queries

EXPORT_CHUNK = 32_000


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


def export_page(document: documents.ProjectDocument, *, offset: int, limit: int = EXPORT_CHUNK) -> dict[str, Any]:
    """One chunk of a document's XML (what `export` frames)."""
    text = _text(document)
    content: dict[str, Any] = {"length": len(text), "offset": offset, "xml": text[offset : offset + limit]}
    if offset + limit < len(text):
        content["next_offset"] = offset + limit
    return content


READS: dict[str, Callable[..., dict[str, Any]]] = {
    "overview": queries.overview,
    "find": queries.find,
    "get_element": queries.get_element,
    "list_variables": queries.list_variables,
    "check": check_page,
    "export": export_page,
    "suggest_placement": placement.suggest_placement,
}
