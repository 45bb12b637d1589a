"""IEC 61131-3 primitives the project checks and edits are built on: identifiers and reserved words, the
elementary types and their literals, located addresses, and a small Structured Text tokenizer.

Everything here is pure (no Django, no XML) and works on strings, so the same rules serve the findings
checker, the validation of operations and the console. Names are compared case-insensitively, as IEC
identifiers are. The literal syntax follows IEC 61131-3 (2nd edition, the one PLCopen TC6 2.01 encodes),
with the few 3rd-edition spellings real tools write (`us`/`ns` durations, typed counters) accepted.
"""

from __future__ import annotations

import bisect
import datetime
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import MappingProxyType

# The standard only requires six significant characters and leaves the maximum to the implementation;
# this bound keeps element ids and messages readable.
IDENTIFIER_MAX_LENGTH = 127

_IDENTIFIER = re.compile(r"(?:[A-Za-z]|_[A-Za-z0-9])(?:_?[A-Za-z0-9])*", re.ASCII)


def is_identifier(name: str) -> bool:
    """ASCII letters, digits and single underscores; no leading digit, no `__`, no trailing `_`."""
    return len(name) <= IDENTIFIER_MAX_LENGTH and _IDENTIFIER.fullmatch(name) is not None


# ---------------------------------------------------------------------------------------------------------
# Reserved words and standard names
# ---------------------------------------------------------------------------------------------------------

_KEYWORDS = """
    ACTION END_ACTION ARRAY OF AT BY CASE END_CASE CONFIGURATION END_CONFIGURATION CONSTANT DO ELSE ELSIF
    EN ENO EXIT FALSE F_EDGE FOR END_FOR FROM FUNCTION END_FUNCTION FUNCTION_BLOCK END_FUNCTION_BLOCK IF
    THEN END_IF INITIAL_STEP NON_RETAIN NOT MOD AND OR XOR ON PROGRAM END_PROGRAM R_EDGE READ_ONLY
    READ_WRITE REPEAT UNTIL END_REPEAT RESOURCE END_RESOURCE RETAIN RETURN STEP END_STEP STRUCT END_STRUCT
    TASK TO TRANSITION END_TRANSITION TRUE TYPE END_TYPE VAR END_VAR VAR_INPUT VAR_OUTPUT VAR_IN_OUT
    VAR_TEMP VAR_EXTERNAL VAR_ACCESS VAR_CONFIG VAR_GLOBAL WHILE END_WHILE WITH
"""
# IL operators that are not also standard function names (ADD, GT, ... stay usable as function names).
_IL_OPERATORS = "LD LDN ST STN S R ANDN ORN XORN JMP JMPC JMPCN CAL CALC CALCN RET RETC RETCN"
_GENERIC = "ANY ANY_DERIVED ANY_ELEMENTARY ANY_MAGNITUDE ANY_NUM ANY_REAL ANY_INT ANY_BIT ANY_STRING ANY_DATE"
GENERIC_TYPES = frozenset(_GENERIC.split())


@dataclass(frozen=True, slots=True)
class ElementaryType:
    """An IEC elementary type: `kind` is one of bool, int, real, time, date, tod, dt, string, wstring;
    integer and bit-string types carry their value range."""

    name: str
    kind: str
    bits: int | None = None
    minimum: int | None = None
    maximum: int | None = None


