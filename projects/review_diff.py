"""A change to a project as a PLC engineer reads it (issue 17): POU by POU, the ST or IL body as a line diff
with line numbers and the variable table as a table diff, computed from the two documents.

`change_view(before, after)` answers a JSON-ready dict, bounded for a screen. The draft review
(`console.acceptance.review`) computes it from the accepted document and the draft's; a direct write's
preview (`projects.preview.preview_change`) carries it, so the confirmation's seal covers it and the
confirmation page shows what the approval binds, never a reading of the live file. `own_content_differs`
says whether an element changed apart from the addressable elements inside it (a POU's body, not its
variables), which `projects.drafts.describe` lists. Pure: no Django, no database.
"""

from __future__ import annotations

import difflib
from typing import Any, Final

from lxml import etree

from projects import findings, st
from projects.plcopen.documents import ProjectDocument
from projects.plcopen.elements import ElementIndex, Entry, direct_elements
from projects.plcopen.grammar import render_type, render_value
from projects.plcopen.tc6 import TEXT_LANGUAGES, documentation_of, first_element, flag, formatted_text, local_name, q

# Elements that hold a variable table: each is one unit of the view (a POU also has a body).
UNIT_KINDS: Final = ("pou", "config", "resource")
# The other elements a change can add, remove or change; listed by id only.
OTHER_KINDS: Final = ("type", "task", "instance")
# Elements with addressable elements inside them (`projects.plcopen.elements._STEPS`).
CONTAINER_KINDS: Final = ("pou", "config", "resource", "task")

CONTEXT_LINES: Final = 3
BODY_ROWS_MAX: Final = 400  # lines of one body's diff
VARIABLE_ROWS_MAX: Final = 200  # rows of one variable table's diff
TOTAL_ROWS_MAX: Final = 2000  # lines and rows of the whole view; units past it are named only
OTHERS_MAX: Final = 200
CELL_CHARS_MAX: Final = 200

# A variable's fields as its table shows them, in column order.
VARIABLE_FIELDS: Final = ("section", "type", "initial_value", "address", "retain", "constant", "documentation")
FIELD_TITLES: Final = {
    "section": "Section",
    "type": "Type",
    "initial_value": "Initial value",
    "address": "Address",
    "retain": "RETAIN",
    "constant": "CONSTANT",
    "documentation": "Documentation",
    "pou_type": "POU type",
    "return_type": "Return type",
}


# --- what an element holds of its own ------------------------------------------------------------------


def own_content_differs(old: Entry, new: Entry) -> bool:
    """Whether an element differs apart from the addressable elements inside it (and the line breaks
    and indentation around them): a POU whose body changed does, one that only gained a variable does not."""
    if _xml(old.element) == _xml(new.element):
        return False
    if old.kind not in CONTAINER_KINDS:
        return True
    return _own_content(old.element, old.kind) != _own_content(new.element, new.kind)


def _xml(element: etree._Element) -> bytes:
    return etree.tostring(element, with_tail=False)  # the tail is the whitespace after it, not its own


def _own_content(element: etree._Element, kind: str, *, without_body: bool = False) -> list[Any]:
    """What an element holds apart from the addressable elements inside it (and its body, if asked), as a
    comparable outline: a container those leave empty (a var section, an interface) drops out with them,
    and whitespace between elements is not kept (adding an element re-indents its neighbours)."""
    inner = {child for _, _, child in direct_elements(element, kind)}
    if without_body:
        inner.update(element.iterchildren(q("body")))
    holding = set()  # the elements between `element` and the inner ones
    for el in inner:
        parent = el.getparent()
        while parent is not None and parent is not element and parent not in holding:
            holding.add(parent)
            parent = parent.getparent()
    return _outline(element, inner, holding)


def _outline(el: etree._Element, inner: set[etree._Element], holding: set[etree._Element]) -> list[Any]:
    parts: list[Any] = [el.tag, sorted(el.attrib.items()), (el.text or "").strip()]
    for child in el:
        if child in inner:
            continue
        if child in holding:
            held = _outline(child, inner, holding)
            if len(held) == 3 and not held[2]:
                continue  # it held only inner elements
            parts.append(held)
        else:
            parts.append(_xml(child))
        parts.append((child.tail or "").strip())
    return parts


