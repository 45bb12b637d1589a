"""Opt-in interoperability checks over PLCopen files that are not part of the repository.

The repository carries only projects written for it (tests/fixtures/plcopen). Exports of other tools
(Beremiz, OpenPLC, other editors of the TC6 family) are other people's work and stay out of it; name a
folder of them to run the checks that matter for interoperability over every `*.xml` file it holds
(not its subfolders):

    FORGE_INTEROP_SAMPLES=/path/to/folder .venv/bin/python -m pytest tests/projects/test_interop.py -rs

Without the variable every test here is skipped with a reason saying so. A variable naming a folder that
does not exist, or one without `*.xml` files, fails: asked for a check, the run must not pass silently.

Each file is one case of each test, and a file is judged as registration judges it
(`projects.services.checked_document`):

* A file registration would accept (TC6 2.01, schema-valid) must come back byte for byte from
  `load` / `serialize` (the writer keeps declaration, line endings, BOM and CDATA), and serialize the
  same again.
* A file registration refuses is not a failure of this test: refusing it is the service's answer. For it
  the round-trip test is skipped with the refusal as the reason (run with `-rs` to read them), and the
  refusal test checks that the message is the one an operator sees: "not a PLCopen TC6 2.01 project"
  with the loader's reason, or the first schema error's line and message with the count of the others.
  A schema-invalid file that loads must still re-serialize to the same content (only whitespace inside
  tags may change) and the same bytes the second time.
* The read queries (overview, find with its cursors, list_variables with its cursors, get_element of
  every element id, check) must answer JSON on every file that loads, valid or not, as a client may
  read a file another tool broke: counts agree, paging visits every element once, every id resolves
  case-insensitively, and every finding has a known code and severity (schema errors included).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from lxml import etree

from projects import findings
from projects.plcopen import documents, elements, queries
from projects.services import ProjectRefused, checked_document

VARIABLE = "FORGE_INTEROP_SAMPLES"
HOW = f"set {VARIABLE} to a folder of PLCopen *.xml files to run the interoperability checks over them"


def interop_params() -> list:
    """One param per `*.xml` file of the named folder; a skipped or failing one when there is none."""
    folder = os.environ.get(VARIABLE, "").strip()
    if not folder:
        return [pytest.param(None, marks=pytest.mark.skip(reason=HOW), id="not-configured")]
    files = sorted(Path(folder).glob("*.xml")) if Path(folder).is_dir() else []
    if not files:
        # A param the test itself fails on, naming the folder: see interop_file().
        return [pytest.param(Path(folder), id="no-files")]
    return [pytest.param(path, id=path.stem) for path in files]


def interop_file(path: Path) -> bytes:
    assert path.is_file(), f"{VARIABLE}={path} is not a folder holding *.xml files"
    return path.read_bytes()


def refusal(raw: bytes) -> str | None:
    """What registration answers for these bytes: None when it accepts them, else its message."""
    try:
        checked_document(raw)
    except ProjectRefused as refused:
        return str(refused)
    return None


def loaded(raw: bytes) -> documents.ProjectDocument | None:
    """The document, or None for a file that does not load (registration refuses it, as the round-trip
    test checks), so the reads have nothing to answer on."""
    try:
        return documents.load(raw)
    except documents.ProjectFormatError as exc:
        assert refusal(raw) == f"not a PLCopen TC6 2.01 project: {exc}"
        return None


@pytest.mark.parametrize("path", interop_params())
def test_each_file_comes_back_byte_for_byte_or_is_refused_with_its_reason(path):
    raw = interop_file(path)
    refused = refusal(raw)
    if refused is None:
        out = documents.serialize(documents.load(raw))
        assert out == raw
        assert documents.serialize(documents.load(out)) == out
    else:
        check_refused_file(raw, refused)


def check_refused_file(raw: bytes, refused: str) -> None:
    """A file registration refuses: the refusal names its first schema error (or why it does not load), and
    what the file says survives a rewrite."""
    try:
        document = documents.load(raw)
    except documents.ProjectFormatError as exc:
        assert refused == f"not a PLCopen TC6 2.01 project: {exc}"
        return

    errors = documents.validate(document)
    assert errors, "registration refused a file that loads and validates"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    assert f"line {errors[0].line}: {errors[0].message}{more}." in refused
    lines = raw.decode(document.encoding).splitlines()
    assert all(0 < error.line <= len(lines) and error.message for error in errors)

    # What the file says survives a rewrite; only whitespace inside tags (attributes on several lines,
    # `<x />`) may change, as XML does not keep it.
    out = documents.serialize(document)
    assert documents.serialize(documents.load(out)) == out

    def between_tags(data: bytes) -> str:
        return re.sub(r"<[^>]*>", "<>", data.decode(document.encoding))

    assert between_tags(out) == between_tags(raw)
    assert etree.tostring(documents.load(out).root, method="c14n") == etree.tostring(document.root, method="c14n")


@pytest.mark.parametrize("path", interop_params())
def test_the_read_queries_answer_on_every_file_that_loads(path):
    raw = interop_file(path)
    document = loaded(raw)
    if document is None:
        return  # refused at registration with the parser's reason (checked in `loaded`): nothing to read
    entries = document.index.entries

    overview = queries.overview(document)
    counts = overview["counts"]
    json.dumps(overview)
    assert counts["pous"] == sum(counts["pous_by_type"].values()) == sum(counts["pous_by_language"].values())
    assert counts["variables"] == sum(counts["variables_by_section"].values())

    found, cursor = [], None
    while True:
        page = queries.find(document, limit=7, cursor=cursor)
        found.extend(item["id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [entry.id for entry in entries]

    variables, cursor = [], None
    while True:
        page = queries.list_variables(document, limit=13, cursor=cursor)
        variables.extend(item["id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(variables) == counts["variables"] == len(set(variables)) + duplicate_ids(entries, "variable")

    fresh = documents.load(raw)
    for entry in entries:
        if document.index.get(entry.id) is not entry:
            continue  # a duplicate name in its scope: the first one owns the id
        item = queries.get_element(document, entry.id)
        assert (item["id"], item["kind"]) == (entry.id, entry.kind)
        assert queries.get_element(fresh, entry.id.swapcase()) == item
        json.dumps(item)

    reported = findings.document_findings(document)
    json.dumps(reported)
    assert all(finding["severity"] == findings.SEVERITIES[finding["code"]] for finding in reported)
    # These files compile in their own IDE: the ST grammar must find no syntax problem in them (issue 18).
    assert [finding for finding in reported if finding["code"] == "st_syntax"] == []
    schema_errors = [finding for finding in reported if finding["code"] == "schema_invalid"]
    assert len(schema_errors) == len(documents.validate(document))
    for finding in reported:
        if finding["element_id"]:
            elements.resolve(document.root, finding["element_id"])  # every finding names a real element


def duplicate_ids(entries: list[elements.Entry], kind: str) -> int:
    """How many entries of `kind` share an id with an earlier one (names repeated in a scope)."""
    keys = [entry.key for entry in entries if entry.kind == kind]
    return len(keys) - len(set(keys))