def _integer(name: str, bits: int, *, signed: bool) -> ElementaryType:
    if signed:
        return ElementaryType(name, "int", bits, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return ElementaryType(name, "int", bits, 0, 2**bits - 1)


_TOD = ElementaryType("TOD", "tod")
_DT = ElementaryType("DT", "dt")
ELEMENTARY_TYPES: MappingProxyType[str, ElementaryType] = MappingProxyType(
    {
        "BOOL": ElementaryType("BOOL", "bool", 1, 0, 1),
        "SINT": _integer("SINT", 8, signed=True),
        "INT": _integer("INT", 16, signed=True),
        "DINT": _integer("DINT", 32, signed=True),
        "LINT": _integer("LINT", 64, signed=True),
        "USINT": _integer("USINT", 8, signed=False),
        "UINT": _integer("UINT", 16, signed=False),
        "UDINT": _integer("UDINT", 32, signed=False),
        "ULINT": _integer("ULINT", 64, signed=False),
        "BYTE": _integer("BYTE", 8, signed=False),
        "WORD": _integer("WORD", 16, signed=False),
        "DWORD": _integer("DWORD", 32, signed=False),
        "LWORD": _integer("LWORD", 64, signed=False),
        "REAL": ElementaryType("REAL", "real", 32),
        "LREAL": ElementaryType("LREAL", "real", 64),
        "TIME": ElementaryType("TIME", "time"),
        "DATE": ElementaryType("DATE", "date"),
        "TOD": _TOD,
        "TIME_OF_DAY": _TOD,
        "DT": _DT,
        "DATE_AND_TIME": _DT,
        "STRING": ElementaryType("STRING", "string"),
        "WSTRING": ElementaryType("WSTRING", "wstring"),
    }
)


def elementary_type(name: str) -> ElementaryType | None:
    """The elementary type called `name` (any case, TC6 element names such as `string` included)."""
    return ELEMENTARY_TYPES.get(name.upper())


RESERVED_WORDS = (
    frozenset(_KEYWORDS.split()) | frozenset(_IL_OPERATORS.split()) | GENERIC_TYPES | frozenset(ELEMENTARY_TYPES)
)


def is_reserved(name: str) -> bool:
    """Keywords of ST, IL and SFC and the type names; standard function and FB names are not reserved."""
    return name.upper() in RESERVED_WORDS


STANDARD_FUNCTION_BLOCKS = frozenset(
    ["SR", "RS", "R_TRIG", "F_TRIG", "CTU", "CTD", "CTUD", "TP", "TON", "TOF"]
    # Typed counters from the 3rd edition, shipped by matiec/Beremiz and OpenPLC.
    + [f"{fb}_{t}" for fb in ("CTU", "CTD", "CTUD") for t in ("DINT", "LINT", "UDINT", "ULINT")]
)

_FUNCTIONS = """
    ABS SQRT LN LOG EXP SIN COS TAN ASIN ACOS ATAN ADD MUL SUB DIV MOD EXPT MOVE
    SHL SHR ROR ROL AND OR XOR NOT SEL MAX MIN LIMIT MUX GT GE EQ LE LT NE
    LEN LEFT RIGHT MID CONCAT INSERT DELETE REPLACE FIND TRUNC
    ADD_TIME ADD_TOD_TIME ADD_DT_TIME SUB_TIME SUB_DATE_DATE SUB_TOD_TIME SUB_TOD_TOD SUB_DT_TIME SUB_DT_DT
    MUL_TIME DIV_TIME MULTIME DIVTIME CONCAT_DATE_TOD CONCAT_DATE CONCAT_TOD CONCAT_DT
    SPLIT_DATE SPLIT_TOD SPLIT_DT DAY_OF_WEEK
"""
STANDARD_FUNCTIONS = frozenset(_FUNCTIONS.split())
_CONVERSION = re.compile(r"[A-Z0-9_]+_TO_[A-Z0-9_]+", re.ASCII)


def is_standard_function(name: str) -> bool:
    """A standard function, including every `X_TO_Y` conversion (INT_TO_REAL, BCD_TO_UINT, ...)."""
    upper = name.upper()
    return upper in STANDARD_FUNCTIONS or _CONVERSION.fullmatch(upper) is not None


# ---------------------------------------------------------------------------------------------------------
# Literals
# ---------------------------------------------------------------------------------------------------------

_DEC = r"\d(?:_?\d)*"
_BASED = {
    2: re.compile(r"[01](?:_?[01])*"),
    8: re.compile(r"[0-7](?:_?[0-7])*"),
    16: re.compile(r"[0-9A-Fa-f](?:_?[0-9A-Fa-f])*"),
}
_SIGNED_DEC = re.compile(rf"([+-]?)({_DEC})")
_BASED_INT = re.compile(r"(2|8|16)#(.*)", re.DOTALL)
_REAL = re.compile(rf"[+-]?{_DEC}(?:\.{_DEC})?(?:[eE][+-]?{_DEC})?")
_TYPED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)#(.*)", re.DOTALL)
_DURATION_PART = re.compile(r"(\d+(?:_\d+)*)(?:\.(\d+(?:_\d+)*))?(d|h|ms|m|s|us|ns)", re.IGNORECASE)
_DURATION_UNITS = ("d", "h", "m", "s", "ms", "us", "ns")
_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_TIME_OF_DAY = re.compile(r"(\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?")
_REAL_MAX = {"REAL": 3.4028234663852886e38, "LREAL": 1.7976931348623157e308}