# --- the view ------------------------------------------------------------------------------------------


class _Budget:
    """Lines and rows left for the whole view."""

    def __init__(self) -> None:
        self.left = TOTAL_ROWS_MAX

    def take(self, rows: int) -> None:
        self.left -= rows


def change_view(before: ProjectDocument, after: ProjectDocument) -> dict[str, Any]:
    """What turns `before` into `after`: one unit per POU, configuration or resource that was added,
    removed or changed (its facts, its body's line diff, its variable table's diff), then the data types,
    tasks and instances added, removed or changed, by id. Bounded: `truncated` says something was cut."""
    if before is after:  # a draft that changes nothing materializes as the accepted document itself
        return {"units": [], "others": [], "truncated": False}
    old_index, new_index = before.index, after.index
    budget = _Budget()
    units: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    truncated = False
    keys = [e.key for e in new_index.entries] + [e.key for e in old_index.entries if e.key not in new_index.by_id]
    for key in keys:
        old, new = old_index.by_id.get(key), new_index.by_id.get(key)
        entry = new or old
        if entry is None or entry.kind not in UNIT_KINDS + OTHER_KINDS:
            continue
        if old is not None and new is not None:
            if old.kind != new.kind or _xml(old.element) == _xml(new.element):
                continue
            if entry.kind in OTHER_KINDS and not own_content_differs(old, new):
                continue  # a task whose instance changed: the instance is listed
            status = "changed"
        else:
            status = "added" if old is None else "removed"
        if entry.kind in OTHER_KINDS:
            if len(others) < OTHERS_MAX:
                others.append({"id": entry.id, "kind": entry.kind, "status": status})
            else:
                truncated = True
            continue
        unit = _unit(entry, status, old, new, old_index, new_index, budget)
        if unit is not None:
            truncated = truncated or unit["truncated"]
            units.append(unit)
    _mark_findings(after, units)
    return {"units": units, "others": others, "truncated": truncated}


def _mark_findings(after: ProjectDocument, units: list[dict[str, Any]]) -> None:
    """Put each finding about a line of a shown ST body on that line's row (`marks`), from one findings
    check of the POUs shown."""
    shown = {
        unit["name"]: unit["body"]
        for unit in units
        if unit["kind"] == "pou" and unit["status"] != "removed" and unit["body"] and unit["body"]["language"] == "ST"
    }
    if not shown:
        return
    by_line: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for finding in findings.check(after.root, pous=shown):
        if finding.body == "body" and finding.line and finding.element_id.startswith("pou/"):
            mark = {
                "code": finding.code,
                "severity": finding.severity,
                "column": finding.column,
                "message": finding.message,
            }
            by_line.setdefault((finding.element_id[4:].casefold(), finding.line), []).append(mark)
    for name, body in shown.items():
        for row in body["rows"]:
            marks = by_line.get((name.casefold(), row["new"])) if row["new"] is not None else None
            if marks:
                row["marks"] = marks


