"""Findings over a PLCopen TC6 2.01 project: the problems and advisories DESIGN section 7 lists, computed
from the parsed XML tree alone (no Django, no database), each with a stable code, a severity, the
element id of what it is about and a message a person can act on.

`check(root)` walks the document (with XPath only for a few searches of the whole of it) and reports, in a
deterministic order (element id, then code): invalid or reserved identifiers, duplicate names in a scope,
unknown types, initial values that are not valid for their type, malformed or duplicate located addresses,
programs no task or resource runs, and from each ST text's parse tree (`projects.st`): syntax errors,
vendor-dialect statements, identifiers used but not declared, unused local variables of ST POUs, calls of
what is neither a function nor a function block instance, and assignments to constants and inputs. A
finding from ST code carries the text it is in (`body`) and its line and column there.
Schema validity is the caller's business: it validates against the XSD and adds `schema_invalid`
findings itself (`Finding.of("schema_invalid", ...)`); this module only assumes the elements it reads
are where the schema puts them, and skips what is missing rather than failing.

Scopes and the choices behind them:
* Names are compared case-insensitively. POU and data type names share one project-wide scope, which
  also holds the standard function and function block names. A POU's variables (all sections), its
  actions and transitions, and for a function its result share one scope; configuration globals,
  resource globals, tasks and POU instances (task-bound and resource-level together) each have theirs.
* Located addresses clash when they are identical after normalisation (`%I0.0` is `%IX0.0`);
  overlapping sizes (`%MW0` and `%MX0.0`) are not compared. Declarations at configuration level
  (configuration and resource globals, VAR_CONFIG) in different configurations never clash, as each
  configuration is its own PLC; a POU's located variable is not tied to one configuration, so it is
  compared with every other declaration in the project.
* Globals are visible to every POU for the undeclared-identifier check: IEC asks for VAR_EXTERNAL,
  many tools do not, and a false "undeclared" would cost more than the missed warning.
* `unused_variable` only looks at POUs whose every body (actions and transitions included) is ST, since
  graphical and IL bodies are not read; identifiers inside pragmas count as uses, because Beremiz C
  pragmas reach variables through GetFbVar/SetFbVar.
* Beremiz writes STRING initial values without quotes and adds them when generating code; an unquoted
  value is checked as the quoted literal Beremiz would produce.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lxml import etree

from projects import iec, st
from projects.plcopen import documents
from projects.plcopen.tc6 import (
    ELEMENTARY_TYPE_ELEMENTS,
    NS,
    VAR_SECTIONS,
    first_element,
    formatted_text,
    local_name,
    q,
)

_X = {"p": NS}

PROBLEM = "problem"
ADVISORY = "advisory"
SEVERITIES: MappingProxyType[str, str] = MappingProxyType(
    {
        "invalid_identifier": PROBLEM,
        "reserved_identifier": PROBLEM,
        "duplicate_name": PROBLEM,
        "unknown_type": PROBLEM,
        "bad_initial_value": PROBLEM,
        "bad_address": PROBLEM,
        "duplicate_address": PROBLEM,
        "undeclared_identifier": PROBLEM,
        "schema_invalid": PROBLEM,
        "st_syntax": PROBLEM,
        "unknown_function": PROBLEM,
        "assignment_to_constant": PROBLEM,
        "assignment_to_input": ADVISORY,
        "st_dialect": ADVISORY,
        "unused_variable": ADVISORY,
        "program_not_instantiated": ADVISORY,
    }
)

# Function blocks and types of the runtimes whose projects we edit, which their files use through
# <derived> without defining them: matiec's additional FBs, Beremiz's runtime library (py_ext, logging)
# and SVGHMI's HMI types. Pass known_types=() to check against IEC alone.
LIBRARY_TYPES = frozenset(
    [
        *("RTC", "INTEGRAL", "DERIVATIVE", "PID", "RAMP", "HYSTERESIS"),
        *("LOGGER", "LOGLEVEL", "python_eval", "python_poll", "python_gear"),
        *("HMI_NODE", "HMI_BOOL", "HMI_INT", "HMI_REAL", "HMI_STRING"),
    ]
)

_LOCAL_SECTIONS = ("localVars", "tempVars")
_POU_KINDS = {"function": "function", "functionBlock": "function block", "program": "program"}
# Which elementary types fit each address size, as Beremiz maps them (plcopen LOCATIONDATATYPES).
_SIZE_TYPES = {
    "X": ("BOOL",),
    "B": ("SINT", "USINT", "BYTE", "STRING"),
    "W": ("INT", "UINT", "WORD", "WSTRING"),
    "D": ("DINT", "UDINT", "REAL", "DWORD"),
    "L": ("LINT", "ULINT", "LREAL", "LWORD"),
}
_TYPE_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*#")
_ENUM_VALUES = f"{q('values')}/{q('value')}"
_ADD_DATA = q("addData")


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding: `code` is stable (see SEVERITIES), `severity` is "problem" or "advisory"."""

    code: str
    severity: str
    element_id: str
    message: str
    # Where in a POU's ST a finding from the code is: `body` names the text ("body", "action/Fill", ...),
    # `line` and `column` count from 1 within it; 0 and "" for findings about declarations.
    line: int = 0
    column: int = 0
    excerpt: str = ""
    body: str = ""

    @classmethod
    def of(
        cls,
        code: str,
        element_id: str,
        message: str,
        *,
        line: int = 0,
        column: int = 0,
        excerpt: str = "",
        body: str = "",
    ) -> Finding:
        return cls(code, SEVERITIES[code], element_id, message, line, column, excerpt, body)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity,
            "element_id": self.element_id,
            "message": self.message,
        }
        if self.line:
            found.update(body=self.body, line=self.line, column=self.column)
        if self.excerpt:
            found["excerpt"] = self.excerpt
        return found