_PREFIXES = {
    "time": ("T", "TIME"),
    "date": ("D", "DATE"),
    "tod": ("TOD", "TIME_OF_DAY"),
    "dt": ("DT", "DATE_AND_TIME"),
}


def _shown(text: str) -> str:
    if text[:1] in ("'", '"'):
        return text  # a string literal shows its own quotes
    return f'"{text}"' if "'" in text else f"'{text}'"


def _example(t: ElementaryType) -> str:
    match t.kind:
        case "bool":
            return "write a truth value such as TRUE, FALSE, 1, 0 or BOOL#TRUE"
        case "int" if t.minimum is not None and t.minimum < 0:
            return f"write a whole number from {t.minimum} to {t.maximum}, such as 42, -7, 16#7F or {t.name}#5"
        case "int":
            return f"write a whole number from 0 to {t.maximum}, such as 42, 16#FF, 2#1010 or {t.name}#5"
        case "real":
            return "write a number such as 1.5, -0.25 or 1.0E-3"
        case "time":
            return "write a duration such as T#500ms, T#1h2m3s or T#-1.5s"
        case "date":
            return "write a date such as D#2024-01-31"
        case "tod":
            return "write a time of day such as TOD#12:30:00"
        case "dt":
            return "write a date and time such as DT#2024-01-31-12:30:00"
        case "string":
            return "write text in single quotes such as 'Hello', with $' for a quote and $$ for a dollar sign"
        case _:
            return 'write text in double quotes such as "Hello", with $" for a quote and $$ for a dollar sign'


def parse_integer_literal(text: str) -> int | None:
    """The value of an integer literal (`-7`, `1_000`, `16#FF`, `2#1010`, `8#17`), or None if malformed."""
    based = _BASED_INT.fullmatch(text)
    if based:
        base = int(based.group(1))
        digits = based.group(2)
        if not _BASED[base].fullmatch(digits):
            return None
        return int(digits.replace("_", ""), base)
    signed = _SIGNED_DEC.fullmatch(text)
    if signed:
        value = int(signed.group(2).replace("_", ""))
        return -value if signed.group(1) == "-" else value
    return None


def _split_prefix(text: str) -> tuple[str | None, str]:
    typed = _TYPED.fullmatch(text)
    if typed:
        return typed.group(1).upper(), typed.group(2)
    return None, text


def check_literal(type_name: str, text: str, string_length: int | None = None) -> str | None:
    """None when `text` is a valid literal of the elementary type `type_name`, else a sentence that says
    what is wrong and what a valid literal looks like. `string_length` is the declared STRING/WSTRING
    length. Raises ValueError for a name that is not an elementary type (check with `elementary_type`)."""
    t = elementary_type(type_name)
    if t is None:
        raise ValueError(f"{type_name} is not an elementary type")
    text = text.strip()
    if not text:
        return f"An empty value is not a {t.name} literal; {_example(t)}."
    match t.kind:
        case "int" | "bool":
            return _check_integer(t, text)
        case "real":
            return _check_real(t, text)
        case "time" | "date" | "tod" | "dt":
            return _check_temporal(t, text)
        case _:
            return _check_string(t, text, string_length)


def _wrong_prefix(t: ElementaryType, text: str, prefix: str) -> str:
    return f"{_shown(text)} is typed {prefix}, but the expected type is {t.name}; {_example(t)}."


def _check_integer(t: ElementaryType, text: str) -> str | None:
    prefix, body = _split_prefix(text)
    if prefix is not None and prefix != t.name:
        return _wrong_prefix(t, text, prefix)
    if t.kind == "bool" and body.upper() in ("TRUE", "FALSE"):
        return None
    value = parse_integer_literal(body)
    if value is None or (t.kind == "bool" and value not in (0, 1)):
        return f"{_shown(text)} is not a valid {t.name} literal; {_example(t)}."
    if body.startswith("-") and t.minimum == 0:
        return f"{_shown(text)} is negative, but {t.name} holds no negative values; {_example(t)}."
    assert t.minimum is not None and t.maximum is not None
    if not t.minimum <= value <= t.maximum:
        return f"{_shown(text)} is out of range for {t.name}, which holds {t.minimum} to {t.maximum}; {_example(t)}."
    return None


def _check_real(t: ElementaryType, text: str) -> str | None:
    prefix, body = _split_prefix(text)
    if prefix is not None and prefix != t.name:
        return _wrong_prefix(t, text, prefix)
    if not _REAL.fullmatch(body):
        return f"{_shown(text)} is not a valid {t.name} literal; {_example(t)}."
    value = float(body.replace("_", ""))
    if not math.isfinite(value) or abs(value) > _REAL_MAX[t.name]:
        return f"{_shown(text)} is out of range for {t.name}; {_example(t)}."
    return None


