"""The read queries of a project document: what it holds, searching it, its variables and one element.

`overview`, `find`, `list_variables` and `get_element` answer with plain JSON-ready dicts built from the
element index (`projects.plcopen.elements`), bounded and continued by cursors (`projects.plcopen.paging`):
a POU comes with its interface (up to INTERFACE_VARIABLE_LIMIT variables inline) and its ST/IL body in
chunks; graphical bodies are named, not rendered. `projects.reads` frames these answers for clients with
the view and revision they describe. Pure: no Django, no database.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from lxml import etree

from projects.plcopen.documents import ProjectDocument
from projects.plcopen.elements import KINDS, Entry, direct_entries, entry_for, make_entry
from projects.plcopen.grammar import render_type, render_value
from projects.plcopen.paging import (
    DEFAULT_BODY_LIMIT,
    DEFAULT_LIMIT,
    MAX_BODY_LIMIT,
    check_limit,
    decode_cursor,
    encode_cursor,
    page,
    position_from,
    query_key,
)
from projects.plcopen.tc6 import (
    TEXT_LANGUAGES,
    VAR_SECTIONS,
    documentation_of,
    first_element,
    flag,
    formatted_text,
    local_name,
    q,
)

# A POU's interface is listed inline up to this many variables; list_variables pages through the rest.
INTERFACE_VARIABLE_LIMIT: Final = 200
LIST_DOCUMENTATION_CHARS: Final = 300
_VARIABLE: Final = q("variable")


def _body_language(pou: etree._Element) -> str | None:
    body = pou.find(q("body"))
    language = first_element(body)
    return local_name(language) if language is not None else None


def overview(doc: ProjectDocument) -> dict[str, Any]:
    """What the project holds: its name and counts by kind, POUs by pouType and body language."""
    root = doc.root
    entries = doc.index.entries
    kinds = Counter(entry.kind for entry in entries)
    pou_types: Counter[str] = Counter()
    languages: Counter[str] = Counter()
    sections: Counter[str] = Counter()
    for entry in entries:
        if entry.kind == "pou":
            pou_types[entry.type_text or "unknown"] += 1
            languages[_body_language(entry.element) or "none"] += 1
        elif entry.kind == "variable" and entry.section:
            sections[entry.section] += 1
    header = root.find(q("contentHeader"))
    file_header = root.find(q("fileHeader"))
    return {
        "name": header.get("name") if header is not None else None,
        "modification_date_time": header.get("modificationDateTime") if header is not None else None,
        "product": file_header.get("productName") if file_header is not None else None,
        "counts": {
            "pous": kinds["pou"],
            "pous_by_type": dict(sorted(pou_types.items())),
            "pous_by_language": dict(sorted(languages.items())),
            "data_types": kinds["type"],
            "configurations": kinds["config"],
            "resources": kinds["resource"],
            "tasks": kinds["task"],
            "instances": kinds["instance"],
            "variables": kinds["variable"],
            "variables_by_section": dict(sorted(sections.items())),
        },
    }


def _summary(entry: Entry) -> dict[str, Any]:
    item: dict[str, Any] = {"id": entry.id, "kind": entry.kind, "name": entry.name}
    if entry.type_text is not None:
        item["type"] = entry.type_text
    if entry.section is not None:
        item["section"] = entry.section
    return item


def find(
    doc: ProjectDocument,
    text: str | None = None,
    kind: str | None = None,
    type: str | None = None,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Elements whose name, type or documentation contains `text` (case-insensitive), optionally of one
    `kind` and with a `type` equal (case-insensitive) to the given one: the declared type of a variable,
    the pouType of a POU, the typeName of an instance, the base type of a data type."""
    check_limit(limit)
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    needle = text.lower() if text else None
    wanted_type = type.strip().lower() if type else None
    key = query_key("find", needle, kind, wanted_type)
    start = position_from(cursor, "find", key)

    def matches(entry: Entry) -> bool:
        if kind is not None and entry.kind != kind:
            return False
        if wanted_type is not None and (entry.type_text or "").lower() != wanted_type:
            return False
        return needle is None or needle in entry.haystack

    found, next_cursor = page(doc.index.entries, matches, start, limit, "find", key)
    return {"items": [_summary(entry) for entry in found], "next_cursor": next_cursor}


def _variable_dict(entry: Entry, documentation_chars: int | None = None) -> dict[str, Any]:
    variable = entry.element
    section = variable.getparent()
    documentation = documentation_of(variable) or None
    item: dict[str, Any] = {
        "id": entry.id,
        "kind": "variable",
        "name": entry.name,
        "scope": entry.scope,
        "section": entry.section,
        "type": entry.type_text,
        "initial_value": render_value(variable.find(q("initialValue"))),
        "address": variable.get("address"),
        "documentation": documentation,
        "retain": flag(section, "retain"),
        "constant": flag(section, "constant"),
    }
    if documentation_chars is not None and documentation and len(documentation) > documentation_chars:
        item["documentation"] = documentation[:documentation_chars]
        item["documentation_truncated"] = True
    return item


