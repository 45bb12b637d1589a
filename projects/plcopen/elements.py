"""Element ids and the element index: how a client names a part of a project, and how it is found.

Ids are readable paths (`pou/Main/var/Counter`, `config/C0/resource/R0/task/Fast/instance/inst0`) compared
case-insensitively, as IEC identifiers are; `_STEPS` says which keyword leads from an element of one kind to
which children. The `ElementIndex` lists every addressable element of a document once, in document order,
with what searches look at and where the element is (its position from the root, not an lxml proxy: a document
is not edited once loaded, so a position holds); `resolve` walks to one element without it, so reading back an
edit does not pay for a whole index. Pure: no Django, no database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from lxml import etree

from projects.plcopen.grammar import render_type
from projects.plcopen.tc6 import DOCUMENTATION, formatted_text, local_name, q

if TYPE_CHECKING:
    # The document caches its index, so it imports this module; entry_for only names its type.
    from projects.plcopen.documents import ProjectDocument

KINDS: Final = ("pou", "variable", "type", "config", "resource", "task", "instance")


class ElementNotFound(LookupError):
    """No element has this id in the document."""

    def __init__(self, element_id: str) -> None:
        super().__init__(f"no element with id {element_id!r}")
        self.element_id = element_id


@dataclass(slots=True, eq=False)
class Entry:
    """One addressable element: its id as written in the file, kind, name and what searches look at."""

    id: str
    key: str  # the id lowercased: ids compare case-insensitively
    kind: str
    name: str
    root: etree._Element
    steps: tuple[int, ...]  # the element's position among its parent's children, at each level from the root
    scope: str | None
    section: str | None
    type_text: str | None
    haystack: str

    @property
    def element(self) -> etree._Element:
        """The element, found from the root by position. An entry keeps no lxml proxy of its element: the collector
        walks each one on every pass of its oldest generation, and the index of a large project held 50,000."""
        element = self.root
        for step in self.steps:
            element = element[step]
        return element


class ElementIndex:
    """Every addressable element in document order, and a map from lowercased id to entry (first wins)."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.by_id: dict[str, Entry] = {}
        # Entries directly inside a POU, configuration, resource or task, keyed by the lowercased parent id.
        self.by_scope: dict[str, list[Entry]] = {}
        for entry in entries:
            self.by_id.setdefault(entry.key, entry)
            if entry.scope is not None:
                self.by_scope.setdefault(entry.scope.lower(), []).append(entry)

    def children(self, parent_id: str, kind: str) -> list[Entry]:
        return [entry for entry in self.by_scope.get(parent_id.lower(), ()) if entry.kind == kind]

    def get(self, element_id: str) -> Entry:
        entry = self.by_id.get(element_id.strip().lower())
        if entry is None:
            raise ElementNotFound(element_id)
        return entry

    @classmethod
    def build(cls, root: etree._Element) -> ElementIndex:
        # One pass for all documentation: cheaper than looking for it under each of 50,000 variables.
        documentation = {parent: el for el in root.iter(DOCUMENTATION) if (parent := el.getparent()) is not None}
        entries: list[Entry] = []
        _collect(root, "root", "", documentation, entries)
        return cls(entries)


# How ids descend: from an element of one kind, an id step keyword leads to children found by a path.
_STEPS: Final[dict[str, tuple[tuple[str, str, str], ...]]] = {
    "root": (
        ("type", "type", f"{q('types')}/{q('dataTypes')}/{q('dataType')}"),
        ("pou", "pou", f"{q('types')}/{q('pous')}/{q('pou')}"),
        ("config", "config", f"{q('instances')}/{q('configurations')}/{q('configuration')}"),
    ),
    # Every child of an interface that holds variables is a var section (returnType and addData hold none).
    "pou": (("var", "variable", f"{q('interface')}/*/{q('variable')}"),),
    "config": (
        ("var", "variable", f"{q('globalVars')}/{q('variable')}"),
        ("resource", "resource", q("resource")),
    ),
    "resource": (
        ("task", "task", q("task")),
        ("var", "variable", f"{q('globalVars')}/{q('variable')}"),
        ("instance", "instance", q("pouInstance")),
    ),
    "task": (("instance", "instance", q("pouInstance")),),
}
_TYPE: Final = q("type")
_BASE_TYPE: Final = q("baseType")