def _check_temporal(t: ElementaryType, text: str) -> str | None:
    prefix, body = _split_prefix(text)
    accepted = _PREFIXES[t.kind]
    if prefix is None:
        return f"{_shown(text)} is not a {t.name} literal: it needs the {accepted[0]}# prefix; {_example(t)}."
    if prefix not in accepted:
        return _wrong_prefix(t, text, prefix)
    match t.kind:
        case "time":
            reason = _duration_problem(body)
        case "date":
            reason = _date_problem(body)
        case "tod":
            reason = _time_of_day_problem(body)
        case _:
            reason = _date_and_time_problem(body)
    return None if reason is None else f"{_shown(text)} is not a valid {t.name} literal: {reason}; {_example(t)}."


def _duration_problem(body: str) -> str | None:
    if body.startswith("-"):
        body = body[1:]
    pos, last_rank, fractional = 0, -1, False
    if not body:
        return "the duration is empty"
    while pos < len(body):
        if pos and body[pos] == "_":
            pos += 1
            if pos == len(body):
                return "a duration cannot end with _"
        part = _DURATION_PART.match(body, pos)
        if part is None:
            return f"{_shown(body[pos:])} is not a number followed by a unit (d, h, m, s, ms)"
        if fractional:
            return "only the last unit may have a fractional part"
        rank = _DURATION_UNITS.index(part.group(3).lower())
        if rank <= last_rank:
            return "units must appear once each, largest first (d, h, m, s, ms)"
        last_rank, fractional, pos = rank, part.group(2) is not None, part.end()
    return None


def _date_problem(body: str) -> str | None:
    match = _DATE.fullmatch(body)
    if match is None:
        return "a date is written YYYY-MM-DD"
    try:
        datetime.date(*(int(g) for g in match.groups()))
    except ValueError:
        return f"{body} is not a calendar date"
    return None


def _time_of_day_problem(body: str) -> str | None:
    match = _TIME_OF_DAY.fullmatch(body)
    if match is None:
        return "a time of day is written hh:mm:ss with optional fractions of a second"
    hours, minutes, seconds = (int(g) for g in match.groups())
    if hours > 23 or minutes > 59 or seconds > 59:
        return f"{body} is not a time of day (hours 0-23, minutes and seconds 0-59)"
    return None


def _date_and_time_problem(body: str) -> str | None:
    date, sep, time_of_day = body.rpartition("-")
    if not sep:
        return "a date and time is written YYYY-MM-DD-hh:mm:ss"
    return _date_problem(date) or _time_of_day_problem(time_of_day)


_STRING_ESCAPES = frozenset("$'\"LNPRTlnprt")


def string_literal_length(literal: str, *, wide: bool = False) -> int | str:
    """The number of characters a quoted STRING (or, with `wide`, WSTRING) literal denotes, or a reason
    why it is malformed."""
    quote = '"' if wide else "'"
    if len(literal) < 2 or literal[0] != quote or literal[-1] != quote:
        return f"the text must be enclosed in {'double' if wide else 'single'} quotes"
    inner, length, pos = literal[1:-1], 0, 0
    hex_digits = 4 if wide else 2
    while pos < len(inner):
        char = inner[pos]
        if char == quote:
            return f"an unescaped {quote} ends the text early (write ${quote} for a quote)"
        if char == "$":
            escape = inner[pos + 1 : pos + 2]
            code = inner[pos + 1 : pos + 1 + hex_digits]
            if escape and escape in _STRING_ESCAPES:
                pos += 2
            elif len(code) == hex_digits and re.fullmatch(r"[0-9A-Fa-f]+", code):
                pos += 1 + hex_digits
            else:
                return f"$ starts an escape: $$, ${quote}, $L, $N, $P, $R, $T or ${'h' * hex_digits} (hex)"
        else:
            pos += 1
        length += 1
    return length


def _check_string(t: ElementaryType, text: str, string_length: int | None) -> str | None:
    prefix, body = _split_prefix(text)
    if prefix is not None and prefix != t.name:
        return _wrong_prefix(t, text, prefix)
    length = string_literal_length(body, wide=t.kind == "wstring")
    if isinstance(length, str):
        return f"{_shown(text)} is not a valid {t.name} literal: {length}; {_example(t)}."
    if string_length is not None and length > string_length:
        return f"{_shown(text)} has {length} characters, more than the declared {t.name}[{string_length}]."
    return None


