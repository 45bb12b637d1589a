"""The type and value grammar: IEC text for TC6 2.01 type and initial value elements, both ways.

`parse_type` turns a type string as a person writes it in ST (`INT`, `STRING[10]`, `ARRAY[0..9] OF REAL`,
`INT(0..100)`, `Motor`) into the TC6 element that stands for it, and `render_type` writes such an element
back as that text; `parse_value` and `render_value` do the same for initial values (`[1, 2, 3(0)]`,
`(a := 1, b := TRUE)`, literals). Text with no TC6 form is refused with `TypeStringError` or
`ValueStringError`, whose message says why. The type names come from `projects.iec` through
`projects.plcopen.tc6`. Pure: no Django, no database.
"""

from __future__ import annotations

import re
from typing import Final

from lxml import etree

from projects import iec
from projects.plcopen.tc6 import ELEMENTARY_TYPE_ELEMENTS, first_element, local_name, q

# Type elements with no attributes or content (all elementary types but the strings, and the generic
# ANY_* types): each is written, and read back, as its name.
_SIMPLE_TYPE_ELEMENTS: Final = (ELEMENTARY_TYPE_ELEMENTS - {"string", "wstring"}) | iec.GENERIC_TYPES
_SIMPLE_BY_TAG: Final = {q(name): name for name in _SIMPLE_TYPE_ELEMENTS}
_INTEGERS: Final = [t for t in iec.ELEMENTARY_TYPES.values() if t.kind == "int"]
_SIGNED_INTEGERS: Final = frozenset(t.name for t in _INTEGERS if (t.minimum or 0) < 0)
_UNSIGNED_INTEGERS: Final = frozenset(t.name for t in _INTEGERS if t.minimum == 0)
# The long names IEC also accepts (TIME_OF_DAY, DATE_AND_TIME), by the short name TC6 has an element for.
_TYPE_ALIASES: Final = {name: t.name for name, t in iec.ELEMENTARY_TYPES.items() if name != t.name}
_UNREPRESENTABLE_TYPES: Final = frozenset(
    {"LTIME", "LDATE", "LTOD", "LDT", "LTIME_OF_DAY", "LDATE_AND_TIME", "CHAR", "WCHAR"}
)


class TypeStringError(ValueError):
    """A type string (`INT`, `STRING[10]`, `ARRAY[0..9] OF REAL`) cannot be expressed in TC6 2.01."""


class ValueStringError(ValueError):
    """An initial value string cannot be turned into a TC6 2.01 `value` element."""


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
