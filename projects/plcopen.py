"""PLCopen TC6 XML 2.01 project files: loading, schema validation, deterministic output, element ids and reads.

A project file is kept as an lxml tree, edited in place, so everything the service does not model (graphical
FBD/LD/SFC bodies, addData, comments, CDATA sections) is written back byte for byte. `load` parses with a
hardened parser and remembers what the tree cannot hold (the XML declaration as written, the line ending,
a byte order mark, the whitespace around the root) so that `serialize` restores it: an unchanged Beremiz or
OpenPLC file comes back byte-identical. Element ids are readable paths (`pou/Main/var/Counter`) compared
case-insensitively as IEC identifiers are. The read queries return plain JSON-ready dicts with hard limits
and opaque cursors. This module is pure: no Django, no database; `projects.operations` builds on it.

A `ProjectDocument` is treated as immutable once loaded: its index and schema verdict are cached, and
`projects.operations.apply` works on a copy.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import copy
import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Final

from lxml import etree

from projects import iec

NS: Final = "http://www.plcopen.org/xml/tc6_0201"
XHTML_NS: Final = "http://www.w3.org/1999/xhtml"
SCHEMA_PATH: Path = Path(__file__).resolve().parent / "schema" / "tc6_xml_v201.xsd"

_OTHER_DIALECTS: Final = {
    "http://www.plcopen.org/xml/tc6_0200": "PLCopen TC6 XML 2.0 (as exported by CODESYS, TwinCAT or Machine Expert)",
    "http://www.plcopen.org/xml/tc6.xsd": "PLCopen TC6 XML 1.0",
}

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 200
DEFAULT_BODY_LIMIT: Final = 8000
MAX_BODY_LIMIT: Final = 32000
# A POU's interface is listed inline up to this many variables; list_variables pages through the rest.
INTERFACE_VARIABLE_LIMIT: Final = 200
LIST_DOCUMENTATION_CHARS: Final = 300

KINDS: Final = ("pou", "variable", "type", "config", "resource", "task", "instance")
VAR_SECTIONS: Final = tuple(
    ["inputVars", "outputVars", "inOutVars", "localVars", "tempVars", "externalVars", "globalVars", "accessVars"]
)
TEXT_LANGUAGES: Final = ("ST", "IL")
GRAPHICAL_LANGUAGES: Final = ("FBD", "LD", "SFC")
ELEMENTARY_TYPES: Final = tuple(
    [
        "BOOL",
        "BYTE",
        "WORD",
        "DWORD",
        "LWORD",
        "SINT",
        "INT",
        "DINT",
        "LINT",
        "USINT",
        "UINT",
        "UDINT",
        "ULINT",
        "REAL",
        "LREAL",
        "TIME",
        "DATE",
        "DT",
        "TOD",
    ]
)
GENERIC_TYPES: Final = tuple(
    [
        "ANY",
        "ANY_DERIVED",
        "ANY_ELEMENTARY",
        "ANY_MAGNITUDE",
        "ANY_NUM",
        "ANY_REAL",
        "ANY_INT",
        "ANY_BIT",
        "ANY_STRING",
        "ANY_DATE",
    ]
)
_SIMPLE_TYPE_ELEMENTS: Final = frozenset(ELEMENTARY_TYPES + GENERIC_TYPES)
_SIMPLE_BY_TAG: Final = {f"{{{NS}}}{name}": name for name in _SIMPLE_TYPE_ELEMENTS}
_SIGNED_INTEGERS: Final = frozenset({"SINT", "INT", "DINT", "LINT"})
_UNSIGNED_INTEGERS: Final = frozenset({"USINT", "UINT", "UDINT", "ULINT", "BYTE", "WORD", "DWORD", "LWORD"})
_TYPE_ALIASES: Final = {"TIME_OF_DAY": "TOD", "DATE_AND_TIME": "DT"}
_UNREPRESENTABLE_TYPES: Final = frozenset(
    {"LTIME", "LDATE", "LTOD", "LDT", "LTIME_OF_DAY", "LDATE_AND_TIME", "CHAR", "WCHAR"}
)


class ProjectFormatError(ValueError):
    """The bytes are not a PLCopen TC6 2.01 project this service can load; the message says why."""


class ElementNotFound(LookupError):
    """No element has this id in the document."""

    def __init__(self, element_id: str) -> None:
        super().__init__(f"no element with id {element_id!r}")
        self.element_id = element_id


class TypeStringError(ValueError):
    """A type string (`INT`, `STRING[10]`, `ARRAY[0..9] OF REAL`) cannot be expressed in TC6 2.01."""


class ValueStringError(ValueError):
    """An initial value string cannot be turned into a TC6 2.01 `value` element."""


@dataclass(frozen=True, slots=True)
class SchemaError:
    """One XSD violation; `line` is the line in the serialized file (0 when unknown)."""

    line: int
    message: str


def q(name: str) -> str:
    """The Clark name of a TC6 element, e.g. `q("pou")`."""
    return f"{{{NS}}}{name}"


def local_name(el: etree._Element) -> str:
    """The local name of an element, or "" for comments and processing instructions."""
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2]


def first_element(el: etree._Element | None) -> etree._Element | None:
    if el is None:
        return None
    for child in el:
        if isinstance(child.tag, str):
            return child
    return None


def fingerprint(data: bytes) -> str:
    """The sha256 hex digest of a file's bytes; a changed fingerprint means the file changed."""
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Loading and writing