@dataclass(frozen=True, slots=True)
class _Located:
    address: str
    element_id: str
    configuration: str | None  # casefolded configuration name, None for a POU's own declaration


@dataclass
class _Project:
    """What the checks look names up in, built once per document (keys are casefolded)."""

    data_types: dict[str, etree._Element]
    pous: dict[str, etree._Element]
    library_types: frozenset[str]
    enum_values: frozenset[str]
    global_names: frozenset[str]
    global_constants: frozenset[str]
    findings: list[Finding] = field(default_factory=list)
    located: list[_Located] = field(default_factory=list)

    def report(self, code: str, element_id: str, message: str) -> None:
        self.findings.append(Finding.of(code, element_id, message))

    def type_problem(self, name: str) -> str | None:
        key = name.casefold()
        if (
            key in self.data_types
            or key in self.library_types
            or name.upper() in iec.STANDARD_FUNCTION_BLOCKS
            or iec.elementary_type(name) is not None
        ):
            return None
        pou = self.pous.get(key)
        if pou is None:
            return f"'{name}' is neither a data type nor a function block of this project, nor a standard or library function block"
        if pou.get("pouType") == "functionBlock":
            return None
        return f"'{name}' is a {_POU_KINDS.get(pou.get('pouType', ''), 'POU')}, which cannot be used as a type"


def check(
    root: etree._Element, *, known_types: Iterable[str] = LIBRARY_TYPES, pous: Collection[str] | None = None
) -> list[Finding]:
    """All findings for the TC6 2.01 project `root`, sorted by element id then code. `known_types` names
    library types and function blocks the project may use without defining them. `pous` (names) limits
    the POU checks, the costly part, to those POUs: every finding they make is about an element inside the
    POU, so a caller that only wants findings about some POUs loses nothing. Schema validity is not checked
    here: the caller validates against the XSD and reports `schema_invalid` itself."""
    if root.tag != q("project"):
        raise ValueError("not a PLCopen TC6 2.01 project element")
    project = _index(root, known_types)
    _check_global_names(root, project)
    for data_type in _xpath(root, "p:types/p:dataTypes/p:dataType"):
        _check_data_type(data_type, project)
    wanted = None if pous is None else {name.casefold() for name in pous}
    for pou in _xpath(root, "p:types/p:pous/p:pou"):
        if wanted is None or _name(pou).casefold() in wanted:
            _check_pou(pou, project)
    configurations = _xpath(root, "p:instances/p:configurations/p:configuration")
    for configuration in configurations:
        _check_configuration(configuration, project)
    _check_unique(
        project, ((_name(c), f"config/{_name(c)}", "configuration") for c in configurations), "in this project"
    )
    _check_duplicate_addresses(project)
    _check_instantiation(root, project)
    unique = set(project.findings)
    return sorted(
        unique, key=lambda f: (f.element_id.casefold(), f.code, f.body, f.line, f.column, f.element_id, f.message)
    )


# ---------------------------------------------------------------------------------------------------------
# Reading the tree
# ---------------------------------------------------------------------------------------------------------


def document_findings(
    document: documents.ProjectDocument, *, pous: Collection[str] | None = None
) -> list[dict[str, str]]:
    """Every finding of a document (of its POU checks, only those of `pous` when given) and its schema
    errors, as dicts, problems first."""
    found = [f.to_dict() for f in check(document.root, pous=pous)]
    found += [
        {"code": "schema_invalid", "severity": "problem", "element_id": "", "message": f"line {e.line}: {e.message}"}
        for e in documents.validate(document)
    ]
    found.sort(key=lambda f: (f["severity"] != "problem", f["element_id"], f["code"]))
    return found


def _xpath(element: etree._Element, path: str) -> list[Any]:
    """Elements or attribute strings, as the path selects. Only for the few searches of a whole document: lxml
    lets go of the GIL twice on every XPath call (to take its evaluator's lock, then to evaluate), and each time
    wakes a thread waiting for it, which, finding it taken again, starts its wait over; the checks of each POU
    and variable walk the tree instead."""
    return element.xpath(path, namespaces=_X)


def _names(elements: Iterable[etree._Element]) -> list[str]:
    """The name of each element that has one: what an XPath path ending in `/@name` selects."""
    return [name for element in elements if (name := element.get("name")) is not None]


