"""The operation vocabulary (DESIGN section 7) and its atomic application to a project document.

Operations arrive as JSON objects with an `op` field and are parsed into strict pydantic models (unknown
fields are refused), so the tool schemas published to clients come from the same models. `apply` runs a
batch on a copy of the document: each operation is checked against the part of the model it changes (the
target exists, the name is free in its scope, compared case-insensitively, a referenced POU exists, type
strings parse), edits the tree in place at the position the XSD requires, and the whole result is checked
against the schema at the end. Any refusal raises `OperationRefused` with the operation's index and leaves
the input document untouched. New elements are indented like their neighbours so the file's diff stays
small; elements outside the edited ones are not touched, so graphical bodies, addData and comments survive
byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from lxml import etree
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from projects import iec
from projects.plcopen.documents import ProjectDocument, SchemaError, mark_valid, validate
from projects.plcopen.elements import ElementNotFound, resolve
from projects.plcopen.grammar import TypeStringError, ValueStringError, parse_type, parse_value
from projects.plcopen.tc6 import (
    TEXT_LANGUAGES,
    VAR_SECTIONS,
    XHTML_NS,
    first_element,
    flag,
    local_name,
    q,
    set_code_text,
    xhtml_paragraph,
)

Section = Literal[
    "inputVars", "outputVars", "inOutVars", "localVars", "tempVars", "externalVars", "globalVars", "accessVars"
]
Name = Annotated[str, Field(min_length=1, max_length=128)]
TypeText = Annotated[str, Field(min_length=1, max_length=1000)]
ValueText = Annotated[str, Field(min_length=1, max_length=100_000)]
DocText = Annotated[str, Field(max_length=100_000)]
BodyText = Annotated[str, Field(max_length=1_000_000)]
ElementId = Annotated[str, Field(min_length=1, max_length=1000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class VariableSpec(_Strict):
    """A variable declared with a new POU."""

    section: Section
    name: Name
    type: TypeText
    initial_value: ValueText | None = None
    address: Name | None = None
    documentation: DocText | None = None
    retain: bool = False
    constant: bool = False


class StructMember(_Strict):
    name: Name
    type: TypeText
    initial_value: ValueText | None = None
    documentation: DocText | None = None


class AddVariable(_Strict):
    """Declare a variable in a POU (give `section`) or as a global of a configuration or resource."""

    op: Literal["add_variable"]
    scope: ElementId
    section: Section | None = None
    name: Name
    type: TypeText
    initial_value: ValueText | None = None
    address: Name | None = None
    documentation: DocText | None = None
    retain: bool = False
    constant: bool = False


_UPDATABLE: Final = ("name", "type", "initial_value", "address", "documentation", "retain", "constant")


class UpdateVariable(_Strict):
    """Change exactly one field of a variable; `null` clears initial_value, address or documentation."""

    op: Literal["update_variable"]
    id: ElementId
    name: Name | None = None
    type: TypeText | None = None
    initial_value: ValueText | None = None
    address: Name | None = None
    documentation: DocText | None = None
    retain: bool | None = None
    constant: bool | None = None

    @model_validator(mode="after")
    def _exactly_one_field(self) -> UpdateVariable:
        given = [name for name in _UPDATABLE if name in self.model_fields_set]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(_UPDATABLE)} (got {', '.join(given) or 'none'})")
        if given[0] in ("name", "type", "retain", "constant") and getattr(self, given[0]) is None:
            raise ValueError(f"{given[0]} cannot be null")
        return self

    @property
    def field(self) -> str:
        return next(name for name in _UPDATABLE if name in self.model_fields_set)


class RemoveVariable(_Strict):
    op: Literal["remove_variable"]
    id: ElementId


class AddPou(_Strict):
    """Add a program, function or function block with an ST or IL body."""

    op: Literal["add_pou"]
    name: Name
    pou_type: Literal["program", "function", "functionBlock"]
    language: Literal["ST", "IL"] = "ST"
    body: BodyText = ""
    return_type: TypeText | None = None
    variables: list[VariableSpec] = Field(default_factory=list, max_length=1000)
    documentation: DocText | None = None

    @model_validator(mode="after")
    def _return_type_for_functions_only(self) -> AddPou:
        if self.pou_type == "function" and self.return_type is None:
            raise ValueError("a function needs a return_type")
        if self.pou_type != "function" and self.return_type is not None:
            raise ValueError(f"a {self.pou_type} has no return_type")
        return self


class SetPouBody(_Strict):
    op: Literal["set_pou_body"]
    id: ElementId
    language: Literal["ST", "IL"]
    text: BodyText


class RemovePou(_Strict):
    op: Literal["remove_pou"]
    id: ElementId


class AddDataType(_Strict):
    """A user type: an alias or array/string/subrange type (`base_type`), an enum (`values`) or a struct."""

    op: Literal["add_data_type"]
    name: Name
    base_type: TypeText | None = None
    values: list[Name] | None = Field(default=None, min_length=1, max_length=1000)
    members: list[StructMember] | None = Field(default=None, min_length=1, max_length=1000)
    initial_value: ValueText | None = None
    documentation: DocText | None = None

    @model_validator(mode="after")
    def _exactly_one_shape(self) -> AddDataType:
        shapes = [s for s in ("base_type", "values", "members") if getattr(self, s) is not None]
        if len(shapes) != 1:
            raise ValueError("give exactly one of base_type, values (an enum) or members (a struct)")
        return self


class AddTask(_Strict):
    """A cyclic task (`interval`, an IEC TIME literal like T#20ms) or an event task (`single`, a BOOL)."""

    op: Literal["add_task"]
    resource: ElementId
    name: Name
    priority: int = Field(ge=0, le=65535)
    interval: Name | None = None
    single: Name | None = None

    @model_validator(mode="after")
    def _interval_or_single(self) -> AddTask:
        if (self.interval is None) == (self.single is None):
            raise ValueError("give exactly one of interval (cyclic task) or single (event task)")
        return self


class AddPouInstance(_Strict):
    """Instantiate a program in a resource, or under one of its tasks (`target` is a resource or task id)."""

    op: Literal["add_pou_instance"]
    target: ElementId
    name: Name
    type_name: Name


Operation = Annotated[
    AddVariable
    | UpdateVariable
    | RemoveVariable
    | AddPou
    | SetPouBody
    | RemovePou
    | AddDataType
    | AddTask
    | AddPouInstance,
    Field(discriminator="op"),
]
OPERATION_ADAPTER: Final = TypeAdapter(Operation)


class OperationRefused(Exception):
    """A batch was refused; `index` names the refused operation (None when the input itself is invalid)."""

    def __init__(
        self,
        index: int | None,
        reason: str,
        *,
        op: str | None = None,
        schema_errors: Sequence[SchemaError] = (),
    ) -> None:
        self.index = index
        self.reason = reason
        self.op = op
        self.schema_errors = tuple(schema_errors)
        where = "the batch" if index is None else f"operation {index}" + (f" ({op})" if op else "")
        super().__init__(f"{where} refused: {reason}")


@dataclass(frozen=True)
class ApplyResult:
    doc: ProjectDocument
    changed_ids: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.changed_ids)