class ProjectDocument:
    """A loaded project: the lxml tree plus the file conventions the tree cannot hold."""

    def __init__(
        self,
        tree: etree._ElementTree,
        *,
        declaration: bytes,
        prolog_gap: bytes,
        trailer: bytes,
        line_ending: str,
        bom: bool,
        encoding: str,
        source_lines: bool,
    ) -> None:
        self.tree = tree
        self.declaration = declaration
        self.prolog_gap = prolog_gap
        self.trailer = trailer
        self.line_ending = line_ending
        self.bom = bom
        self.encoding = encoding
        # True while element source lines still match the serialized file (a loaded, unedited tree).
        self.source_lines = source_lines
        self._schema_errors: tuple[SchemaError, ...] | None = None

    @property
    def root(self) -> etree._Element:
        return self.tree.getroot()

    @cached_property
    def index(self) -> ElementIndex:
        return ElementIndex.build(self.root)

    def copy(self) -> ProjectDocument:
        """An independent copy with the same file conventions, for editing."""
        return ProjectDocument(
            copy.deepcopy(self.tree),
            declaration=self.declaration,
            prolog_gap=self.prolog_gap,
            trailer=self.trailer,
            line_ending=self.line_ending,
            bom=self.bom,
            encoding=self.encoding,
            source_lines=False,
        )


_DECLARATION_RE: Final = re.compile(rb"<\?xml\s[^?]*\?>")
_UTF8_BOM: Final = codecs.BOM_UTF8


def _parser() -> etree.XMLParser:
    # A new parser per call: lxml parsers must not be shared between threads.
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        strip_cdata=False,
        remove_blank_text=False,
        remove_comments=False,
        remove_pis=False,
    )