def _enum_value_names(enum: etree._Element) -> list[str]:
    """`p:values/p:value/@name` of an enum."""
    return _names(enum.iterfind(_ENUM_VALUES))


def _parts(pou: etree._Element, part: str) -> Iterator[etree._Element]:
    """A POU's actions or transitions (`part`): `p:actions/p:action`, `p:transitions/p:transition`."""
    return pou.iterfind(f"{q(part + 's')}/{q(part)}")


def _name(element: etree._Element) -> str:
    return element.get("name", "")


def _sections(interface: etree._Element | None) -> Iterator[tuple[str, etree._Element]]:
    """(section name, variable) for each variable of a POU interface, in document order."""
    if interface is None:
        return
    for section in interface:
        if isinstance(section.tag, str) and local_name(section) in VAR_SECTIONS:
            for variable in section.iterchildren(q("variable")):
                yield local_name(section), variable


def _index(root: etree._Element, known_types: Iterable[str]) -> _Project:
    data_types: dict[str, etree._Element] = {}
    for data_type in _xpath(root, "p:types/p:dataTypes/p:dataType"):
        data_types.setdefault(_name(data_type).casefold(), data_type)
    pous: dict[str, etree._Element] = {}
    every_pou = _xpath(root, "p:types/p:pous/p:pou")
    for pou in every_pou:
        pous.setdefault(_name(pou).casefold(), pou)
    # The values of every enum under types, found POU by POU rather than in one search: lxml keeps the GIL
    # while it turns an XPath call's results into Python objects, which took 30 ms on a 50,000-variable project
    # while every other request of the process waited; and walked rather than searched in each POU (_xpath).
    enum_value = "//p:enum/p:values/p:value/@name"
    enum_values = [
        *_xpath(root, f"p:types/*[not(self::p:pous)]{enum_value} | p:types/p:pous/*[not(self::p:pou)]{enum_value}"),
        *(value for pou in every_pou for enum in pou.iterdescendants(q("enum")) for value in _enum_value_names(enum)),
    ]
    globals_ = _xpath(root, "p:instances/p:configurations/p:configuration//p:globalVars/p:variable/@name")
    constants = _xpath(
        root,
        "p:instances/p:configurations/p:configuration//p:globalVars[@constant='true' or @constant='1']/p:variable/@name",
    )
    return _Project(
        data_types=data_types,
        pous=pous,
        library_types=frozenset(name.casefold() for name in known_types),
        enum_values=frozenset(str(v).casefold() for v in enum_values),
        global_names=frozenset(str(v).casefold() for v in globals_),
        global_constants=frozenset(str(v).casefold() for v in constants),
    )


# ---------------------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------------------


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _check_identifier(project: _Project, name: str, element_id: str, what: str) -> None:
    """`what` completes "cannot name ...": "a variable", "a member of data type 'Motor'"."""
    if not iec.is_identifier(name):
        project.report(
            "invalid_identifier",
            element_id,
            f"'{name}' is not a valid IEC identifier and cannot name {what}: use letters, digits and single "
            "underscores, starting with a letter or underscore and not ending with an underscore.",
        )
    elif iec.is_reserved(name):
        project.report(
            "reserved_identifier",
            element_id,
            f"'{name}' is a reserved word of IEC 61131-3 and cannot name {what}; choose another name.",
        )


def _check_unique(project: _Project, entries: Iterable[tuple[str, str, str]], scope: str) -> None:
    """Report each (name, element id, what) whose name an earlier entry already uses."""
    seen: dict[str, tuple[str, str]] = {}
    for name, element_id, what in entries:
        if not name:
            continue
        earlier = seen.get(name.casefold())
        if earlier is None:
            seen[name.casefold()] = (name, what)
            continue
        project.report(
            "duplicate_name",
            element_id,
            f"{_capital(what)} '{name}' has the same name as {earlier[1]} '{earlier[0]}' {scope}; "
            "IEC names are case-insensitive.",
        )


def _check_global_names(root: etree._Element, project: _Project) -> None:
    entries: list[tuple[str, str, str]] = []
    for data_type in _xpath(root, "p:types/p:dataTypes/p:dataType"):
        entries.append((_name(data_type), f"type/{_name(data_type)}", "data type"))
    for pou in _xpath(root, "p:types/p:pous/p:pou"):
        entries.append((_name(pou), f"pou/{_name(pou)}", _POU_KINDS.get(pou.get("pouType", ""), "POU")))
    _check_unique(project, entries, "in this project")
    for name, element_id, what in entries:
        upper = name.upper()
        if upper in iec.STANDARD_FUNCTION_BLOCKS or upper in iec.STANDARD_FUNCTIONS:
            kind = "function block" if upper in iec.STANDARD_FUNCTION_BLOCKS else "function"
            project.report(
                "duplicate_name",
                element_id,
                f"{_capital(what)} '{name}' has the name of the standard {kind} {upper}; choose another name.",
            )


# ---------------------------------------------------------------------------------------------------------
# Types and values
# ---------------------------------------------------------------------------------------------------------