def _unit(
    entry: Entry,
    status: str,
    old: Entry | None,
    new: Entry | None,
    before: ElementIndex,
    after: ElementIndex,
    budget: _Budget,
) -> dict[str, Any] | None:
    """One POU, configuration or resource: None when nothing this view shows of it changed (only a task
    inside a resource, say, which is listed on its own)."""
    facts = _fact_changes(old, new)
    body = _body_change(old, new) if entry.kind == "pou" else None
    variables = _variable_rows(
        before.children(old.id, "variable") if old is not None else [],
        after.children(new.id, "variable") if new is not None else [],
    )
    # Something of its own that neither its facts nor its body show (actions, transitions, addData).
    other_content = (
        old is not None
        and new is not None
        and not facts
        and _own_content(old.element, old.kind, without_body=True)
        != _own_content(new.element, new.kind, without_body=True)
    )
    if status == "changed" and not (facts or body or variables or other_content):
        return None
    unit: dict[str, Any] = {
        "id": entry.id,
        "kind": entry.kind,
        "name": entry.name,
        "pou_type": entry.element.get("pouType") if entry.kind == "pou" else None,
        "status": status,
        "facts": facts,
        "body": body,
        "variables": {"columns": [FIELD_TITLES[f] for f in VARIABLE_FIELDS], "rows": variables, "cut": 0},
        "other_content": other_content,
        "truncated": False,
    }
    if body is not None:
        body["cut"] = _cut(body["rows"], BODY_ROWS_MAX, budget)
        unit["truncated"] = bool(body["cut"])
    unit["variables"]["cut"] = _cut(variables, VARIABLE_ROWS_MAX, budget)
    unit["truncated"] = unit["truncated"] or bool(unit["variables"]["cut"])
    return unit


def _cut(rows: list[dict[str, Any]], most: int, budget: _Budget) -> int:
    """Keep what fits of `rows` (in place) and take it from the budget; how many were cut."""
    shown = min(len(rows), most, max(budget.left, 0))
    cut = len(rows) - shown
    del rows[shown:]
    budget.take(shown)
    return cut


def _fact_changes(old: Entry | None, new: Entry | None) -> list[dict[str, Any]]:
    """The facts of a changed unit that differ (a POU's type, return type, documentation)."""
    if old is None or new is None:
        return []
    was, now = _facts(old), _facts(new)
    return [
        {"field": FIELD_TITLES[name], "before": was[name], "after": now[name]} for name in was if was[name] != now[name]
    ]


def _facts(entry: Entry) -> dict[str, Any]:
    if entry.kind != "pou":
        return {"documentation": _cell(documentation_of(entry.element) or None)}
    interface = entry.element.find(q("interface"))
    return {
        "pou_type": entry.element.get("pouType"),
        "return_type": (render_type(interface.find(q("returnType"))) or None) if interface is not None else None,
        "documentation": _cell(documentation_of(entry.element) or None),
    }


# --- bodies ---------------------------------------------------------------------------------------------


def _body_of(entry: Entry | None) -> tuple[str | None, str | None]:
    """(language, text) of a POU's first body; text None for a graphical one, both None without a body."""
    if entry is None:
        return None, None
    body = entry.element.find(q("body"))
    language_el = first_element(body)
    if language_el is None:
        return None, None
    language = local_name(language_el)
    if language not in TEXT_LANGUAGES:
        return language, None
    return language, formatted_text(language_el) or ""


def _body_change(old: Entry | None, new: Entry | None) -> dict[str, Any] | None:
    """The line diff of a POU's body (ST, IL), or what changed of a graphical one; None when it is the same."""
    was_language, was = _body_of(old)
    language, now = _body_of(new)
    if old is not None and new is not None:
        old_body, new_body = old.element.find(q("body")), new.element.find(q("body"))
        same = (old_body is None and new_body is None) or (
            old_body is not None and new_body is not None and _xml(old_body) == _xml(new_body)
        )
        if same:
            return None
    shown_language = language or was_language
    rendered = (was is not None or was_language is None) and (now is not None or language is None)
    change: dict[str, Any] = {
        "language": shown_language,
        "before_language": was_language,
        "rendered": rendered,
        "rows": [],
        "cut": 0,
    }
    if rendered:
        change["rows"] = line_diff((was or "").splitlines(), (now or "").splitlines())
        if not change["rows"] and was_language == language:
            return None  # the same text, written differently (CDATA or not): nothing a reader would see
        _highlight_rows(change["rows"], was if was_language == "ST" else None, now if language == "ST" else None)
    return change