def load(data: bytes) -> ProjectDocument:
    """Parse a PLCopen TC6 2.01 file; raise ProjectFormatError with a clear reason for anything else."""
    if not isinstance(data, bytes | bytearray):
        raise TypeError("load() takes the file's bytes")
    data = bytes(data)
    bom = data.startswith(_UTF8_BOM)
    if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) or data[:4] in (
        codecs.BOM_UTF32_LE,
        codecs.BOM_UTF32_BE,
    ):
        raise ProjectFormatError("UTF-16 and UTF-32 files are not supported; save the project as UTF-8")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        raise ProjectFormatError(f"not well-formed XML (line {exc.lineno}): {exc.msg}") from None
    tree = root.getroottree()
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise ProjectFormatError("the file has a DOCTYPE declaration; PLCopen files have none and it is refused")
    namespace = etree.QName(root).namespace
    if etree.QName(root).localname != "project" or namespace != NS:
        if namespace in _OTHER_DIALECTS:
            raise ProjectFormatError(
                f"this is {_OTHER_DIALECTS[namespace]}, a different dialect; only PLCopen TC6 XML 2.01 "
                f"(namespace {NS}) is supported"
            )
        raise ProjectFormatError(
            f"the root element is {root.tag!r}, not a PLCopen TC6 XML 2.01 <project> (namespace {NS})"
        )
    encoding = tree.docinfo.encoding or "UTF-8"
    try:
        ascii_compatible = "<\n".encode(encoding) == b"<\n"
    except LookupError:
        ascii_compatible = False
    if not ascii_compatible:
        raise ProjectFormatError(f"encoding {encoding!r} is not supported; save the project as UTF-8")

    text = data[len(_UTF8_BOM) :] if bom else data
    crlf = text.count(b"\r\n")
    # The parser turns CRLF into LF; the file's dominant convention is restored on output.
    line_ending = "\r\n" if crlf and crlf * 2 >= text.count(b"\n") else "\n"
    text = text.replace(b"\r\n", b"\n")
    match = _DECLARATION_RE.match(text)
    declaration = match.group(0) if match else b""
    rest = text[match.end() :] if match else text
    prolog_gap = rest[: len(rest) - len(rest.lstrip())]
    trailer = text[len(text.rstrip()) :]
    return ProjectDocument(
        tree,
        declaration=declaration,
        prolog_gap=prolog_gap,
        trailer=trailer,
        line_ending=line_ending,
        bom=bom,
        encoding=encoding,
        source_lines=True,
    )


def serialize(doc: ProjectDocument) -> bytes:
    """The file's bytes: deterministic, restoring the declaration, line ending and BOM that load() saw."""
    body = etree.tostring(doc.tree, encoding=doc.encoding, xml_declaration=False)
    out = doc.declaration + doc.prolog_gap + body + doc.trailer
    if doc.line_ending == "\r\n":
        out = out.replace(b"\n", b"\r\n")
    return _UTF8_BOM + out if doc.bom else out


# ---------------------------------------------------------------------------------------------------------
# Schema validation

_schema_lock = threading.Lock()


@cache
def _schema(path: Path) -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(path), _parser()))


def _validate_root(root: etree._Element, schema_path: Path) -> list[SchemaError]:
    schema = _schema(schema_path)
    # One XMLSchema object per process; its error_log belongs to the last call, so calls are serialized.
    with _schema_lock:
        if schema.validate(root):
            return []
        return [SchemaError(line=entry.line or 0, message=entry.message) for entry in schema.error_log]


def validate(doc: ProjectDocument, schema_path: Path | None = None) -> list[SchemaError]:
    """XSD violations of the document, each with the line in the serialized file; [] when valid."""
    if schema_path is None and doc._schema_errors is not None:
        return list(doc._schema_errors)
    path = schema_path or SCHEMA_PATH
    errors = _validate_root(doc.root, path)
    if errors and not doc.source_lines:
        # Edited elements carry no source line; re-read the output so the lines point into the file.
        errors = _validate_root(load(serialize(doc)).root, path)
    if schema_path is None:
        doc._schema_errors = tuple(errors)
    return errors


def mark_valid(doc: ProjectDocument) -> None:
    """Record a schema verdict already established for this exact state (by projects.operations.apply)."""
    doc._schema_errors = ()


# ---------------------------------------------------------------------------------------------------------
# Formatted text, types and values


def formatted_text(el: etree._Element | None) -> str | None:
    """The text of a formattedText element (documentation, ST, IL): the content of its one XHTML child."""
    if el is None:
        return None
    for child in el:
        if isinstance(child.tag, str) and child.tag.startswith(f"{{{XHTML_NS}}}"):
            return "".join(child.itertext())
    # Schema-invalid files (bare text in <ST>) still read as their text.
    return "".join(el.itertext())


def xhtml_paragraph(text: str, nsmap_source: etree._Element) -> etree._Element:
    """An `<xhtml:p>` holding `text` as CDATA, as Beremiz and OpenPLC write code and documentation."""
    nsmap = None if XHTML_NS in nsmap_source.nsmap.values() else {"xhtml": XHTML_NS}
    p = etree.Element(f"{{{XHTML_NS}}}p", nsmap=nsmap)
    set_code_text(p, text)
    return p