# ---------------------------------------------------------------------------------------------------------
# Located addresses
# ---------------------------------------------------------------------------------------------------------

_ADDRESS = re.compile(r"%([A-Za-z])([A-Za-z])?(.*)", re.DOTALL)
_ADDRESS_PATH = re.compile(r"\d+(?:\.\d+)*")
ADDRESS_AREAS = MappingProxyType({"I": "input", "Q": "output", "M": "memory"})
ADDRESS_SIZES = MappingProxyType({"X": 1, "B": 8, "W": 16, "D": 32, "L": 64})


@dataclass(frozen=True, slots=True)
class Address:
    """A located address: area I/Q/M, size X/B/W/D/L or None, and the numeric path; an empty path is the
    `%I*` form whose location is completed in VAR_CONFIG."""

    area: str
    size: str | None
    path: tuple[int, ...]

    @property
    def incomplete(self) -> bool:
        return not self.path

    def __str__(self) -> str:
        rest = ".".join(str(n) for n in self.path) if self.path else "*"
        return f"%{self.area}{self.size or ''}{rest}"


def parse_address(text: str) -> Address | str:
    """Parse `%IX0.0`, `%QW3`, `%MD10`, `%I*` and the like; a string result is the reason it is malformed."""
    match = _ADDRESS.fullmatch(text.strip())
    if match is None:
        return f"{_shown(text)} is not a located address: it must start with % and an area letter, as in %IX0.0"
    area, size, rest = match.group(1).upper(), (match.group(2) or "").upper(), match.group(3)
    if area not in ADDRESS_AREAS:
        return f"{_shown(text)} has the area {area}; the area is I (input), Q (output) or M (memory)"
    if size and size not in ADDRESS_SIZES:
        return f"{_shown(text)} has the size {size}; the size is X, B, W, D or L, or nothing for a bit"
    if rest == "*":
        return Address(area, size or None, ())
    if not _ADDRESS_PATH.fullmatch(rest):
        return f"{_shown(text)} needs numbers separated by dots after the area and size, as in %QX0.1 or %MW10"
    return Address(area, size or None, tuple(int(n) for n in rest.split(".")))


# ---------------------------------------------------------------------------------------------------------
# Structured Text tokens
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lexeme:
    """One ST token. `kind` is identifier, number, literal (typed: T#20ms, INT#5, Color#Red), string,
    address (%IX0.0), pragma ({...}) or symbol; comments and white space are not tokens."""

    kind: str
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class IdentifierToken:
    """An identifier in ST text. `member` means it follows a dot (a field or FB output of what precedes
    it), `formal` that it names a parameter in a call (`IN :=`, `Q =>` inside parentheses), `keyword`
    that it is a reserved word. `line` and `column` count from 1."""

    text: str
    start: int
    end: int
    line: int
    column: int
    member: bool
    formal: bool
    keyword: bool


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(rf"\d+#[0-9A-Fa-f_]+|{_DEC}(?:\.{_DEC})?(?:[eE][+-]?{_DEC})?")
_DIRECT_ADDRESS = re.compile(r"%[IQMiqm][XBWDLxbwdl]?(?:\*|\d+(?:\.\d+)*)?")
_SYMBOLS = (":=", "=>", "<=", ">=", "<>", "**", "..")
_TEMPORAL_BODY = {
    "time": re.compile(r"[+-]?[0-9A-Za-z_.]*"),
    "date": re.compile(r"[0-9:._-]*"),
    "tod": re.compile(r"[0-9:._]*"),
}
_TEMPORAL_PREFIX = {
    "T": "time",
    "TIME": "time",
    "LTIME": "time",
    "D": "date",
    "DATE": "date",
    "LDATE": "date",
    "DT": "date",
    "DATE_AND_TIME": "date",
    "LDT": "date",
    "TOD": "tod",
    "TIME_OF_DAY": "tod",
    "LTOD": "tod",
}
_TYPED_VALUE = re.compile(rf"[+-]?(?:\d+#[0-9A-Fa-f_]+|{_DEC}(?:\.{_DEC})?(?:[eE][+-]?{_DEC})?|[A-Za-z_][A-Za-z0-9_]*)")


