"""A PLCopen TC6 XML 2.01 project file as a document: loading, deterministic writing, fingerprint, schema.

A project file is kept as an lxml tree, edited in place, so everything the service does not model (graphical
FBD/LD/SFC bodies, addData, comments, CDATA sections) is written back byte for byte. `load` parses with a
hardened parser (no network, no entities, no DOCTYPE) and remembers what the tree cannot hold (the XML
declaration as written, the line ending, a byte order mark, the whitespace around the root) so that
`serialize` restores it: an unchanged Beremiz or OpenPLC file comes back byte-identical. `validate` checks
the tree against the TC6 2.01 XSD, with lines that point into the written file.

A `ProjectDocument` is treated as immutable once loaded: its element index (`projects.plcopen.elements`)
and its schema verdict are cached, and `projects.operations.apply` works on a copy.
"""

from __future__ import annotations

import codecs
import copy
import hashlib
import re
import threading
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Final

from lxml import etree

from projects.plcopen.elements import ElementIndex
from projects.plcopen.tc6 import NS

SCHEMA_PATH: Path = Path(__file__).resolve().parent.parent / "schema" / "tc6_xml_v201.xsd"

_OTHER_DIALECTS: Final = {
    "http://www.plcopen.org/xml/tc6_0200": "PLCopen TC6 XML 2.0 (as exported by CODESYS, TwinCAT or Machine Expert)",
    "http://www.plcopen.org/xml/tc6.xsd": "PLCopen TC6 XML 1.0",
}


class ProjectFormatError(ValueError):
    """The bytes are not a PLCopen TC6 2.01 project this service can load; the message says why."""


@dataclass(frozen=True, slots=True)
class SchemaError:
    """One XSD violation; `line` is the line in the serialized file (0 when unknown)."""

    line: int
    message: str


def fingerprint(data: bytes) -> str:
    """The sha256 hex digest of a file's bytes; a changed fingerprint means the file changed."""
    return hashlib.sha256(data).hexdigest()


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