def set_code_text(el: etree._Element, text: str) -> None:
    """Make `text` the only content of an XHTML element, as a CDATA section with LF line ends."""
    for child in list(el):
        el.remove(child)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    # lxml cannot split a CDATA section, so text holding "]]>" is written escaped instead.
    el.text = etree.CDATA(text) if "]]>" not in text else text


def render_type(container: etree._Element | None) -> str:
    """A `type`/`baseType`/`returnType` element as IEC text: INT, STRING[10], ARRAY[0..9] OF REAL, Motor."""
    if container is None:
        return ""
    child = first_element(container)
    if child is None:
        return ""
    # Fast path: most variables have an elementary type, and the index renders every variable's type.
    tag = child.tag  # a str: first_element skips comments and processing instructions
    simple = _SIMPLE_BY_TAG.get(tag) if isinstance(tag, str) else None
    if simple is not None:
        return simple
    name = local_name(child)
    if name in _SIMPLE_TYPE_ELEMENTS:
        return name
    if name in ("string", "wstring"):
        length = child.get("length")
        return f"{name.upper()}[{length}]" if length else name.upper()
    if name == "derived":
        return child.get("name", "")
    if name == "array":
        dims = ", ".join(f"{d.get('lower')}..{d.get('upper')}" for d in child.iterchildren(q("dimension")))
        return f"ARRAY[{dims}] OF {render_type(child.find(q('baseType')))}"
    if name == "pointer":
        return f"POINTER TO {render_type(child.find(q('baseType')))}"
    if name == "enum":
        values = [
            v.get("name", "") + (f" := {v.get('value')}" if v.get("value") is not None else "")
            for v in child.iterfind(f"{q('values')}/{q('value')}")
        ]
        text = "(" + ", ".join(values) + ")"
        base = child.find(q("baseType"))
        return f"{render_type(base)} {text}" if base is not None else text
    if name == "struct":
        members = " ".join(
            f"{v.get('name')} : {render_type(v.find(q('type')))};" for v in child.iterchildren(q("variable"))
        )
        return f"STRUCT {members} END_STRUCT"
    if name in ("subrangeSigned", "subrangeUnsigned"):
        rng = child.find(q("range"))
        bounds = f"{rng.get('lower')}..{rng.get('upper')}" if rng is not None else ""
        return f"{render_type(child.find(q('baseType')))}({bounds})"
    return name


_TYPE_TOKEN_RE: Final = re.compile(r"\s*(?:(\.\.)|([\[\](),])|([+-]?[0-9][0-9_]*)|([A-Za-z_][A-Za-z0-9_]*))")


def _type_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TYPE_TOKEN_RE.match(text, pos)
        if not match or match.end() == pos:
            raise TypeStringError(f"unexpected {text[pos:].strip()[:20]!r} in type {text!r}")
        tokens.append(next(group for group in match.groups() if group is not None))
        pos = match.end()
    return tokens