def _check_type_refs(project: _Project, type_element: etree._Element | None, element_id: str, subject: str) -> None:
    if type_element is None:
        return
    for derived in type_element.iter(q("derived")):
        problem = project.type_problem(_name(derived))
        if problem:
            project.report("unknown_type", element_id, f"The type of {subject} is unknown: {problem}.")


def _elementary_name(
    project: _Project, content: etree._Element | None, seen: frozenset[str] = frozenset()
) -> str | None:
    """The elementary type a type element denotes, following aliases (`TYPE Speed : INT`)."""
    if content is None:
        return None
    kind = local_name(content)
    if kind in ELEMENTARY_TYPE_ELEMENTS:
        return kind.upper()
    if kind == "derived":
        key = _name(content).casefold()
        data_type = project.data_types.get(key)
        if data_type is not None and key not in seen:
            return _elementary_name(project, first_element(data_type.find(q("baseType"))), seen | {key})
    return None


def _as_string_literal(text: str, *, wide: bool) -> str:
    quote = '"' if wide else "'"
    if text.startswith(quote) or re.match(r"(?i)w?string#", text):
        return text
    return quote + text + quote


def _value_problem(
    project: _Project,
    content: etree._Element | None,
    value: etree._Element | None,
    *,
    type_name: str | None = None,
    seen: frozenset[str] = frozenset(),
) -> str | None:
    """Why `value` (a simpleValue, arrayValue or structValue) does not fit the type element `content`,
    or None. Types this module cannot see into (function blocks, unknown names, pointers) pass."""
    if content is None or value is None:
        return None
    kind, value_kind = local_name(content), local_name(value)
    if kind in ELEMENTARY_TYPE_ELEMENTS:
        type_label = kind.upper()
        if value_kind != "simpleValue":
            return f"a {type_label} takes a single value, not a list or a structure."
        text = value.get("value", "")
        if kind in ("string", "wstring"):
            length = content.get("length", "").strip()
            declared = int(length) if length.isdigit() else None
            return iec.check_literal(kind, _as_string_literal(text.strip(), wide=kind == "wstring"), declared)
        return iec.check_literal(kind, text)
    if kind == "derived":
        key = _name(content).casefold()
        data_type = project.data_types.get(key)
        if data_type is None or key in seen:
            return None
        base = first_element(data_type.find(q("baseType")))
        return _value_problem(project, base, value, type_name=_name(data_type), seen=seen | {key})
    if kind == "enum":
        return _enum_value_problem(content, value, type_name)
    if kind in ("subrangeSigned", "subrangeUnsigned"):
        return _subrange_value_problem(project, content, value)
    if kind == "array":
        return _array_value_problem(project, content, value)
    if kind == "struct":
        return _struct_value_problem(project, content, value)
    return None


def _enum_value_problem(content: etree._Element, value: etree._Element, type_name: str | None) -> str | None:
    if local_name(value) != "simpleValue":
        return "an enumeration takes a single value name."
    names = _enum_value_names(content)
    text = value.get("value", "").strip()
    prefix, _, member = text.rpartition("#")
    if prefix and type_name and prefix.casefold() != type_name.casefold():
        return f"'{text}' names the enumeration {prefix}, but the type is {type_name}."
    if member.casefold() not in {n.casefold() for n in names}:
        return f"'{member}' is not a value of the enumeration; use one of {', '.join(names)}."
    return None


def _subrange_value_problem(project: _Project, content: etree._Element, value: etree._Element) -> str | None:
    base = _elementary_name(project, first_element(content.find(q("baseType"))))
    if base is None or iec.elementary_type(base) is None or local_name(value) != "simpleValue":
        return None
    text = value.get("value", "").strip()
    problem = iec.check_literal(base, text)
    if problem:
        return problem
    number = iec.parse_integer_literal(_TYPE_PREFIX.sub("", text, count=1))
    bounds = content.find(q("range"))
    if number is None or bounds is None:
        return None
    lower = iec.parse_integer_literal(bounds.get("lower", "").strip())
    upper = iec.parse_integer_literal(bounds.get("upper", "").strip())
    if lower is not None and upper is not None and not lower <= number <= upper:
        return f"'{text}' is outside the subrange {lower}..{upper}."
    return None


def _array_value_problem(project: _Project, content: etree._Element, value: etree._Element) -> str | None:
    # A simpleValue for an array is some tools' text form ("[1, 2]"); only arrayValue is read.
    if local_name(value) != "arrayValue":
        return None
    base = first_element(content.find(q("baseType")))
    total = 0
    for position, item in enumerate(value.iterchildren(q("value")), start=1):
        repetitions = item.get("repetitionValue", "1").strip()
        count = iec.parse_integer_literal(repetitions)
        if count is None or count < 0:
            return f"element {position} has the repetition count '{repetitions}', which is not a whole number."
        total += count
        problem = _value_problem(project, base, first_element(item))
        if problem:
            return f"element {position}: {problem}"
    capacity = _array_capacity(content)
    if capacity is not None and total > capacity:
        return f"it lists {total} values for an array of {capacity} elements."
    return None