def make_entry(
    kind: str,
    el: etree._Element,
    element_id: str,
    scope: str | None,
    documentation: dict[etree._Element, etree._Element] | None = None,
    steps: tuple[int, ...] | None = None,
    root: etree._Element | None = None,
) -> Entry:
    """The entry for one element; `documentation` maps elements to their documentation when precollected, `steps`
    is the element's position from the root and `root` the document's root when known."""
    name = el.get("name", "")
    section = None
    if kind == "variable":
        type_text: str | None = render_type(el.find(_TYPE))
        parent = el.getparent()
        section = local_name(parent) if parent is not None else None
    elif kind == "pou":
        type_text = el.get("pouType")
    elif kind == "type":
        type_text = render_type(el.find(_BASE_TYPE))
    elif kind == "instance":
        type_text = el.get("typeName")
    else:
        type_text = None
    doc_el = documentation.get(el) if documentation is not None else el.find(DOCUMENTATION)
    doc_text = (formatted_text(doc_el) or "").strip() if doc_el is not None else ""
    haystack = f"{name}\n{type_text or ''}\n{doc_text}".lower()
    if steps is None:
        steps = steps_to(el)
    if root is None:
        root = el.getroottree().getroot()
    return Entry(element_id, element_id.lower(), kind, name, root, steps, scope, section, type_text, haystack)


def steps_to(el: etree._Element) -> tuple[int, ...]:
    """The element's position among its parent's children at each level from the root (what `Entry.element`
    follows)."""
    steps = []
    parent = el.getparent()
    while parent is not None:
        steps.append(parent.index(el))
        el, parent = parent, parent.getparent()
    return tuple(reversed(steps))


def direct_entries(
    el: etree._Element,
    kind: str,
    element_id: str,
    documentation: dict[etree._Element, etree._Element] | None = None,
    steps: tuple[int, ...] | None = None,
) -> list[Entry]:
    """The entries directly below one element (a POU's variables, a resource's tasks, globals, instances);
    `steps` is the element's position from the root when known."""
    if steps is None:
        steps = steps_to(el)
    root = el.getroottree().getroot()
    # Each parent's children numbered once: a section can hold thousands of variables, and lxml's index() counts.
    positions: dict[etree._Element, dict[etree._Element, int]] = {}
    entries = []
    for keyword, child_kind, child in direct_elements(el, kind):
        name = child.get("name")
        child_id = f"{element_id}/{keyword}/{name}" if element_id else f"{keyword}/{name}"
        below: list[int] = []
        node = child
        while node is not el:
            parent = node.getparent()
            assert parent is not None  # a child found below `el`
            numbered = positions.get(parent)
            if numbered is None:
                numbered = positions[parent] = {sibling: i for i, sibling in enumerate(parent)}
            below.append(numbered[node])
            node = parent
        child_steps = steps + tuple(reversed(below))
        entries.append(make_entry(child_kind, child, child_id, element_id or None, documentation, child_steps, root))
    return entries


def direct_elements(el: etree._Element, kind: str) -> Iterator[tuple[str, str, etree._Element]]:
    """(id keyword, kind, element) of each addressable element directly below one element of `kind`."""
    for keyword, child_kind, path in _STEPS.get(kind, ()):
        for child in el.iterfind(path):
            if child.get("name") is not None:  # schema-invalid without one (iec-checker's pouInstance)
                yield keyword, child_kind, child


def _collect(
    el: etree._Element,
    kind: str,
    element_id: str,
    documentation: dict[etree._Element, etree._Element],
    out: list[Entry],
    steps: tuple[int, ...] = (),
) -> None:
    for entry in direct_entries(el, kind, element_id, documentation, steps):
        out.append(entry)
        if entry.kind in _STEPS:
            _collect(entry.element, entry.kind, entry.id, documentation, out, entry.steps)


def resolve(root: etree._Element, element_id: str) -> tuple[str, etree._Element, str]:
    """Find one element by id without an index: (kind, element, the id with names as written)."""
    parts = element_id.strip().split("/")
    if len(parts) % 2 or not all(parts):
        raise ElementNotFound(element_id)
    kind, el, written = "root", root, ""
    for keyword, name in zip(parts[::2], parts[1::2], strict=True):
        step = next((s for s in _STEPS.get(kind, ()) if s[0] == keyword.lower()), None)
        if step is None:
            raise ElementNotFound(element_id)
        wanted = name.lower()
        found = next((c for c in el.iterfind(step[2]) if (c.get("name") or "").lower() == wanted), None)
        if found is None:
            raise ElementNotFound(element_id)
        kind, el = step[1], found
        written = f"{written}/{step[0]}/{found.get('name')}" if written else f"{step[0]}/{found.get('name')}"
    return kind, el, written


def entry_for(doc: ProjectDocument, element_id: str) -> Entry:
    """The entry for an id (case-insensitive); ElementNotFound if there is none. Uses the index when it
    is built; otherwise walks to the one element, so reading back an edit does not pay for a whole index."""
    if "index" in doc.__dict__:
        return doc.index.get(element_id)
    kind, el, written = resolve(doc.root, element_id)
    scope = written.rsplit("/", 2)[0] if written.count("/") > 1 else None
    return make_entry(kind, el, written, scope)