class _Refusal(Exception):
    """Raised inside a handler; apply() turns it into OperationRefused with the operation's index."""


def parse_operations(raw: Iterable[Operation | Mapping[str, Any]]) -> list[Operation]:
    """Operation models from JSON-like dicts; the first invalid one is refused with its index."""
    parsed: list[Operation] = []
    for index, item in enumerate(raw):
        if isinstance(item, BaseModel):
            parsed.append(item)
            continue
        try:
            parsed.append(OPERATION_ADAPTER.validate_python(item))
        except ValidationError as exc:
            op = item.get("op") if isinstance(item, Mapping) else None
            raise OperationRefused(index, _pydantic_reason(exc), op=op if isinstance(op, str) else None) from None
    return parsed


def _pydantic_reason(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        # The first location step is the discriminator's value; the operation is named elsewhere.
        loc = ".".join(str(step) for step in error["loc"][1:]) if len(error["loc"]) > 1 else ""
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {message}" if loc else message)
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Names, literals and addresses, by the rules of projects.iec


def _check_identifier(name: str, what: str) -> None:
    if not iec.is_identifier(name):
        raise _Refusal(
            f"{what} {name!r} is not an IEC identifier (letters, digits and single underscores, "
            "not starting with a digit, not ending with _)"
        )
    if iec.is_reserved(name):
        raise _Refusal(f"{what} {name!r} is a reserved word of IEC 61131-3")


def _check_global_name(name: str, what: str) -> None:
    """POU and data type names share one namespace with the standard functions and function blocks."""
    _check_identifier(name, what)
    if iec.is_standard_function(name) or name.upper() in iec.STANDARD_FUNCTION_BLOCKS:
        raise _Refusal(f"{what} {name!r} is the name of a standard function or function block")


def _check_interval(interval: str) -> None:
    problem = iec.check_literal("TIME", interval)
    if problem is not None:
        raise _Refusal(f"interval: {problem}")


def _check_address(address: str) -> None:
    parsed = iec.parse_address(address)
    if isinstance(parsed, str):
        raise _Refusal(parsed)


def _type_element(container: str, type_text: str, what: str) -> etree._Element:
    try:
        content = parse_type(type_text)
    except TypeStringError as exc:
        raise _Refusal(f"{what}: {exc}") from None
    el = etree.Element(q(container))
    el.append(content)
    return el


def _value_element(container: str, value_text: str, what: str) -> etree._Element:
    try:
        content = parse_value(value_text)
    except ValueStringError as exc:
        raise _Refusal(f"{what}: {exc}") from None
    el = etree.Element(q(container))
    el.append(content)
    return el


def _text_element(tag: str, text: str, root: etree._Element) -> etree._Element:
    el = etree.Element(q(tag))
    try:
        el.append(xhtml_paragraph(text, root))
    except ValueError:
        raise _Refusal(f"the {tag} text holds characters XML cannot store (control characters)") from None
    return el


# ---------------------------------------------------------------------------------------------------------
# Tree editing that keeps the XSD's element order and the file's indentation


# Rank of each child in its parent's XSD sequence; var sections share one rank (any order, repeatable).
_ORDER: Final[dict[str, dict[str, int]]] = {
    "pou": {"interface": 0, "actions": 1, "transitions": 2, "body": 3, "addData": 4, "documentation": 5},
    "interface": {"returnType": 0, **dict.fromkeys(VAR_SECTIONS, 1), "addData": 2, "documentation": 3},
    "varList": {"variable": 0, "addData": 1, "documentation": 2},
    "variable": {"type": 0, "initialValue": 1, "addData": 2, "documentation": 3},
    "dataType": {"baseType": 0, "initialValue": 1, "addData": 2, "documentation": 3},
    "body": {**dict.fromkeys(("IL", "ST", "FBD", "LD", "SFC"), 0), "addData": 1, "documentation": 2},
    "configuration": {
        "resource": 0,
        "globalVars": 1,
        "accessVars": 2,
        "configVars": 3,
        "addData": 4,
        "documentation": 5,
    },
    "resource": {"task": 0, "globalVars": 1, "pouInstance": 2, "addData": 3, "documentation": 4},
    "task": {"pouInstance": 0, "addData": 1, "documentation": 2},
    "pous": {"pou": 0},
    "dataTypes": {"dataType": 0},
}


@dataclass(frozen=True)
class _Layout:
    """How the file indents: `unit` per level, or None for a file written without line breaks."""

    unit: str | None

    @classmethod
    def of(cls, root: etree._Element) -> _Layout:
        text = root.text or ""
        return cls(text.rsplit("\n", 1)[1] if "\n" in text else None)


def _indent_before(el: etree._Element) -> str:
    previous = el.getprevious()
    parent = el.getparent()
    space = previous.tail if previous is not None else (parent.text if parent is not None else None)
    return space.rsplit("\n", 1)[1] if space and "\n" in space else ""


def _pretty(el: etree._Element, indent: str, unit: str) -> None:
    """Indent a newly built subtree; text-bearing (XHTML) elements keep their content untouched."""
    children = [child for child in el if isinstance(child.tag, str)]
    xhtml = isinstance(el.tag, str) and el.tag.startswith(f"{{{XHTML_NS}}}")
    if not children or (el.text and el.text.strip()) or xhtml:
        return
    el.text = "\n" + indent + unit
    for position, child in enumerate(children):
        _pretty(child, indent + unit, unit)
        child.tail = "\n" + indent + (unit if position < len(children) - 1 else "")


def _insert(parent: etree._Element, index: int, el: etree._Element, layout: _Layout, *, new: bool = True) -> None:
    """Insert `el` as the index-th child, with the whitespace its neighbours have."""
    if layout.unit is None:
        el.tail = None
        parent.insert(index, el)
        return
    children = list(parent)
    parent_indent = _indent_before(parent)
    child_indent = _indent_before(children[0]) if children else parent_indent + layout.unit
    if new:
        _pretty(el, child_indent, layout.unit)
    separator = "\n" + child_indent
    if not children:
        parent.text = separator
        el.tail = "\n" + parent_indent
        parent.append(el)
    elif index >= len(children):
        el.tail = children[-1].tail
        children[-1].tail = separator
        parent.append(el)
    else:
        el.tail = separator
        parent.insert(index, el)


def _insert_ordered(parent: etree._Element, el: etree._Element, order: str, layout: _Layout) -> None:
    """Insert `el` after the last child whose XSD rank is not after its own."""
    ranks = _ORDER[order]
    rank = ranks[local_name(el)]
    index = 0
    for position, child in enumerate(parent):
        child_rank = ranks.get(local_name(child))
        if child_rank is not None and child_rank <= rank:
            index = position + 1
    _insert(parent, index, el, layout)


def _remove(el: etree._Element) -> None:
    """Remove `el` with its own whitespace, leaving the neighbours' layout as it was."""
    parent = el.getparent()
    assert parent is not None
    previous = el.getprevious()
    if el.getnext() is None:
        if previous is not None:
            previous.tail = el.tail
        else:
            parent.text = None
    parent.remove(el)


def _replace(old: etree._Element, new: etree._Element, layout: _Layout) -> None:
    parent = old.getparent()
    assert parent is not None
    indent = _indent_before(old)
    tail = old.tail
    parent.replace(old, new)
    new.tail = tail
    if layout.unit is not None:
        _pretty(new, indent, layout.unit)


def _set_child(parent: etree._Element, tag: str, new: etree._Element | None, order: str, layout: _Layout) -> None:
    """Replace, add or (new=None) remove the one child named `tag`."""
    old = parent.find(q(tag))
    if old is not None and new is not None:
        _replace(old, new, layout)
    elif old is not None:
        _remove(old)
    elif new is not None:
        _insert_ordered(parent, new, order, layout)


# ---------------------------------------------------------------------------------------------------------
# Scopes and names


def _named(elements: Iterable[etree._Element], name: str) -> etree._Element | None:
    wanted = name.lower()
    return next((el for el in elements if (el.get("name") or "").lower() == wanted), None)


def _resolve(root: etree._Element, element_id: str, kinds: Sequence[str], what: str) -> tuple[str, etree._Element, str]:
    try:
        kind, el, written = resolve(root, element_id)
    except ElementNotFound:
        raise _Refusal(f"no element with id {element_id!r}") from None
    if kind not in kinds:
        raise _Refusal(f"{written} is a {kind}; {what} must be a {' or '.join(kinds)}")
    return kind, el, written


def _pou_scope_names(pou: etree._Element) -> dict[str, str]:
    """Names a new variable of this POU must not take: its variables, actions, transitions and SFC steps
    (and, for a function, the function's own name, which is its result variable)."""
    names: dict[str, str] = {}
    for el in pou.iterfind(f"{q('interface')}/*/{q('variable')}"):
        names.setdefault(el.get("name", "").lower(), f"variable {el.get('name')}")
    for path, what in (
        (f"{q('actions')}/{q('action')}", "action"),
        (f"{q('transitions')}/{q('transition')}", "transition"),
        (f".//{q('step')}", "SFC step"),
    ):
        for el in pou.iterfind(path):
            names.setdefault((el.get("name") or "").lower(), f"{what} {el.get('name')}")
    if pou.get("pouType") == "function":
        names.setdefault(pou.get("name", "").lower(), "the function's result variable")
    return names


def _scope_names(kind: str, scope: etree._Element) -> dict[str, str]:
    if kind == "pou":
        return _pou_scope_names(scope)
    return {
        (el.get("name") or "").lower(): f"variable {el.get('name')}"
        for el in scope.iterfind(f"{q('globalVars')}/{q('variable')}")
    }


_GLOBAL_NAMESPACE: Final = (
    (f"{q('types')}/{q('dataTypes')}/{q('dataType')}", "data type"),
    (f"{q('types')}/{q('pous')}/{q('pou')}", "POU"),
)


def _global_names(root: etree._Element) -> dict[str, str]:
    """POU and data type names share one namespace."""
    names: dict[str, str] = {}
    for path, what in _GLOBAL_NAMESPACE:
        for el in root.iterfind(path):
            names.setdefault((el.get("name") or "").lower(), f"{what} {el.get('name')}")
    return names


def _check_free(name: str, taken: Mapping[str, str], where: str) -> None:
    clash = taken.get(name.lower())
    if clash is not None:
        raise _Refusal(f"{name!r} is already used in {where} by {clash} (names are compared case-insensitively)")


# ---------------------------------------------------------------------------------------------------------
# Variables

_QUALIFIERS: Final = ("retain", "constant", "nonretain", "persistent", "nonpersistent")


def _qualifiers_match(section: etree._Element, retain: bool, constant: bool) -> bool:
    wanted = {"retain": retain, "constant": constant}
    return all(flag(section, name) == wanted.get(name, False) for name in _QUALIFIERS)


def _new_section(tag: str, retain: bool, constant: bool) -> etree._Element:
    section = etree.Element(q(tag))
    if constant:
        section.set("constant", "true")
    if retain:
        section.set("retain", "true")
    return section


def _section_for(
    container: etree._Element, order: str, tag: str, retain: bool, constant: bool, layout: _Layout
) -> etree._Element:
    """The section a new variable joins: the last `tag` section if its qualifiers match, else a new one
    right after it, so the variable still comes last among its kind (the positional parameter order)."""
    same = [child for child in container if local_name(child) == tag]
    if same and _qualifiers_match(same[-1], retain, constant):
        return same[-1]
    section = _new_section(tag, retain, constant)
    if same:
        _insert(container, container.index(same[-1]) + 1, section, layout)
    else:
        _insert_ordered(container, section, order, layout)
    return section


def _variable_element(
    root: etree._Element,
    name: str,
    type_text: str,
    initial_value: str | None,
    address: str | None,
    documentation: str | None,
) -> etree._Element:
    variable = etree.Element(q("variable"))
    variable.set("name", name)
    if address is not None:
        _check_address(address)
        variable.set("address", address)
    variable.append(_type_element("type", type_text, f"type of {name}"))
    if initial_value is not None:
        variable.append(_value_element("initialValue", initial_value, f"initial value of {name}"))
    if documentation:
        variable.append(_text_element("documentation", documentation, root))
    return variable


def _add_variable(root: etree._Element, op: AddVariable, layout: _Layout) -> list[str]:
    kind, scope, scope_id = _resolve(root, op.scope, ("pou", "config", "resource"), "the scope")
    if op.retain and op.constant:
        raise _Refusal("a variable cannot be both CONSTANT and RETAIN")
    if kind == "pou":
        if op.section is None:
            raise _Refusal(f"give the section of the new variable in {scope_id}: one of {', '.join(VAR_SECTIONS)}")
        container = scope.find(q("interface"))
        if container is None:
            container = etree.Element(q("interface"))
            _insert_ordered(scope, container, "pou", layout)
        order = "interface"
    else:
        if op.section not in (None, "globalVars"):
            raise _Refusal(f"a {kind} holds only globalVars, not {op.section}")
        container, order = scope, "configuration" if kind == "config" else "resource"
    _check_identifier(op.name, "variable name")
    _check_free(op.name, _scope_names(kind, scope), scope_id)
    variable = _variable_element(root, op.name, op.type, op.initial_value, op.address, op.documentation)
    section = _section_for(container, order, op.section or "globalVars", op.retain, op.constant, layout)
    _insert_ordered(section, variable, "varList", layout)
    return [f"{scope_id}/var/{op.name}"]


def _set_qualifiers(section: etree._Element, retain: bool, constant: bool) -> None:
    for name, value in (("retain", retain), ("constant", constant)):
        if value:
            section.set(name, "true")
        else:
            section.attrib.pop(name, None)
    if retain:
        section.attrib.pop("nonretain", None)


def _move_to_new_section(variable: etree._Element, retain: bool, constant: bool, layout: _Layout) -> None:
    """Give one variable its own qualifiers. They belong to the section, so the section is split around
    the variable and every variable keeps its position."""
    section = variable.getparent()
    assert section is not None
    siblings = list(section.iterchildren(q("variable")))
    if len(siblings) == 1:
        _set_qualifiers(section, retain, constant)
        return
    container = section.getparent()
    assert container is not None
    position = siblings.index(variable)
    at = container.index(section)
    own = etree.Element(section.tag, dict(section.attrib))
    _set_qualifiers(own, retain, constant)
    if position == 0:
        _insert(container, at, own, layout)
    else:
        _insert(container, at + 1, own, layout)
        followers = siblings[position + 1 :]
        if followers:
            rest = etree.Element(section.tag, dict(section.attrib))
            _insert(container, at + 2, rest, layout)
            for follower in followers:
                _remove(follower)
                _insert(rest, len(rest), follower, layout, new=False)
    _remove(variable)
    _insert(own, 0, variable, layout, new=False)


def _update_variable(root: etree._Element, op: UpdateVariable, layout: _Layout) -> list[str]:
    _, variable, var_id = _resolve(root, op.id, ("variable",), "the id")
    scope_id = var_id.rsplit("/var/", 1)[0]
    field = op.field
    section = variable.getparent()
    assert section is not None
    # The qualifiers live on the section, so compare the whole section to tell whether anything changed.
    before = etree.tostring(section)
    changed = [var_id]
    if field == "name":
        assert op.name is not None
        _check_identifier(op.name, "variable name")
        kind, scope, _ = resolve(root, scope_id)
        taken = {k: v for k, v in _scope_names(kind, scope).items() if k != variable.get("name", "").lower()}
        _check_free(op.name, taken, scope_id)
        variable.set("name", op.name)
        changed.append(f"{scope_id}/var/{op.name}")
    elif field == "type":
        assert op.type is not None
        _set_child(variable, "type", _type_element("type", op.type, "type"), "variable", layout)
    elif field == "initial_value":
        new = _value_element("initialValue", op.initial_value, "initial value") if op.initial_value else None
        _set_child(variable, "initialValue", new, "variable", layout)
    elif field == "address":
        if op.address is None:
            variable.attrib.pop("address", None)
        else:
            _check_address(op.address)
            variable.set("address", op.address)
    elif field == "documentation":
        new = _text_element("documentation", op.documentation, root) if op.documentation else None
        _set_child(variable, "documentation", new, "variable", layout)
    else:
        retain = flag(section, "retain") if field == "constant" else bool(op.retain)
        constant = flag(section, "constant") if field == "retain" else bool(op.constant)
        if retain and constant:
            raise _Refusal("a variable cannot be both CONSTANT and RETAIN; clear the other qualifier first")
        if flag(section, field) != getattr(op, field):
            _move_to_new_section(variable, retain, constant, layout)
    return changed if variable.getparent() is not section or etree.tostring(section) != before else []


def _remove_variable(root: etree._Element, op: RemoveVariable, layout: _Layout) -> list[str]:
    _, variable, var_id = _resolve(root, op.id, ("variable",), "the id")
    section = variable.getparent()
    assert section is not None
    _remove(variable)
    if first_element(section) is None:
        _remove(section)
    return [var_id]


# ---------------------------------------------------------------------------------------------------------
# POUs


def _body_element(language: str, text: str, root: etree._Element) -> etree._Element:
    body = etree.Element(q("body"))
    body.append(_text_element(language, text, root))
    return body


def _interface_element(root: etree._Element, op: AddPou) -> etree._Element | None:
    if op.return_type is None and not op.variables:
        return None
    interface = etree.Element(q("interface"))
    if op.return_type is not None:
        interface.append(_type_element("returnType", op.return_type, "return type"))
    taken: dict[str, str] = {op.name.lower(): "the function's result variable"} if op.pou_type == "function" else {}
    section: etree._Element | None = None
    for spec in op.variables:
        _check_identifier(spec.name, "variable name")
        _check_free(spec.name, taken, f"the interface of {op.name}")
        taken[spec.name.lower()] = f"variable {spec.name}"
        if spec.retain and spec.constant:
            raise _Refusal(f"variable {spec.name} cannot be both CONSTANT and RETAIN")
        # As Beremiz writes it: a new section whenever the kind or the qualifiers change.
        if (
            section is None
            or local_name(section) != spec.section
            or not _qualifiers_match(section, spec.retain, spec.constant)
        ):
            section = _new_section(spec.section, spec.retain, spec.constant)
            interface.append(section)
        section.append(
            _variable_element(root, spec.name, spec.type, spec.initial_value, spec.address, spec.documentation)
        )
    return interface


def _add_pou(root: etree._Element, op: AddPou, layout: _Layout) -> list[str]:
    _check_global_name(op.name, "POU name")
    _check_free(op.name, _global_names(root), "the project's POUs and data types")
    pou = etree.Element(q("pou"))
    pou.set("name", op.name)
    pou.set("pouType", op.pou_type)
    interface = _interface_element(root, op)
    if interface is not None:
        pou.append(interface)
    pou.append(_body_element(op.language, op.body, root))
    if op.documentation:
        pou.append(_text_element("documentation", op.documentation, root))
    pous = root.find(f"{q('types')}/{q('pous')}")
    assert pous is not None  # the input passed the schema, which requires types/pous
    _insert_ordered(pous, pou, "pous", layout)
    return [f"pou/{op.name}"]


def _set_pou_body(root: etree._Element, op: SetPouBody, layout: _Layout) -> list[str]:
    _, pou, pou_id = _resolve(root, op.id, ("pou",), "the id")
    bodies = pou.findall(q("body"))
    if len(bodies) > 1:
        raise _Refusal(f"{pou_id} has {len(bodies)} bodies; set_pou_body edits a POU with one body")
    if not bodies:
        _insert_ordered(pou, _body_element(op.language, op.text, root), "pou", layout)
        return [pou_id]
    body = bodies[0]
    language = first_element(body)
    if language is None or local_name(language) not in TEXT_LANGUAGES:
        current = local_name(language) if language is not None else "no"
        raise _Refusal(f"{pou_id} has a {current} body; set_pou_body replaces only ST or IL bodies")
    before = etree.tostring(body)
    container = first_element(language)
    if container is not None and isinstance(container.tag, str) and container.tag.startswith(f"{{{XHTML_NS}}}"):
        # Keep the file's own XHTML container (xhtml:p or a CODESYS-style <xhtml>) and replace its content.
        set_code_text(container, op.text)
        language.tag = q(op.language)
    else:
        _replace(language, _text_element(op.language, op.text, root), layout)
    return [pou_id] if etree.tostring(body) != before else []


def _remove_pou(root: etree._Element, op: RemovePou, layout: _Layout) -> list[str]:
    _, pou, pou_id = _resolve(root, op.id, ("pou",), "the id")
    _remove(pou)
    return [pou_id]


# ---------------------------------------------------------------------------------------------------------
# Data types, tasks and instances


def _data_type_content(root: etree._Element, op: AddDataType) -> etree._Element:
    if op.base_type is not None:
        content = first_element(_type_element("baseType", op.base_type, "base type"))
        assert content is not None
        if local_name(content) == "derived" and content.get("name", "").lower() == op.name.lower():
            raise _Refusal(f"data type {op.name} cannot be based on itself")
        return content
    if op.values is not None:
        enum = etree.Element(q("enum"))
        values = etree.SubElement(enum, q("values"))
        seen: dict[str, str] = {}
        for value in op.values:
            _check_identifier(value, "enum value")
            _check_free(value, seen, f"enum {op.name}")
            seen[value.lower()] = f"value {value}"
            etree.SubElement(values, q("value"), name=value)
        return enum
    struct = etree.Element(q("struct"))
    seen = {}
    for member in op.members or ():
        _check_identifier(member.name, "member name")
        _check_free(member.name, seen, f"struct {op.name}")
        seen[member.name.lower()] = f"member {member.name}"
        struct.append(
            _variable_element(root, member.name, member.type, member.initial_value, None, member.documentation)
        )
    return struct


def _add_data_type(root: etree._Element, op: AddDataType, layout: _Layout) -> list[str]:
    _check_global_name(op.name, "data type name")
    _check_free(op.name, _global_names(root), "the project's POUs and data types")
    data_type = etree.Element(q("dataType"))
    data_type.set("name", op.name)
    etree.SubElement(data_type, q("baseType")).append(_data_type_content(root, op))
    if op.initial_value is not None:
        data_type.append(_value_element("initialValue", op.initial_value, f"initial value of {op.name}"))
    if op.documentation:
        data_type.append(_text_element("documentation", op.documentation, root))
    data_types = root.find(f"{q('types')}/{q('dataTypes')}")
    assert data_types is not None  # required by the schema the input passed
    _insert_ordered(data_types, data_type, "dataTypes", layout)
    return [f"type/{op.name}"]


def _add_task(root: etree._Element, op: AddTask, layout: _Layout) -> list[str]:
    _, resource, resource_id = _resolve(root, op.resource, ("resource",), "the resource")
    _check_identifier(op.name, "task name")
    taken = {(t.get("name") or "").lower(): f"task {t.get('name')}" for t in resource.iterchildren(q("task"))}
    _check_free(op.name, taken, resource_id)
    task = etree.Element(q("task"))
    task.set("name", op.name)
    task.set("priority", str(op.priority))
    if op.interval is not None:
        _check_interval(op.interval)
        task.set("interval", op.interval)
    else:
        assert op.single is not None
        _check_identifier(op.single, "the single (event) variable")
        task.set("single", op.single)
    _insert_ordered(resource, task, "resource", layout)
    return [f"{resource_id}/task/{op.name}"]


def _add_pou_instance(root: etree._Element, op: AddPouInstance, layout: _Layout) -> list[str]:
    kind, target, target_id = _resolve(root, op.target, ("resource", "task"), "the target")
    _check_identifier(op.name, "instance name")
    resource = target if kind == "resource" else target.getparent()
    assert resource is not None
    taken = {
        (i.get("name") or "").lower(): f"instance {i.get('name')}" for i in resource.iterfind(f".//{q('pouInstance')}")
    }
    _check_free(op.name, taken, "the resource")
    pou = _named(root.iterfind(f"{q('types')}/{q('pous')}/{q('pou')}"), op.type_name)
    if pou is None:
        raise _Refusal(f"no POU named {op.type_name!r} in the project")
    if pou.get("pouType") != "program":
        raise _Refusal(f"{pou.get('name')} is a {pou.get('pouType')}; a resource instantiates programs only")
    instance = etree.Element(q("pouInstance"))
    instance.set("name", op.name)
    instance.set("typeName", pou.get("name", op.type_name))
    _insert_ordered(target, instance, "resource" if kind == "resource" else "task", layout)
    return [f"{target_id}/instance/{op.name}"]


_HANDLERS: Final[dict[type[BaseModel], Callable[[etree._Element, Any, _Layout], list[str]]]] = {
    AddVariable: _add_variable,
    UpdateVariable: _update_variable,
    RemoveVariable: _remove_variable,
    AddPou: _add_pou,
    SetPouBody: _set_pou_body,
    RemovePou: _remove_pou,
    AddDataType: _add_data_type,
    AddTask: _add_task,
    AddPouInstance: _add_pou_instance,
}


# ---------------------------------------------------------------------------------------------------------
# Applying a batch


def _timestamp(now: datetime) -> str:
    # Beremiz writes local time to the second without a zone; an aware `now` is written as UTC.
    if now.tzinfo is not None:
        now = now.astimezone(UTC).replace(tzinfo=None)
    return now.replace(microsecond=0).isoformat()


def _run(doc: ProjectDocument, operations: Sequence[Operation]) -> list[str]:
    root = doc.root
    layout = _Layout.of(root)
    changed: list[str] = []
    for index, operation in enumerate(operations):
        try:
            changed.extend(_HANDLERS[type(operation)](root, operation, layout))
        except (_Refusal, ValueError) as exc:
            # ValueError: lxml refuses text XML cannot hold (control characters) in a name or attribute.
            raise OperationRefused(index, str(exc), op=operation.op) from None
    return list(dict.fromkeys(changed))


def _stamp(doc: ProjectDocument, now: datetime | None) -> None:
    header = doc.root.find(q("contentHeader"))
    if header is not None:
        header.set("modificationDateTime", _timestamp(now or datetime.now(UTC)))


def _first_invalid(doc: ProjectDocument, operations: Sequence[Operation], now: datetime | None) -> int:
    """Replay the batch validating after each step to find the operation that broke the schema."""
    for count in range(1, len(operations) + 1):
        work = doc.copy()
        _run(work, operations[:count])
        _stamp(work, now)
        if validate(work):
            return count - 1
    return len(operations) - 1


def apply(
    doc: ProjectDocument,
    operations: Iterable[Operation | Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> ApplyResult:
    """Apply a batch atomically: a new document and the ids it changed, or OperationRefused (the input
    document is never modified). contentHeader@modificationDateTime is set to `now` only when something
    changed; a batch that changes nothing returns the input document itself."""
    ops = parse_operations(operations)
    if not ops:
        return ApplyResult(doc, ())
    errors = validate(doc)
    if errors:
        first = errors[0]
        raise OperationRefused(
            None,
            f"the project was already invalid against the TC6 2.01 schema before this batch "
            f"({len(errors)} error{'s' if len(errors) != 1 else ''}; first at line {first.line}: {first.message}); "
            "repair the file before changing it",
            schema_errors=errors,
        )
    work = doc.copy()
    changed = _run(work, ops)
    if not changed:
        return ApplyResult(doc, ())
    _stamp(work, now)
    errors = validate(work)
    if errors:
        index = _first_invalid(doc, ops, now)
        raise OperationRefused(
            index,
            f"the result would not be valid against the TC6 2.01 schema (line {errors[0].line}: {errors[0].message})",
            op=ops[index].op,
            schema_errors=errors,
        )
    mark_valid(work)
    return ApplyResult(work, tuple(changed))
