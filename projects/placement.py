"""Where does something about a topic belong? Ranking the POUs and variable scopes of a project.

A client about to add a variable or logic for, say, "conveyor speed" should put it where related things
already live. Each POU, configuration and resource is scored by how often the topic's words appear in
its own name and documentation (weighted most), and in the names, types and documentation of the
variables it declares. POUs come with the path from the configuration that runs them (the task or
resource instances whose type is that POU), so the client sees where the code executes.
"""

from __future__ import annotations

import re
from typing import Any

from projects.plcopen.documents import ProjectDocument
from projects.plcopen.elements import Entry
from projects.plcopen.paging import check_limit

SCOPE_KINDS = ("pou", "config", "resource")
OWN_WEIGHT = 3
CHILD_WEIGHT = 1
CHILD_CAP = 10  # a scope with hundreds of variables must not win on volume alone
_WORD = re.compile(r"[A-Za-z][a-z]*|[A-Z]+(?![a-z])|\d+")


def words(text: str) -> set[str]:
    """Lowercased words of a topic or identifier; camelCase and snake_case are split, short words dropped."""
    return {w.lower() for w in _WORD.findall(text) if len(w) > 2}


def suggest_placement(doc: ProjectDocument, topic: str, limit: int = 10) -> dict[str, Any]:
    check_limit(limit)
    wanted = words(topic)
    if not wanted:
        raise ValueError("the topic has no word of three letters or more; describe what you want to place")
    index = doc.index
    ranked = []
    for entry in index.entries:
        if entry.kind not in SCOPE_KINDS:
            continue
        own = _hits(entry, wanted)
        related = sorted(
            (
                child
                for child in index.by_scope.get(entry.id.lower(), ())
                if child.kind == "variable" and _hits(child, wanted)
            ),
            key=lambda child: child.id.lower(),
        )
        score = OWN_WEIGHT * own + CHILD_WEIGHT * min(len(related), CHILD_CAP)
        if score:
            ranked.append((score, entry, related))
    ranked.sort(key=lambda item: (-item[0], item[1].id.lower()))
    return {
        "topic": topic,
        "words": sorted(wanted),
        "suggestions": [_suggestion(doc, score, entry, related) for score, entry, related in ranked[:limit]],
    }


def _hits(entry: Entry, wanted: set[str]) -> int:
    return len(wanted & (words(entry.name) | set(entry.haystack.split()) | words(entry.haystack)))


def _suggestion(doc: ProjectDocument, score: int, entry: Entry, related: list[Entry]) -> dict[str, Any]:
    suggestion: dict[str, Any] = {
        "id": entry.id,
        "kind": entry.kind,
        "name": entry.name,
        "score": score,
        "related_variables": [child.id for child in related[:CHILD_CAP]],
    }
    if entry.kind == "pou":
        suggestion["pou_type"] = entry.type_text
        suggestion["runs_in"] = [
            instance.id
            for instance in doc.index.entries
            if instance.kind == "instance" and (instance.type_text or "").lower() == entry.name.lower()
        ]
    return suggestion
