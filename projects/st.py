"""Structured Text read by a real parser: the IEC 61131-3 ST grammar of tree-sitter
(`tree-sitter-iec61131-3-st`), error-tolerant, with exact positions.

A PLCopen file holds ST in pieces that are not whole source files: a POU's body, an action's or a
transition's body, an SFC step's inline action (each a statement list, the declarations being XML) and an
SFC transition's inline condition (an expression, or `:= expression;` as some tools write it). `analyse`
wraps each piece in a synthetic `PROGRAM ... END_PROGRAM` so the grammar parses it, then maps every
position back to the piece's own line and column (both from 1, columns counted in characters).

What the grammar does not know is hidden before parsing, character for character so positions do not
move: comments (nested `(* *)`, `//`, `/* */`) and pragmas (Beremiz's C code in `{{ }}` included) become
spaces, and located addresses (`%IX0.0`) and enumerated typed literals (`Color#Red`), which the grammar
refuses inside statements, become placeholder names the checks skip. The result of a text is immutable and
remembered by the text's SHA-256 in a bounded cache, so a stage call re-parses only the bodies it changed.

The tree gives: syntax problems (each ERROR or MISSING node; an error on a statement of a known vendor
dialect, such as CODESYS's `S=` or labels and JMP, is marked `vendor` so it is reported as an advisory, not
as a problem), and every name the code uses with its role (read, write, call).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import tree_sitter_iec61131_3_st
from tree_sitter import Language, Node, Parser, Query, QueryCursor

from projects import iec

Kind = Literal["statements", "condition"]
Role = Literal["read", "write", "call"]

LANGUAGE = Language(tree_sitter_iec61131_3_st.language())
CACHE_SIZE = 8192
EXCERPT_LENGTH = 40

_HEAD = "PROGRAM forge_st_piece\n"
_TAIL = "\nEND_PROGRAM\n"
# A condition becomes the right side of an assignment on lines of its own, so its columns do not move.
_CONDITION_HEAD = _HEAD + "forge_st_condition :=\n"
_TRANSITION_HEAD = _HEAD + "forge_st_condition\n"
_CONDITION_TAIL = "\n;" + _TAIL
_SYNTHETIC = "forge_st_condition"

# Statements real tools accept that IEC 61131-3 ST does not have: CODESYS's set/reset assignments
# (`Q S= x;`), jump labels and JMP, its `__` operators (`__TRY`, `__QUERYINTERFACE`, ...).
_VENDOR = re.compile(r"\b[SR]\s*=(?!=)|\bJMP\b|\b__[A-Za-z]+|^\s*[A-Za-z_]\w*\s*:(?!=)", re.MULTILINE)

_TEMPORAL_PREFIXES = frozenset(
    ["T", "TIME", "LTIME", "D", "DATE", "LDATE", "DT", "DATE_AND_TIME", "LDT", "TOD", "TIME_OF_DAY", "LTOD"]
) | frozenset(iec.ELEMENTARY_TYPES)


@dataclass(frozen=True, slots=True)
class SyntaxIssue:
    """An ERROR or MISSING node: `missing` is what the parser expected and did not find (`;`, END_IF), or
    None for text it could not fit; `vendor` that the text is a known vendor-dialect statement."""

    line: int
    column: int
    excerpt: str
    missing: str | None
    vendor: bool


@dataclass(frozen=True, slots=True)
class NameUse:
    """A name the code uses where a variable, function or instance may stand (not members after a dot,
    not the formal parameter names of a call), with its role. `checked` is False inside an ERROR node,
    where the role is a guess: such uses count for "used" but are not judged."""

    name: str
    line: int
    column: int
    role: Role
    checked: bool = True


@dataclass(frozen=True, slots=True)
class Analysis:
    issues: tuple[SyntaxIssue, ...]
    uses: tuple[NameUse, ...]
    pragma_words: frozenset[str]


_local = threading.local()
_cache: OrderedDict[tuple[str, str], Analysis] = OrderedDict()
_cache_lock = threading.Lock()


def _parser() -> Parser:
    # A Parser is not safe to share between threads; one per thread, made once.
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = Parser(LANGUAGE)
    return parser


def analyse(text: str, kind: Kind = "statements") -> Analysis:
    """The syntax issues and the name uses of one ST piece (`kind`: a statement list, or an SFC
    transition's condition), remembered by the text's SHA-256."""
    key = (kind, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    found = _analyse(text, kind)
    with _cache_lock:
        _cache[key] = found
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return found


def parse_count() -> int:
    """How many texts the cache holds (for tests and benches)."""
    with _cache_lock:
        return len(_cache)


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


# ---------------------------------------------------------------------------------------------------------
# Preparing and parsing
# ---------------------------------------------------------------------------------------------------------


def _prepared(text: str) -> tuple[str, list[tuple[int, int]], frozenset[str]]:
    """The text with comments and pragmas blanked and addresses and enumerated literals replaced by
    placeholder names (same length, line breaks kept), the masked (start, end) character ranges, and the
    words of the pragmas (Beremiz's C pragmas reach variables by name)."""
    chars = list(text)
    masked: list[tuple[int, int]] = []
    words: set[str] = set()
    covered = 0
    lexemes = list(iec.lex_st(text))
    for index, lexeme in enumerate(lexemes):
        _blank(chars, covered, lexeme.start)  # what lies between tokens: white space and comments
        covered = lexeme.end
        if lexeme.kind == "pragma":
            words.update(w.casefold() for w in re.findall(r"[A-Za-z_]\w*", lexeme.text))
            _blank(chars, lexeme.start, lexeme.end)
        elif lexeme.kind == "address" or (
            lexeme.kind == "literal" and _enumerated(lexeme.text) and "\n" not in lexeme.text
        ):
            chars[lexeme.start : lexeme.end] = "Z" * (lexeme.end - lexeme.start)
            masked.append((lexeme.start, lexeme.end))
        elif lexeme.text == "=>" and index and _unbound_output(lexemes, index):
            _blank_unbound_output(chars, lexemes, index)
    _blank(chars, covered, len(chars))
    return "".join(chars), masked, frozenset(words)


def _unbound_output(lexemes: list[iec.Lexeme], index: int) -> bool:
    """`ET =>` with nothing after it: an output left unconnected in a call, which IEC tools accept and the
    grammar does not."""
    after = lexemes[index + 1] if index + 1 < len(lexemes) else None
    return (
        lexemes[index - 1].kind == "identifier"
        and after is not None
        and after.kind == "symbol"
        and after.text in (",", ")")
    )


def _blank_unbound_output(chars: list[str], lexemes: list[iec.Lexeme], index: int) -> None:
    """Blank `name =>` and one comma that separates it from its neighbours, so the call stays well formed."""
    start, end = lexemes[index - 1].start, lexemes[index].end
    before = lexemes[index - 2] if index >= 2 else None
    after = lexemes[index + 1]
    if before is not None and before.text == ",":
        start = before.start
    elif after.text == ",":
        end = after.end
    _blank(chars, start, end)


def _enumerated(literal: str) -> bool:
    prefix, _, value = literal.partition("#")
    return prefix.upper() not in _TEMPORAL_PREFIXES and value[:1].isalpha() and not value[:1].isdigit()


def _blank(chars: list[str], start: int, end: int) -> None:
    for i in range(start, end):
        if chars[i] not in "\n\r":
            chars[i] = " "


def _analyse(text: str, kind: Kind) -> Analysis:
    prepared, masked, pragma_words = _prepared(text)
    found = _parsed(text, prepared, masked, pragma_words, kind)
    if kind == "condition" and found.issues:
        # Some tools write a transition as a statement that assigns the transition's name
        # (`Done := Level = 0;`): the reading with fewer issues is the one meant.
        statements = _parsed(text, prepared, masked, pragma_words, "statements")
        if len(statements.issues) < len(found.issues):
            return statements
    return found


def _parsed(
    text: str, prepared: str, masked: list[tuple[int, int]], pragma_words: frozenset[str], kind: Kind
) -> Analysis:
    if kind == "condition":
        head = _TRANSITION_HEAD if prepared.lstrip().startswith(":=") else _CONDITION_HEAD
        tail = _CONDITION_TAIL
    else:
        head, tail = _HEAD, _TAIL
    source = (head + prepared + tail).encode("utf-8", "surrogatepass")
    tree = _parser().parse(source)
    piece = _Piece(prepared, text, head.count("\n"), masked)
    issues: list[SyntaxIssue] = []
    uses: list[NameUse] = []
    _walk(tree.root_node, piece, issues, uses)
    # On a line the grammar's dialect does not cover, the tree's roles are guesses: such names count as used
    # but are not judged.
    vendor_lines = {issue.line for issue in issues if issue.vendor}
    if vendor_lines:
        uses = [NameUse(u.name, u.line, u.column, u.role, False) if u.line in vendor_lines else u for u in uses]
    return Analysis(tuple(issues), tuple(uses), pragma_words)


class _Piece:
    """Maps a node's position in the wrapped source back to the piece (line and column from 1)."""

    def __init__(self, prepared: str, original: str, first_row: int, masked: list[tuple[int, int]]) -> None:
        self.lines = prepared.split("\n")
        self.original_lines = original.split("\n")
        self.first_row = first_row
        self.masked_starts = {start for start, _ in masked}
        self.line_offsets = [0]
        for line in self.lines[:-1]:
            self.line_offsets.append(self.line_offsets[-1] + len(line) + 1)

    def position(self, row: int, byte_column: int) -> tuple[int, int]:
        line = row - self.first_row
        if line < 0:
            return 1, 1
        if line >= len(self.lines):
            # After the piece (in the synthetic END_PROGRAM): the end of its last line.
            return len(self.lines), len(self.lines[-1]) + 1
        encoded = self.lines[line].encode("utf-8", "surrogatepass")
        column = len(encoded[:byte_column].decode("utf-8", "ignore"))
        return line + 1, column + 1

    def offset(self, line: int, column: int) -> int:
        return self.line_offsets[line - 1] + column - 1

    def excerpt(self, line: int, column: int) -> str:
        """The original line around the position, at most EXCERPT_LENGTH characters."""
        text = self.original_lines[line - 1] if line <= len(self.original_lines) else ""
        start = max(0, min(column - 1 - EXCERPT_LENGTH // 2, len(text) - EXCERPT_LENGTH))
        return text[start : start + EXCERPT_LENGTH].strip()


# ---------------------------------------------------------------------------------------------------------
# Reading the tree
# ---------------------------------------------------------------------------------------------------------


def _walk(node: Node, piece: _Piece, issues: list[SyntaxIssue], uses: list[NameUse]) -> None:
    stack: list[tuple[Node, Role, bool]] = [(node, "read", True)]
    while stack:
        current, role, checked = stack.pop()
        kind = current.type
        if current.is_missing:
            line, column = piece.position(*current.start_point)
            issues.append(SyntaxIssue(line, column, piece.excerpt(line, column), kind, False))
            continue
        if current.is_error:
            line, column = piece.position(*current.start_point)
            # The whole line decides: the ERROR node of a label holds only what follows its name.
            vendor = _VENDOR.search(piece.lines[line - 1]) is not None
            issues.append(SyntaxIssue(line, column, piece.excerpt(line, column), None, vendor))
            stack.extend((child, "read", False) for child in reversed(current.children))
            continue
        if kind == "identifier":
            _use(current, role, checked, piece, uses)
            continue
        children = _roles(current, role)
        stack.extend((child, child_role, checked) for child, child_role in reversed(children))


def _use(node: Node, role: Role, checked: bool, piece: _Piece, uses: list[NameUse]) -> None:
    name = (node.text or b"").decode("utf-8", "replace")
    if name == _SYNTHETIC:
        return
    line, column = piece.position(*node.start_point)
    if line > len(piece.lines) or piece.offset(line, column) in piece.masked_starts:
        return
    uses.append(NameUse(name, line, column, role, checked))


def _roles(node: Node, role: Role) -> list[tuple[Node, Role]]:
    """The children of a node worth visiting, each with the role a name there plays."""
    kind = node.type
    if kind == "program_declaration":
        return [(c, "read") for i, c in _named(node) if node.field_name_for_child(i) != "name"]
    if kind in ("assignment_statement", "reference_assignment_statement"):
        return _fields(node, left="write", right="read")
    if kind == "for_statement":
        return [(c, "write" if node.field_name_for_child(i) == "control" else "read") for i, c in _named(node)]
    if kind == "member_access_expression":
        return _fields(node, object=role)
    if kind == "index_expression":
        return [(c, role if node.field_name_for_child(i) == "object" else "read") for i, c in _named(node)]
    if kind == "call_expression":
        function = node.child_by_field_name("function")
        children: list[tuple[Node, Role]] = []
        if function is not None:
            children.append((function, "call" if function.type == "identifier" else "read"))
        arguments = node.child_by_field_name("arguments")
        if arguments is not None:
            children.append((arguments, "read"))
        return children
    if kind == "named_argument":
        value = node.child_by_field_name("value")
        writes = any(child.type == "=>" for child in node.children)
        return [] if value is None else [(value, "write" if writes else "read")]
    if kind == "typed_literal":
        return []
    return [(child, "read") for _, child in _named(node)]


def _named(node: Node) -> list[tuple[int, Node]]:
    return [(i, child) for i, child in enumerate(node.children) if child.is_named or child.is_error or child.is_missing]


def _fields(node: Node, **roles: Role) -> list[tuple[Node, Role]]:
    found: list[tuple[Node, Role]] = []
    for i, child in _named(node):
        field = node.field_name_for_child(i)
        if field in roles:
            found.append((child, roles[field]))
        elif child.is_error or child.is_missing:
            found.append((child, "read"))
    return found


def tree_shape(text: str, kind: Kind = "statements") -> str:
    """The parse tree of a piece as an S-expression of node types (no text), to compare two parses."""
    prepared, _, _ = _prepared(text)
    head = _CONDITION_HEAD if kind == "condition" else _HEAD
    tail = _CONDITION_TAIL if kind == "condition" else _TAIL
    return str(_parser().parse((head + prepared + tail).encode("utf-8", "surrogatepass")).root_node)


# ---------------------------------------------------------------------------------------------------------
# Highlighting
# ---------------------------------------------------------------------------------------------------------

# The grammar's highlight captures (`keyword.control`, `string.special`, ...) by their first word; the
# console styles these (console/static/forge/diff.css, classes st-<word>).
HIGHLIGHT_CLASSES = frozenset(
    [
        "keyword",
        "function",
        "operator",
        "number",
        "string",
        "boolean",
        "type",
        "comment",
        "attribute",
        "constant",
        "parameter",
        "variable",
        "property",
        "field",
        "punctuation",
    ]
)
_highlights: Query | None = None
_highlights_lock = threading.Lock()


def _highlight_query() -> Query:
    global _highlights
    with _highlights_lock:
        if _highlights is None:
            source = tree_sitter_iec61131_3_st.HIGHLIGHTS_QUERY
            if source is None:
                raise RuntimeError("tree-sitter-iec61131-3-st ships no highlight query: reinstall it from the lock")
            _highlights = Query(LANGUAGE, source)
        return _highlights


def highlight(text: str) -> list[list[tuple[str, str]]]:
    """The lines of an ST statement list (as `text.split("\\n")` cuts them), each as (class, text) runs
    that join to the line: the class is one of HIGHLIGHT_CLASSES, or "" for plain text. Comments and
    pragmas, which the parse does not see, are classed from the tokenizer."""
    prepared, masked, _ = _prepared(text)
    source = (_HEAD + prepared + _TAIL).encode("utf-8", "surrogatepass")
    tree = _parser().parse(source)
    piece = _Piece(prepared, text, _HEAD.count("\n"), masked)
    classes = [""] * len(text)
    spans: list[tuple[int, int, str]] = []
    for name, nodes in QueryCursor(_highlight_query()).captures(tree.root_node).items():
        word = name.split(".", 1)[0]
        if word not in HIGHLIGHT_CLASSES:
            continue
        for node in nodes:
            start = piece.offset(*piece.position(*node.start_point))
            end = piece.offset(*piece.position(*node.end_point))
            if node.start_point.row >= piece.first_row and start < end:
                spans.append((start, min(end, len(text)), word))
    # The widest first, so a token's own class wins over the construct around it.
    for start, end, word in sorted(spans, key=lambda span: span[0] - span[1]):
        classes[start:end] = [word] * (end - start)
    covered = 0
    for lexeme in iec.lex_st(text):
        _paint_gap(text, classes, covered, lexeme.start)
        covered = lexeme.end
        if lexeme.kind == "pragma":
            classes[lexeme.start : lexeme.end] = ["attribute"] * (lexeme.end - lexeme.start)
        elif lexeme.kind == "address" or lexeme.start in piece.masked_starts:
            classes[lexeme.start : lexeme.end] = ["constant"] * (lexeme.end - lexeme.start)
    _paint_gap(text, classes, covered, len(text))
    lines: list[list[tuple[str, str]]] = []
    offset = 0
    for line in text.split("\n"):
        runs: list[tuple[str, str]] = []
        for i, char in enumerate(line, start=offset):
            if runs and runs[-1][0] == classes[i]:
                runs[-1] = (classes[i], runs[-1][1] + char)
            else:
                runs.append((classes[i], char))
        lines.append(runs)
        offset += len(line) + 1
    return lines


def _paint_gap(text: str, classes: list[str], start: int, end: int) -> None:
    """What lies between two tokens is white space and comments: from its first to its last visible
    character, a comment (with the spaces inside it)."""
    gap = text[start:end]
    first = len(gap) - len(gap.lstrip())
    last = len(gap.rstrip())
    classes[start:end] = [""] * first + ["comment"] * max(0, last - first) + [""] * (len(gap) - max(first, last))