class _TypeParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _type_tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            wanted = f"{expected!r}" if expected else "more"
            found = f"{token!r}" if token is not None else "the end"
            raise TypeStringError(f"expected {wanted} but found {found} in type {self.text!r}")
        self.pos += 1
        return token

    def integer(self) -> int:
        token = self.take()
        if not re.fullmatch(r"[+-]?[0-9][0-9_]*", token):
            raise TypeStringError(f"expected an integer but found {token!r} in type {self.text!r}")
        return int(token.replace("_", ""))

    def bounds(self) -> tuple[int, int]:
        lower = self.integer()
        self.take("..")
        upper = self.integer()
        if lower > upper:
            raise TypeStringError(f"range {lower}..{upper} is empty in type {self.text!r}")
        return lower, upper

    def parse(self) -> etree._Element:
        el = self.type()
        if self.peek() is not None:
            raise TypeStringError(f"unexpected {self.peek()!r} after the type in {self.text!r}")
        return el

    def type(self) -> etree._Element:
        word = self.take()
        upper = _TYPE_ALIASES.get(word.upper(), word.upper())
        if upper == "ARRAY":
            array = etree.Element(q("array"))
            self.take("[")
            while True:
                lower, upper_bound = self.bounds()
                etree.SubElement(array, q("dimension"), lower=str(lower), upper=str(upper_bound))
                if self.peek() != ",":
                    break
                self.take(",")
            self.take("]")
            self.take("OF")
            etree.SubElement(array, q("baseType")).append(self.type())
            return array
        if upper in ("POINTER", "REF_TO"):
            if upper == "POINTER":
                self.take("TO")
            pointer = etree.Element(q("pointer"))
            etree.SubElement(pointer, q("baseType")).append(self.type())
            return pointer
        if upper in ("STRING", "WSTRING"):
            el = etree.Element(q(upper.lower()))
            if self.peek() in ("[", "("):
                closing = "]" if self.take() == "[" else ")"
                length = self.integer()
                if length < 1:
                    raise TypeStringError(f"string length must be at least 1 in type {self.text!r}")
                el.set("length", str(length))
                self.take(closing)
            return el
        if upper in _UNREPRESENTABLE_TYPES:
            raise TypeStringError(f"{word} has no element in PLCopen TC6 2.01 and cannot be stored")
        if upper in _SIMPLE_TYPE_ELEMENTS:
            if self.peek() == "(":
                return self.subrange(upper)
            return etree.Element(q(upper))
        if not iec.is_identifier(word) or iec.is_reserved(word):
            raise TypeStringError(f"{word!r} is not a type name")
        if self.peek() is not None and self.peek() not in (",", "]", ")"):
            raise TypeStringError(f"unexpected {self.peek()!r} after {word!r} in type {self.text!r}")
        derived = etree.Element(q("derived"))
        derived.set("name", word)
        return derived

    def subrange(self, base: str) -> etree._Element:
        if base not in _SIGNED_INTEGERS | _UNSIGNED_INTEGERS:
            raise TypeStringError(f"a subrange needs an integer base type, not {base}, in type {self.text!r}")
        self.take("(")
        lower, upper = self.bounds()
        self.take(")")
        if base in _UNSIGNED_INTEGERS and lower < 0:
            raise TypeStringError(f"{base} cannot hold {lower} in type {self.text!r}")
        el = etree.Element(q("subrangeUnsigned" if base in _UNSIGNED_INTEGERS else "subrangeSigned"))
        etree.SubElement(el, q("range"), lower=str(lower), upper=str(upper))
        etree.SubElement(el, q("baseType")).append(etree.Element(q(base)))
        return el


def parse_type(text: str) -> etree._Element:
    """The TC6 element for a type string: `INT` -> `<INT/>`, `STRING[10]`, `ARRAY[0..9, 1..2] OF T`,
    `POINTER TO T`, `INT(0..100)` (subrange), `Motor` -> `<derived name="Motor"/>`."""
    if not text or not text.strip():
        raise TypeStringError("the type is empty")
    return _TypeParser(text).parse()