def list_variables(
    doc: ProjectDocument,
    scope: str | None = None,
    section: str | None = None,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Variables declared directly in `scope` (a POU, configuration or resource id; all when None),
    optionally of one section kind (`inputVars`, `localVars`, ...)."""
    check_limit(limit)
    index = doc.index
    candidates = index.entries
    scope_key = None
    if scope is not None:
        scope_entry = index.get(scope)
        if scope_entry.kind not in ("pou", "config", "resource"):
            raise ValueError(f"{scope_entry.id} is a {scope_entry.kind}; a scope is a POU, configuration or resource")
        scope_key = scope_entry.id.lower()
        candidates = index.by_scope.get(scope_key, [])
    section_name = None
    if section is not None:
        by_lower = {name.lower(): name for name in VAR_SECTIONS}
        section_name = by_lower.get(section.lower())
        if section_name is None:
            raise ValueError(f"unknown section {section!r}; use one of {', '.join(VAR_SECTIONS)}")
    key = query_key("vars", scope_key, section_name)
    start = position_from(cursor, "vars", key)

    def matches(entry: Entry) -> bool:
        return entry.kind == "variable" and (section_name is None or entry.section == section_name)

    found, next_cursor = page(candidates, matches, start, limit, "vars", key)
    return {
        "items": [_variable_dict(entry, LIST_DOCUMENTATION_CHARS) for entry in found],
        "next_cursor": next_cursor,
    }


def _body_dict(
    body: etree._Element, element_id: str, offset: int, limit: int, *, paginate: bool = True
) -> dict[str, Any]:
    language_el = first_element(body)
    language = local_name(language_el) if language_el is not None else None
    if language not in TEXT_LANGUAGES:
        objects = sum(1 for child in language_el if isinstance(child.tag, str)) if language_el is not None else 0
        return {
            "language": language,
            "rendered": False,
            "objects": objects,
            "note": f"{language} is a graphical language; its body is kept as is but not rendered as text",
        }
    text = formatted_text(language_el) or ""
    result: dict[str, Any] = {"language": language, "rendered": True, "total_chars": len(text)}
    if not paginate:
        return result
    chunk = text[offset : offset + limit]
    end = offset + len(chunk)
    result.update({"offset": offset, "text": chunk, "truncated": end < len(text)})
    result["next_offset"] = end if end < len(text) else None
    result["next_cursor"] = (
        encode_cursor({"k": "body", "id": element_id.lower(), "o": end}) if end < len(text) else None
    )
    return result


def _interface_dict(pou_entry: Entry) -> dict[str, Any]:
    pou = pou_entry.element
    interface = pou.find(q("interface"))
    sections: list[dict[str, Any]] = []
    total = 0
    listed = 0
    at = (*pou_entry.steps, pou.index(interface)) if interface is not None else ()
    for section_at, section in enumerate(interface if interface is not None else ()):
        name = local_name(section)
        if name not in VAR_SECTIONS:
            continue
        variables = []
        for variable_at, variable in enumerate(section):
            if variable.tag != _VARIABLE:
                continue
            total += 1
            var_name = variable.get("name")
            if var_name is None or listed >= INTERFACE_VARIABLE_LIMIT:
                continue
            listed += 1
            steps = (*at, section_at, variable_at)
            entry = make_entry("variable", variable, f"{pou_entry.id}/var/{var_name}", pou_entry.id, steps=steps)
            item = _variable_dict(entry, LIST_DOCUMENTATION_CHARS)
            for key in ("kind", "scope", "section", "retain", "constant"):
                del item[key]
            variables.append(item)
        sections.append(
            {
                "section": name,
                "retain": flag(section, "retain"),
                "constant": flag(section, "constant"),
                "variables": variables,
            }
        )
    return_type = render_type(interface.find(q("returnType"))) if interface is not None else ""
    result: dict[str, Any] = {"return_type": return_type or None, "sections": sections, "variable_count": total}
    if listed < total:
        result["variables_truncated"] = True
        result["note"] = f"{listed} of {total} variables listed; page through the rest with list_variables"
    return result


def _pou_dict(entry: Entry, body_offset: int, body_limit: int) -> dict[str, Any]:
    pou = entry.element
    bodies = list(pou.iterchildren(q("body")))
    result: dict[str, Any] = {
        "id": entry.id,
        "kind": "pou",
        "name": entry.name,
        "pou_type": pou.get("pouType"),
        "documentation": documentation_of(pou) or None,
        "interface": _interface_dict(entry),
        "actions": [a.get("name") for a in pou.iterfind(f"{q('actions')}/{q('action')}")],
        "transitions": [t.get("name") for t in pou.iterfind(f"{q('transitions')}/{q('transition')}")],
        "body": _body_dict(bodies[0], entry.id, body_offset, body_limit) if bodies else None,
    }
    if len(bodies) > 1:
        result["other_bodies"] = [_body_dict(b, entry.id, 0, 0, paginate=False) for b in bodies[1:]]
    return result


def _instance_dict(entry: Entry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "kind": "instance",
        "name": entry.name,
        "type_name": entry.element.get("typeName"),
        "task": entry.scope if "/task/" in (entry.scope or "") else None,
        "documentation": documentation_of(entry.element) or None,
    }


def _task_dict(entry: Entry) -> dict[str, Any]:
    task = entry.element
    return {
        "id": entry.id,
        "kind": "task",
        "name": entry.name,
        "priority": task.get("priority"),
        "interval": task.get("interval"),
        "single": task.get("single"),
        "instances": [_instance_dict(e) for e in direct_entries(task, "task", entry.id, steps=entry.steps)],
        "documentation": documentation_of(task) or None,
    }


_TYPE_KINDS: Final = {
    "array": "array",
    "enum": "enum",
    "struct": "struct",
    "pointer": "pointer",
    "subrangeSigned": "subrange",
    "subrangeUnsigned": "subrange",
}


def _type_dict(entry: Entry) -> dict[str, Any]:
    base = first_element(entry.element.find(q("baseType")))
    base_kind = local_name(base) if base is not None else None
    result: dict[str, Any] = {
        "id": entry.id,
        "kind": "type",
        "name": entry.name,
        "type_kind": _TYPE_KINDS.get(base_kind or "", "alias"),
        "type": entry.type_text,
        "initial_value": render_value(entry.element.find(q("initialValue"))),
        "documentation": documentation_of(entry.element) or None,
    }
    if base_kind == "struct":
        assert base is not None
        result["members"] = [
            {
                "name": v.get("name"),
                "type": render_type(v.find(q("type"))),
                "initial_value": render_value(v.find(q("initialValue"))),
                "documentation": documentation_of(v) or None,
            }
            for v in base.iterchildren(q("variable"))
        ]
    if base_kind == "enum":
        assert base is not None
        result["values"] = [
            {"name": v.get("name"), "value": v.get("value")} for v in base.iterfind(f"{q('values')}/{q('value')}")
        ]
    return result


def get_element(
    doc: ProjectDocument,
    element_id: str,
    body_offset: int = 0,
    body_limit: int = DEFAULT_BODY_LIMIT,
    cursor: str | None = None,
) -> dict[str, Any]:
    """One element by id. A POU comes with its interface and its body: ST/IL text from `body_offset`, at
    most `body_limit` characters, with `next_cursor` (or `next_offset`) to continue; graphical bodies are
    named, not rendered. A `cursor` from a previous call continues the body where it stopped."""
    check_limit(body_limit, MAX_BODY_LIMIT)
    if cursor is not None:
        payload = decode_cursor(cursor, "body")
        if payload.get("id") != element_id.strip().lower():
            raise ValueError("the cursor belongs to another element; ask again without it")
        body_offset = payload.get("o", 0)
    if isinstance(body_offset, bool) or not isinstance(body_offset, int) or body_offset < 0:
        raise ValueError("body_offset must be a non-negative integer")
    entry = entry_for(doc, element_id)
    if entry.kind == "pou":
        return _pou_dict(entry, body_offset, body_limit)
    if entry.kind == "variable":
        return _variable_dict(entry)
    if entry.kind == "task":
        return _task_dict(entry)
    if entry.kind == "instance":
        return _instance_dict(entry)
    if entry.kind == "type":
        return _type_dict(entry)
    below = direct_entries(entry.element, entry.kind, entry.id, steps=entry.steps)
    result: dict[str, Any] = {"id": entry.id, "kind": entry.kind, "name": entry.name}
    if entry.kind == "resource":
        result["tasks"] = [_summary(e) for e in below if e.kind == "task"]
        result["instances"] = [_instance_dict(e) for e in below if e.kind == "instance"]
    else:
        result["resources"] = [_summary(e) for e in below if e.kind == "resource"]
    result["global_variable_count"] = sum(1 for e in below if e.kind == "variable")
    result["documentation"] = documentation_of(entry.element) or None
    return result