def _highlight_rows(rows: list[dict[str, Any]], was: str | None, now: str | None) -> None:
    """Give each row of an ST body its highlighted runs (`spans`: [class, text] pairs that join to the
    row's text; the template escapes them), from the grammar's highlight query over the whole body."""
    old_lines = st.highlight(was) if was else []
    new_lines = st.highlight(now) if now else []
    for row in rows:
        if row["kind"] == "hunk":
            continue
        side, number = (old_lines, row["old"]) if row["kind"] == "removed" else (new_lines, row["new"])
        if number is None or number > len(side):
            continue
        runs = [[css, text] for css, text in side[number - 1]]
        if runs and runs[-1][1].endswith("\r"):
            runs[-1][1] = runs[-1][1][:-1]  # a CRLF body: splitlines() took the CR off the row's text
        if "".join(text for _, text in runs) == row["text"]:
            row["spans"] = [run for run in runs if run[1]]


def line_diff(before: list[str], after: list[str]) -> list[dict[str, Any]]:
    """A unified line diff with both line numbers: hunks of changed lines with CONTEXT_LINES around them,
    each opened by a `hunk` row; every row {"kind", "old", "new", "text"} (a number None where the line is
    not on that side)."""
    rows: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(None, before, after)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        first, last = group[0], group[-1]
        rows.append(
            {
                "kind": "hunk",
                "old": None,
                "new": None,
                "text": f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@",
            }
        )
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows.extend(
                    {"kind": "same", "old": i + 1, "new": j + 1, "text": before[i]}
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                )
                continue
            rows.extend({"kind": "removed", "old": i + 1, "new": None, "text": before[i]} for i in range(i1, i2))
            rows.extend({"kind": "added", "old": None, "new": j + 1, "text": after[j]} for j in range(j1, j2))
    return rows


def _range(start: int, end: int) -> str:
    length = end - start
    return f"{start + 1 if length else start},{length}"


# --- variable tables ------------------------------------------------------------------------------------


def _variable(entry: Entry) -> dict[str, Any]:
    variable = entry.element
    section = variable.getparent()
    return {
        "section": entry.section,
        "type": entry.type_text,
        "initial_value": render_value(variable.find(q("initialValue"))),
        "address": variable.get("address"),
        "retain": "yes" if flag(section, "retain") else "",
        "constant": "yes" if flag(section, "constant") else "",
        "documentation": _cell(documentation_of(variable) or None),
    }


def _same_variable(old: Entry, new: Entry) -> bool:
    """The same declaration in a section of the same kind and qualifiers."""
    old_section, new_section = old.element.getparent(), new.element.getparent()
    return (
        old.section == new.section
        and (old_section is None or new_section is None or old_section.attrib == new_section.attrib)
        and _xml(old.element) == _xml(new.element)
    )


def _cell(text: str | None) -> str | None:
    if text is None or len(text) <= CELL_CHARS_MAX:
        return text
    return text[: CELL_CHARS_MAX - 1] + "…"


def _variable_rows(old: list[Entry], new: list[Entry]) -> list[dict[str, Any]]:
    """The table diff of one variable table: a row per variable added, removed or changed (in the order
    of the new table, removed ones where they stood), each cell {"before", "after", "changed"}."""
    was = {entry.name.lower(): entry for entry in old}
    now = {entry.name.lower(): entry for entry in new}
    order = [entry.name.lower() for entry in new] + [
        entry.name.lower() for entry in old if entry.name.lower() not in now
    ]
    rows = []
    for key in order:
        old_entry, new_entry = was.get(key), now.get(key)
        if old_entry is not None and new_entry is not None and _same_variable(old_entry, new_entry):
            continue  # most of a large table: compared as XML, not field by field
        before = _variable(old_entry) if old_entry is not None else None
        after = _variable(new_entry) if new_entry is not None else None
        if before == after:
            continue
        status = "added" if before is None else "removed" if after is None else "changed"
        cells = [
            {
                "before": before[field] if before is not None else None,
                "after": after[field] if after is not None else None,
                "changed": status == "changed" and before[field] != after[field],  # type: ignore[index]
            }
            for field in VARIABLE_FIELDS
        ]
        rows.append({"name": (now.get(key) or was[key]).name, "status": status, "cells": cells})
    return rows