def _array_capacity(content: etree._Element) -> int | None:
    sizes = []
    for dimension in content.iterchildren(q("dimension")):
        lower = iec.parse_integer_literal(dimension.get("lower", "").strip())
        upper = iec.parse_integer_literal(dimension.get("upper", "").strip())
        if lower is None or upper is None:
            return None
        sizes.append(max(upper - lower + 1, 0))
    return math.prod(sizes) if sizes else None


def _struct_value_problem(project: _Project, content: etree._Element, value: etree._Element) -> str | None:
    if local_name(value) != "structValue":
        return None
    members = {_name(v).casefold(): v for v in content.iterchildren(q("variable"))}
    for item in value.iterchildren(q("value")):
        member_name = item.get("member", "")
        member = members.get(member_name.casefold())
        if member is None:
            return f"'{member_name}' is not a member of the structure."
        problem = _value_problem(project, first_element(member.find(q("type"))), first_element(item))
        if problem:
            return f"member {member_name}: {problem}"
    return None


def _check_initial_value(project: _Project, variable: etree._Element, element_id: str, subject: str) -> None:
    initial = variable.find(q("initialValue"))
    if initial is None:
        return
    problem = _value_problem(project, first_element(variable.find(q("type"))), first_element(initial))
    if problem:
        project.report("bad_initial_value", element_id, f"The initial value of {subject} is not valid: {problem}")


def _check_address(
    project: _Project,
    variable: etree._Element,
    element_id: str,
    subject: str,
    *,
    configuration: str | None,
    compare: bool = True,
) -> None:
    text = variable.get("address")
    if text is None:
        return
    parsed = iec.parse_address(text)
    if isinstance(parsed, str):
        project.report("bad_address", element_id, f"The address of {subject} is malformed: {parsed}.")
        return
    elementary = _elementary_name(project, first_element(variable.find(q("type"))))
    if parsed.size and elementary and elementary not in _SIZE_TYPES[parsed.size]:
        bits = iec.ADDRESS_SIZES[parsed.size]
        project.report(
            "bad_address",
            element_id,
            f"{_capital(subject)} is a {elementary} located at {text}, a {bits}-bit location for "
            f"{', '.join(_SIZE_TYPES[parsed.size])}; use an address whose size fits the type.",
        )
    if compare and not parsed.incomplete:
        canonical = str(iec.Address(parsed.area, parsed.size or "X", parsed.path))
        project.located.append(_Located(canonical, element_id, configuration))


def _check_duplicate_addresses(project: _Project) -> None:
    by_address: dict[str, list[_Located]] = {}
    for entry in project.located:
        earlier = by_address.setdefault(entry.address, [])
        clash = next(
            (
                other
                for other in earlier
                if not (other.configuration and entry.configuration and other.configuration != entry.configuration)
            ),
            None,
        )
        if clash is not None:
            project.report(
                "duplicate_address",
                entry.element_id,
                f"The address {entry.address} is already declared by {clash.element_id}; two variables at one "
                "location overwrite each other.",
            )
        earlier.append(entry)


def _check_variable(
    project: _Project,
    variable: etree._Element,
    element_id: str,
    subject: str,
    *,
    configuration: str | None,
    name_allowed: bool = False,
) -> None:
    if not name_allowed:
        _check_identifier(project, _name(variable), element_id, "a variable")
    _check_type_refs(project, variable.find(q("type")), element_id, subject)
    _check_initial_value(project, variable, element_id, subject)
    _check_address(project, variable, element_id, subject, configuration=configuration)


# ---------------------------------------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------------------------------------


def _check_data_type(data_type: etree._Element, project: _Project) -> None:
    name = _name(data_type)
    element_id = f"type/{name}"
    _check_identifier(project, name, element_id, "a data type")
    base_type = data_type.find(q("baseType"))
    base = first_element(base_type)
    if base_type is not None:
        for derived in base_type.iter(q("derived")):
            problem = project.type_problem(_name(derived))
            if problem:
                member = next(derived.iterancestors(q("variable")), None)
                subject = (
                    f"member '{_name(member)}' of data type '{name}'" if member is not None else f"data type '{name}'"
                )
                project.report("unknown_type", element_id, f"The type of {subject} is unknown: {problem}.")
    initial = data_type.find(q("initialValue"))
    if initial is not None:
        problem = _value_problem(project, base, first_element(initial), type_name=name)
        if problem:
            project.report(
                "bad_initial_value", element_id, f"The initial value of data type '{name}' is not valid: {problem}"
            )
    if base is None:
        return
    if local_name(base) == "struct":
        members = list(base.iterchildren(q("variable")))
        for member in members:
            subject = f"member '{_name(member)}' of data type '{name}'"
            _check_identifier(project, _name(member), element_id, f"a member of data type '{name}'")
            _check_initial_value(project, member, element_id, subject)
            # A member's address is relative to where the structure is located, so it takes no part in
            # duplicate detection.
            _check_address(project, member, element_id, subject, configuration=None, compare=False)
        _check_unique(project, ((_name(m), element_id, "member") for m in members), f"in structure '{name}'")
    elif local_name(base) == "enum":
        values = _enum_value_names(base)
        for value in values:
            _check_identifier(project, value, element_id, f"a value of enumeration '{name}'")
        _check_unique(project, ((v, element_id, "value") for v in values), f"in enumeration '{name}'")