def _split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split on `separator` outside brackets, parentheses and quoted strings."""
    parts: list[str] = []
    depth = 0
    quote: str | None = None
    start = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "$":
                i += 1  # `$'` and `$$` are escapes inside IEC strings
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                raise ValueStringError(f"unbalanced {ch!r} in value {text!r}")
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    if quote or depth:
        raise ValueStringError(f"unclosed {'string' if quote else 'bracket'} in value {text!r}")
    parts.append(text[start:])
    return parts


_REPETITION_RE: Final = re.compile(r"^\s*([0-9]+)\s*\((.*)\)\s*$", re.DOTALL)
_MEMBER_RE: Final = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:=(.*)$", re.DOTALL)


def _value_content(text: str) -> etree._Element:
    stripped = text.strip()
    if not stripped:
        raise ValueStringError("an empty value")
    if stripped.startswith("[") and stripped.endswith("]"):
        array = etree.Element(q("arrayValue"))
        inner = stripped[1:-1]
        for item in _split_top_level(inner) if inner.strip() else []:
            value = etree.SubElement(array, q("value"))
            repetition = _REPETITION_RE.match(item)
            if repetition:
                value.set("repetitionValue", repetition.group(1))
                item = repetition.group(2)
            value.append(_value_content(item))
        return array
    if stripped.startswith("(") and stripped.endswith(")"):
        items = _split_top_level(stripped[1:-1])
        members = [_MEMBER_RE.match(item) for item in items]
        if all(members):
            struct = etree.Element(q("structValue"))
            for member in members:
                assert member is not None
                value = etree.SubElement(struct, q("value"), member=member.group(1))
                value.append(_value_content(member.group(2)))
            return struct
    _split_top_level(stripped)  # refuses unbalanced brackets and unclosed strings
    simple = etree.Element(q("simpleValue"))
    simple.set("value", stripped)
    return simple


def parse_value(text: str) -> etree._Element:
    """The content of an `initialValue` element: `[1, 2, 3(0)]` -> arrayValue (3(0) repeats 0 three times),
    `(a := 1, b := TRUE)` -> structValue, anything else -> `<simpleValue value="..."/>` (a literal as written
    in ST; its syntax is checked by the findings, not here)."""
    if not isinstance(text, str):
        raise ValueStringError("the value must be text")
    return _value_content(text)


def render_value(value: etree._Element | None) -> str | None:
    """An `initialValue` (or nested `value`) element as IEC text; the inverse of parse_value."""
    content = first_element(value)
    if content is None:
        return None
    name = local_name(content)
    if name == "simpleValue":
        return content.get("value", "")
    if name == "arrayValue":
        items = []
        for item in content.iterchildren(q("value")):
            text = render_value(item) or ""
            repetition = item.get("repetitionValue")
            items.append(f"{repetition}({text})" if repetition not in (None, "1") else text)
        return "[" + ", ".join(items) + "]"
    if name == "structValue":
        members = [f"{item.get('member')} := {render_value(item) or ''}" for item in content.iterchildren(q("value"))]
        return "(" + ", ".join(members) + ")"
    return None


# ---------------------------------------------------------------------------------------------------------
# Element ids and the index


def flag(el: etree._Element | None, name: str) -> bool:
    """An xsd:boolean attribute (a var section's retain, constant, ...), false when absent."""
    return el is not None and el.get(name) in ("true", "1")


@dataclass(slots=True, eq=False)
class Entry:
    """One addressable element: its id as written in the file, kind, name and what searches look at."""

    id: str
    key: str  # the id lowercased: ids compare case-insensitively
    kind: str
    name: str
    element: etree._Element
    scope: str | None
    section: str | None
    type_text: str | None
    haystack: str


_DOCUMENTATION: Final = q("documentation")


def _documentation_of(el: etree._Element) -> str:
    documentation = el.find(_DOCUMENTATION)
    return (formatted_text(documentation) or "").strip() if documentation is not None else ""


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
        documentation = {parent: el for el in root.iter(_DOCUMENTATION) if (parent := el.getparent()) is not None}
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
) -> Entry:
    """The entry for one element; `documentation` maps elements to their documentation when precollected."""
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
    doc_el = documentation.get(el) if documentation is not None else el.find(_DOCUMENTATION)
    doc_text = (formatted_text(doc_el) or "").strip() if doc_el is not None else ""
    haystack = f"{name}\n{type_text or ''}\n{doc_text}".lower()
    return Entry(element_id, element_id.lower(), kind, name, el, scope, section, type_text, haystack)


def direct_entries(
    el: etree._Element,
    kind: str,
    element_id: str,
    documentation: dict[etree._Element, etree._Element] | None = None,
) -> list[Entry]:
    """The entries directly below one element (a POU's variables, a resource's tasks, globals, instances)."""
    entries = []
    for keyword, child_kind, path in _STEPS.get(kind, ()):
        for child in el.iterfind(path):
            name = child.get("name")
            if name is None:
                continue  # schema-invalid (iec-checker's pouInstance has none); nothing can address it
            child_id = f"{element_id}/{keyword}/{name}" if element_id else f"{keyword}/{name}"
            entries.append(make_entry(child_kind, child, child_id, element_id or None, documentation))
    return entries


def _collect(
    el: etree._Element,
    kind: str,
    element_id: str,
    documentation: dict[etree._Element, etree._Element],
    out: list[Entry],
) -> None:
    for entry in direct_entries(el, kind, element_id, documentation):
        out.append(entry)
        if entry.kind in _STEPS:
            _collect(entry.element, entry.kind, entry.id, documentation, out)


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