def _skip_quoted(text: str, pos: int) -> int:
    quote, pos = text[pos], pos + 1
    while pos < len(text):
        if text[pos] == "$":
            pos += 2
        elif text[pos] == quote:
            return pos + 1
        else:
            pos += 1
    return len(text)


def _skip_nested(text: str, pos: int, opening: str, closing: str) -> int:
    depth = 0
    while pos < len(text):
        if text.startswith(opening, pos):
            depth, pos = depth + 1, pos + len(opening)
        elif text.startswith(closing, pos):
            depth, pos = depth - 1, pos + len(closing)
            if depth == 0:
                return pos
        else:
            pos += 1
    return len(text)


def lex_st(text: str) -> Iterator[Lexeme]:
    """Every token of ST text in order. Tolerant: an unterminated comment, string or pragma runs to the
    end of the text, and a character that fits nothing becomes a one-character symbol."""
    pos, size = 0, len(text)
    while pos < size:
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        if text.startswith("(*", pos):
            pos = _skip_nested(text, pos, "(*", "*)")
            continue
        if text.startswith("//", pos):
            newline = text.find("\n", pos)
            pos = size if newline < 0 else newline
            continue
        if text.startswith("/*", pos):
            close = text.find("*/", pos + 2)
            pos = size if close < 0 else close + 2
            continue
        start = pos
        if char == "{":
            # Beremiz writes C code in {{ ... }} pragmas, so braces nest.
            pos = _skip_nested(text, pos, "{", "}")
            yield Lexeme("pragma", text[start:pos], start, pos)
        elif char in "'\"":
            pos = _skip_quoted(text, pos)
            yield Lexeme("string", text[start:pos], start, pos)
        elif char == "%" and (address := _DIRECT_ADDRESS.match(text, pos)) and address.end() > pos + 2:
            pos = address.end()
            yield Lexeme("address", text[start:pos], start, pos)
        elif word := _WORD.match(text, pos):
            pos = word.end()
            if pos < size and text[pos] == "#":
                pos = _typed_literal_end(text, word.group().upper(), pos + 1)
                yield Lexeme("literal", text[start:pos], start, pos)
            else:
                yield Lexeme("identifier", text[start:pos], start, pos)
        elif number := _NUMBER.match(text, pos):
            pos = number.end()
            yield Lexeme("number", text[start:pos], start, pos)
        else:
            symbol = next((s for s in _SYMBOLS if text.startswith(s, pos)), char)
            pos += len(symbol)
            yield Lexeme("symbol", symbol, start, pos)


def _typed_literal_end(text: str, prefix: str, pos: int) -> int:
    if pos < len(text) and text[pos] in "'\"":
        return _skip_quoted(text, pos)
    temporal = _TEMPORAL_PREFIX.get(prefix)
    pattern = _TEMPORAL_BODY[temporal] if temporal else _TYPED_VALUE
    match = pattern.match(text, pos)
    return match.end() if match else pos


def tokenize_st(text: str) -> Iterator[IdentifierToken]:
    """The identifiers of ST text with their positions, skipping comments (`(* *)` nested, `//`, `/* */`),
    pragmas, strings, numbers and typed literals (`T#20ms`, `INT#5`, `16#FF`)."""
    lexemes = list(lex_st(text))
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    depth = 0
    for index, lexeme in enumerate(lexemes):
        if lexeme.kind == "symbol":
            if lexeme.text == "(":
                depth += 1
            elif lexeme.text == ")":
                depth = max(depth - 1, 0)
            continue
        if lexeme.kind != "identifier":
            continue
        before = lexemes[index - 1] if index else None
        after = lexemes[index + 1] if index + 1 < len(lexemes) else None
        line = bisect.bisect_right(line_starts, lexeme.start)
        yield IdentifierToken(
            text=lexeme.text,
            start=lexeme.start,
            end=lexeme.end,
            line=line,
            column=lexeme.start - line_starts[line - 1] + 1,
            member=before is not None and before.kind == "symbol" and before.text == ".",
            formal=depth > 0 and after is not None and after.kind == "symbol" and after.text in (":=", "=>"),
            keyword=is_reserved(lexeme.text),
        )


def identifiers_used(st_text: str) -> set[str]:
    """The lowercased names ST text refers to: no keywords, no members after a dot (`a.b` uses `a`), and
    no formal parameter names in calls (`TON1(IN := x)` uses `TON1` and `x`)."""
    return {token.text.lower() for token in tokenize_st(st_text) if not (token.keyword or token.member or token.formal)}