# ---------------------------------------------------------------------------------------------------------
# POUs
# ---------------------------------------------------------------------------------------------------------


def _check_pou(pou: etree._Element, project: _Project) -> None:
    name = _name(pou)
    pou_id = f"pou/{name}"
    kind = _POU_KINDS.get(pou.get("pouType", ""), "POU")
    _check_identifier(project, name, pou_id, f"a {kind}")
    interface = pou.find(q("interface"))
    if interface is not None:
        _check_type_refs(project, interface.find(q("returnType")), pou_id, f"the result of function '{name}'")
    scope: list[tuple[str, str, str]] = []
    if pou.get("pouType") == "function":
        scope.append((name, pou_id, "the function result"))
    for section, variable in _sections(interface):
        var_name = _name(variable)
        element_id = f"{pou_id}/var/{var_name}"
        # IEC lets a POU declare EN as a BOOL input and ENO as a BOOL output explicitly.
        explicit_en_eno = (section, var_name.upper()) in (("inputVars", "EN"), ("outputVars", "ENO"))
        _check_variable(
            project,
            variable,
            element_id,
            f"variable '{var_name}' of {kind} '{name}'",
            configuration=None,
            name_allowed=explicit_en_eno,
        )
        scope.append((var_name, element_id, "variable"))
    for part in ("action", "transition"):
        for element in _parts(pou, part):
            _check_identifier(project, _name(element), pou_id, f"an {part} of {kind} '{name}'")
            scope.append((_name(element), pou_id, part))
    _check_unique(project, scope, f"in {kind} '{name}'")
    _check_st(pou, project)


@dataclass(frozen=True, slots=True)
class _StSource:
    """One ST text of a POU: `where` for messages, `body` for clients ("body", "action/Fill",
    "transition/Done", "sfc_action/1", "sfc_condition/2": inline SFC code counted from 1 in document
    order), and whether it is a statement list or a condition."""

    where: str
    body: str
    code: str
    kind: st.Kind


def _st_sources(pou: etree._Element) -> Iterator[_StSource]:
    """Each ST text of a POU: its bodies, actions, transitions and SFC inline code."""
    inline = {"sfc_action": 0, "sfc_condition": 0}
    for element in pou.iterdescendants(q("ST")):
        parent = element.getparent()
        if parent is None or next(element.iterancestors(_ADD_DATA), None) is not None:
            continue
        holder = parent.getparent()
        if holder is None:  # never in a document: a POU's ST lies below its body or an action's
            continue
        code = formatted_text(element) or ""
        if local_name(parent) == "inline":
            condition = local_name(holder) == "condition"
            key = "sfc_condition" if condition else "sfc_action"
            inline[key] += 1
            where = "an SFC transition condition" if condition else "an SFC action block"
            yield _StSource(where, f"{key}/{inline[key]}", code, "condition" if condition else "statements")
        elif local_name(holder) in ("action", "transition"):
            part = local_name(holder)
            kind: st.Kind = "condition" if part == "transition" else "statements"
            yield _StSource(f"{part} '{_name(holder)}'", f"{part}/{_name(holder)}", code, kind)
        else:
            yield _StSource("the body", "body", code, "statements")


@dataclass(frozen=True, slots=True)
class _Declared:
    section: str
    constant: bool
    type_name: str | None  # a <derived> type's name, casefolded; None for any other type


class _Declarations:
    """A POU's variables by casefolded name; what the call and assignment checks need of one (section,
    CONSTANT, type) is read from the XML only for the names the code calls or assigns."""

    def __init__(self, variables: list[tuple[str, etree._Element]]) -> None:
        self.variables: dict[str, tuple[str, etree._Element]] = {}
        for section, variable in variables:
            self.variables.setdefault(_name(variable).casefold(), (section, variable))
        self.read: dict[str, _Declared] = {}

    def get(self, key: str) -> _Declared | None:
        found = self.read.get(key)
        if found is None and key in self.variables:
            section, variable = self.variables[key]
            content = first_element(variable.find(q("type")))
            type_name = _name(content).casefold() if content is not None and local_name(content) == "derived" else None
            holder = variable.getparent()
            constant = holder is not None and holder.get("constant", "") in ("true", "1")
            found = self.read[key] = _Declared(section, constant, type_name)
        return found