# ---------------------------------------------------------------------------------------------------------
# Limits and cursors


def check_limit(limit: int, maximum: int = MAX_LIMIT) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError("limit must be an integer")
    if limit > maximum:
        raise ValueError(f"limit {limit} is above the maximum of {maximum}")
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return limit


def encode_cursor(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("the cursor is not valid; start again without one") from None
    if not isinstance(payload, dict) or payload.get("k") != kind:
        raise ValueError("the cursor belongs to another kind of call; start again without one")
    return payload


def _query_key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def _position_from(cursor: str | None, kind: str, key: str) -> int:
    if cursor is None:
        return 0
    payload = decode_cursor(cursor, kind)
    if payload.get("q") != key:
        raise ValueError("the cursor belongs to a different query; repeat the query without a cursor")
    position = payload.get("p")
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError("the cursor is not valid; start again without one")
    return position


def _page(
    entries: list[Entry], matches: Any, start: int, limit: int, kind: str, key: str
) -> tuple[list[Entry], str | None]:
    found: list[Entry] = []
    position = start
    while position < len(entries):
        entry = entries[position]
        position += 1
        if matches(entry):
            if len(found) == limit:
                return found, encode_cursor({"k": kind, "q": key, "p": position - 1})
            found.append(entry)
    return found, None


# ---------------------------------------------------------------------------------------------------------
# Read queries


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
    key = _query_key("find", needle, kind, wanted_type)
    start = _position_from(cursor, "find", key)

    def matches(entry: Entry) -> bool:
        if kind is not None and entry.kind != kind:
            return False
        if wanted_type is not None and (entry.type_text or "").lower() != wanted_type:
            return False
        return needle is None or needle in entry.haystack

    found, next_cursor = _page(doc.index.entries, matches, start, limit, "find", key)
    return {"items": [_summary(entry) for entry in found], "next_cursor": next_cursor}


def _variable_dict(entry: Entry, documentation_chars: int | None = None) -> dict[str, Any]:
    variable = entry.element
    section = variable.getparent()
    documentation = _documentation_of(variable) or None
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
    key = _query_key("vars", scope_key, section_name)
    start = _position_from(cursor, "vars", key)

    def matches(entry: Entry) -> bool:
        return entry.kind == "variable" and (section_name is None or entry.section == section_name)

    found, next_cursor = _page(candidates, matches, start, limit, "vars", key)
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
    interface = pou_entry.element.find(q("interface"))
    sections: list[dict[str, Any]] = []
    total = 0
    listed = 0
    for section in interface if interface is not None else ():
        name = local_name(section)
        if name not in VAR_SECTIONS:
            continue
        variables = []
        for variable in section.iterchildren(q("variable")):
            total += 1
            var_name = variable.get("name")
            if var_name is None or listed >= INTERFACE_VARIABLE_LIMIT:
                continue
            listed += 1
            entry = make_entry("variable", variable, f"{pou_entry.id}/var/{var_name}", pou_entry.id)
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
        "documentation": _documentation_of(pou) or None,
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
        "documentation": _documentation_of(entry.element) or None,
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
        "instances": [_instance_dict(e) for e in direct_entries(task, "task", entry.id)],
        "documentation": _documentation_of(task) or None,
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
        "documentation": _documentation_of(entry.element) or None,
    }
    if base_kind == "struct":
        assert base is not None
        result["members"] = [
            {
                "name": v.get("name"),
                "type": render_type(v.find(q("type"))),
                "initial_value": render_value(v.find(q("initialValue"))),
                "documentation": _documentation_of(v) or None,
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
    below = direct_entries(entry.element, entry.kind, entry.id)
    result: dict[str, Any] = {"id": entry.id, "kind": entry.kind, "name": entry.name}
    if entry.kind == "resource":
        result["tasks"] = [_summary(e) for e in below if e.kind == "task"]
        result["instances"] = [_instance_dict(e) for e in below if e.kind == "instance"]
    else:
        result["resources"] = [_summary(e) for e in below if e.kind == "resource"]
    result["global_variable_count"] = sum(1 for e in below if e.kind == "variable")
    result["documentation"] = _documentation_of(entry.element) or None
    return result