def _check_st(pou: etree._Element, project: _Project) -> None:
    name = _name(pou)
    kind = _POU_KINDS.get(pou.get("pouType", ""), "POU")
    interface = pou.find(q("interface"))
    variables = list(_sections(interface))
    declared = _Declarations(variables)
    parts = {n.casefold() for part in ("action", "transition") for n in _names(_parts(pou, part))}
    known = (
        declared.variables.keys()
        | project.global_names
        | project.pous.keys()
        | project.data_types.keys()
        | project.enum_values
        | project.library_types
        | {n.casefold() for n in iec.STANDARD_FUNCTION_BLOCKS}
        | parts
        | {n.casefold() for n in _names(pou.iterdescendants(q("step"), q("macroStep")))}
    )
    if pou.get("pouType") == "function":
        known = known | {name.casefold()}
    used: set[str] = set()
    reported: set[tuple[str, str]] = set()
    judged: set[str] = set()  # an undeclared name once, a declared one once per role

    def report(code: str, key: str, source: _StSource, use: st.NameUse, message: str) -> None:
        if (code, key) in reported:
            return
        reported.add((code, key))
        project.findings.append(
            Finding.of(code, f"pou/{name}", message, line=use.line, column=use.column, body=source.body)
        )

    for source in _st_sources(pou):
        analysis = st.analyse(source.code, source.kind)
        used.update(analysis.pragma_words)
        _report_syntax(project, pou, source, analysis)
        for use in analysis.uses:
            key = use.name.casefold()
            used.add(key)
            # Most names are declared variables read: judged once per name and role, the rest skipped fast.
            if not use.checked or (use.role == "read" and key in known):
                continue
            judging = key if key not in known else f"{use.role} {key}"
            if judging in judged:
                continue
            judged.add(judging)
            if iec.is_reserved(use.name):
                continue
            at = f"{source.where} of {kind} '{name}' (line {use.line}, column {use.column})"
            if key not in known and not iec.is_standard_function(use.name):
                report(
                    "undeclared_identifier",
                    key,
                    source,
                    use,
                    f"'{use.name}' is used in {at} but is not declared as a variable, external, POU, type or "
                    "enumeration value.",
                )
            elif use.role == "call":
                problem = _not_callable(project, declared, parts, key)
                if problem:
                    report("unknown_function", key, source, use, f"'{use.name}' is called in {at}, but {problem}.")
            elif use.role == "write" and (wrong := _write_problem(project, declared, key, use.name, at)):
                report(wrong[0], key, source, use, wrong[1])
    bodies = [
        *pou.iterchildren(q("body")),
        *(
            body
            for part in ("action", "transition")
            for element in _parts(pou, part)
            for body in element.iterchildren(q("body"))
        ),
    ]
    if not bodies or any(local_name(content) != "ST" for b in bodies if (content := first_element(b)) is not None):
        return
    for section, variable in variables:
        var_name = _name(variable)
        if section in _LOCAL_SECTIONS and var_name and var_name.casefold() not in used:
            project.report(
                "unused_variable",
                f"pou/{name}/var/{var_name}",
                f"Local variable '{var_name}' of '{name}' is never used in its ST code; remove it or use it.",
            )


def _report_syntax(project: _Project, pou: etree._Element, source: _StSource, analysis: st.Analysis) -> None:
    name = _name(pou)
    kind = _POU_KINDS.get(pou.get("pouType", ""), "POU")
    for issue in analysis.issues:
        at = f"{source.where} of {kind} '{name}' at line {issue.line}, column {issue.column}"
        if issue.vendor:
            code = "st_dialect"
            message = (
                f"The statement in {at} ('{issue.excerpt}') is a vendor extension, not IEC 61131-3 Structured "
                "Text; other tools may refuse it, and its names are not checked."
            )
        elif issue.missing is not None:
            code = "st_syntax"
            expected = "a name or value" if issue.missing == "identifier" else f"'{issue.missing}'"
            message = f"Syntax error in {at}: {expected} is missing ('{issue.excerpt}'); add it there."
        else:
            code = "st_syntax"
            message = (
                f"Syntax error in {at}: the code there ('{issue.excerpt}') is not valid Structured Text; "
                "correct it at that position."
            )
        project.findings.append(
            Finding.of(
                code,
                f"pou/{name}",
                message,
                line=issue.line,
                column=issue.column,
                excerpt=issue.excerpt,
                body=source.body,
            )
        )


def _not_callable(project: _Project, declared: _Declarations, parts: set[str], key: str) -> str | None:
    """Why a declared name cannot be called, or None when it can (or the checker cannot tell)."""
    variable = declared.get(key)
    if variable is not None:
        type_name = variable.type_name
        if type_name is None:
            return "it is a variable of an elementary, array or string type, neither a function nor a function block instance"
        pou = project.pous.get(type_name)
        if type_name in project.data_types or (pou is not None and pou.get("pouType") != "functionBlock"):
            return f"it is a variable of type '{type_name}', not a function block instance"
        return None
    if key in parts:
        return None
    pou = project.pous.get(key)
    if pou is not None and pou.get("pouType") == "functionBlock":
        return f"'{_name(pou)}' is a function block type: declare an instance of it and call the instance"
    if key.upper() in iec.STANDARD_FUNCTION_BLOCKS:
        return f"{key.upper()} is a standard function block type: declare an instance of it and call the instance"
    if key in project.data_types:
        return "it is a data type, neither a function nor a function block instance"
    return None


def _write_problem(project: _Project, declared: _Declarations, key: str, name: str, at: str) -> tuple[str, str] | None:
    """(code, message) when assigning the name is wrong: a constant (problem) or an input (advisory)."""
    variable = declared.get(key)
    if (variable is not None and variable.constant) or (variable is None and key in project.global_constants):
        return (
            "assignment_to_constant",
            f"'{name}' is assigned in {at}, but it is declared CONSTANT; remove the assignment or the CONSTANT "
            "qualifier.",
        )
    if variable is not None and variable.section == "inputVars":
        return (
            "assignment_to_input",
            f"'{name}' is assigned in {at}, but it is an input, which its caller sets; copy it into a local "
            "variable and change that.",
        )
    return None


# ---------------------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------------------


def _check_globals(project: _Project, owner: etree._Element, owner_id: str, label: str, configuration: str) -> None:
    scope: list[tuple[str, str, str]] = []
    for variable in _xpath(owner, "p:globalVars/p:variable"):
        var_name = _name(variable)
        element_id = f"{owner_id}/var/{var_name}"
        _check_variable(project, variable, element_id, f"global '{var_name}' of {label}", configuration=configuration)
        scope.append((var_name, element_id, "global"))
    _check_unique(project, scope, f"in {label}")


def _check_instance(project: _Project, instance: etree._Element, element_id: str) -> None:
    _check_identifier(project, _name(instance), element_id, "a POU instance")
    type_name = instance.get("typeName")
    if type_name is None:
        return
    pou = project.pous.get(type_name.casefold())
    if pou is None:
        project.report(
            "unknown_type",
            element_id,
            f"POU instance '{_name(instance)}' runs '{type_name}', which is not a program of this project.",
        )
    elif pou.get("pouType") != "program":
        project.report(
            "unknown_type",
            element_id,
            f"POU instance '{_name(instance)}' runs '{type_name}', a {_POU_KINDS.get(pou.get('pouType', ''), 'POU')}; "
            "only programs can be instantiated in a resource or task.",
        )


def _check_configuration(configuration: etree._Element, project: _Project) -> None:
    config_name = _name(configuration)
    config_id = f"config/{config_name}"
    config_key = config_name.casefold()
    _check_identifier(project, config_name, config_id, "a configuration")
    resources: list[tuple[str, str, str]] = []
    for resource in configuration.iterchildren(q("resource")):
        resource_name = _name(resource)
        resource_id = f"{config_id}/resource/{resource_name}"
        resources.append((resource_name, resource_id, "resource"))
        _check_identifier(project, resource_name, resource_id, "a resource")
        label = f"resource '{resource_name}'"
        _check_globals(project, resource, resource_id, label, config_key)
        tasks: list[tuple[str, str, str]] = []
        instances: list[tuple[str, str, str]] = []
        for task in resource.iterchildren(q("task")):
            task_id = f"{resource_id}/task/{_name(task)}"
            tasks.append((_name(task), task_id, "task"))
            _check_identifier(project, _name(task), task_id, "a task")
            for instance in task.iterchildren(q("pouInstance")):
                instance_id = f"{task_id}/instance/{_name(instance)}"
                instances.append((_name(instance), instance_id, "POU instance"))
                _check_instance(project, instance, instance_id)
        for instance in resource.iterchildren(q("pouInstance")):
            instance_id = f"{resource_id}/instance/{_name(instance)}"
            instances.append((_name(instance), instance_id, "POU instance"))
            _check_instance(project, instance, instance_id)
        _check_unique(project, tasks, f"in {label}")
        _check_unique(project, instances, f"in {label}")
    _check_unique(project, resources, f"in configuration '{config_name}'")
    # After the resources, as in the document, so the later of two clashing declarations is the one reported.
    _check_globals(project, configuration, config_id, f"configuration '{config_name}'", config_key)
    for variable in _xpath(configuration, "p:configVars/p:configVariable"):
        subject = f"configuration variable '{variable.get('instancePathAndName', '')}'"
        _check_type_refs(project, variable.find(q("type")), config_id, subject)
        _check_initial_value(project, variable, config_id, subject)
        _check_address(project, variable, config_id, subject, configuration=config_key)
    for variable in _xpath(configuration, "p:accessVars/p:accessVariable"):
        _check_type_refs(project, variable.find(q("type")), config_id, f"access variable '{variable.get('alias', '')}'")


def _check_instantiation(root: etree._Element, project: _Project) -> None:
    instantiated = {str(t).casefold() for t in _xpath(root, "p:instances//p:pouInstance/@typeName")}
    for pou in _xpath(root, "p:types/p:pous/p:pou[@pouType='program']"):
        if _name(pou).casefold() not in instantiated:
            project.report(
                "program_not_instantiated",
                f"pou/{_name(pou)}",
                f"Program '{_name(pou)}' is not instantiated by any task or resource, so it never runs; add a POU "
                "instance of it to a task.",
            )
