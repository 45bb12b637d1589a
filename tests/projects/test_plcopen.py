"""Loading, validating, writing and reading PLCopen TC6 2.01 projects (projects.plcopen), over every fixture."""

from __future__ import annotations

import gc
import hashlib
import json
import re

import pytest
from lxml import etree

from projects.plcopen import documents, elements, grammar, paging, queries, tc6
from projects.plcopen.documents import ProjectFormatError
from projects.plcopen.elements import ElementNotFound
from tests.projects.conftest import INVALID, INVALID_FIXTURES, MAIN, PRAGMAS, fixture_bytes, fixture_params


def st_pou(name: str, code: str) -> str:
    return f'<pou name="{name}" pouType="program"><body><ST><xhtml:p><![CDATA[{code}]]></xhtml:p></ST></body></pou>'


def minimal(pous: str = "") -> bytes:
    """A small project holding `pous` (one line of XML), its declaration and fileHeader on lines 1 and 3."""
    content = f"      {pous}\n" if pous else ""
    return tc6.project_skeleton(name="Minimal", product="t", created="2024-01-01T00:00:00", pous=content).encode()


# --- round trip -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", fixture_params())
def test_export_of_an_unchanged_fixture_is_byte_identical_or_only_loses_whitespace_inside_tags(path):
    raw = path.read_bytes()
    out = documents.serialize(documents.load(raw))
    if path.name not in INVALID_FIXTURES:
        assert out == raw
        return

    # The hand-written invalid fixture breaks attributes over lines and writes `<x />`; XML does not keep
    # whitespace inside a tag, so only that changes. Everything between tags comes back as it was.
    assert out != raw

    def between_tags(data: bytes) -> str:
        return re.sub(r"<[^>]*>", "<>", data.decode())

    assert between_tags(out) == between_tags(raw)
    assert etree.tostring(documents.load(out).root, method="c14n") == etree.tostring(
        documents.load(raw).root, method="c14n"
    )


@pytest.mark.parametrize("path", fixture_params())
def test_re_export_is_stable(path):
    once = documents.serialize(documents.load(path.read_bytes()))
    assert documents.serialize(documents.load(once)) == once


@pytest.mark.parametrize("path", fixture_params())
def test_the_line_ending_and_declaration_of_the_file_are_kept(path):
    raw = path.read_bytes()
    doc = documents.load(raw)
    assert doc.line_ending == ("\r\n" if b"\r\n" in raw else "\n")
    assert raw.startswith(doc.declaration)
    assert documents.serialize(doc).splitlines(keepends=True)[0] == raw.splitlines(keepends=True)[0]


def test_crlf_bom_and_a_missing_declaration_round_trip():
    base = minimal(st_pou("Main", "A := 1;\nB := 2;"))
    variants = [
        base.replace(b"\n", b"\r\n"),
        b"\xef\xbb\xbf" + base,
        base.split(b"\n", 1)[1],
        base.rstrip(b"\n"),
        base.replace(b"encoding='utf-8'", b'encoding="UTF-8"'),
    ]
    for data in variants:
        assert documents.serialize(documents.load(data)) == data


def test_cdata_sections_are_kept_as_cdata():
    data = minimal(st_pou("Main", "IF a < b THEN c := 1; END_IF;"))
    assert b"<![CDATA[IF a < b THEN" in documents.serialize(documents.load(data))


def test_fingerprint_is_the_sha256_of_the_bytes():
    assert documents.fingerprint(b"abc") == hashlib.sha256(b"abc").hexdigest()


# --- refusing what is not a TC6 2.01 project --------------------------------------------------------------


def test_a_tc6_2_0_file_is_refused_as_another_dialect():
    data = minimal().replace(b"tc6_0201", b"tc6_0200")
    with pytest.raises(ProjectFormatError, match=r"2\.0.*only PLCopen TC6 XML 2\.01"):
        documents.load(data)


def test_a_tc6_1_0_file_is_refused_as_another_dialect():
    data = minimal().replace(b"http://www.plcopen.org/xml/tc6_0201", b"http://www.plcopen.org/xml/tc6.xsd")
    with pytest.raises(ProjectFormatError, match=r"1\.0"):
        documents.load(data)


def test_a_foreign_root_element_is_refused():
    with pytest.raises(ProjectFormatError, match=r"not a PLCopen TC6 XML 2\.01"):
        documents.load(b"<svg xmlns='http://www.w3.org/2000/svg'/>")


def test_malformed_xml_is_refused_with_its_line():
    with pytest.raises(ProjectFormatError, match=r"not well-formed XML \(line 2\)"):
        documents.load(b"<project>\n<oops></project>")


def test_a_doctype_with_entities_is_refused_before_anything_expands():
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE project [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>'
        b'<project xmlns="http://www.plcopen.org/xml/tc6_0201">&b;</project>'
    )
    with pytest.raises(ProjectFormatError, match="DOCTYPE"):
        documents.load(bomb)


def test_an_external_entity_is_never_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    data = (
        f'<?xml version="1.0"?><!DOCTYPE project [<!ENTITY x SYSTEM "file://{secret}">]>'
        f'<project xmlns="http://www.plcopen.org/xml/tc6_0201">&x;</project>'
    ).encode()
    with pytest.raises(ProjectFormatError):
        documents.load(data)


def test_utf16_files_are_refused_with_a_hint():
    with pytest.raises(ProjectFormatError, match="UTF-8"):
        documents.load(minimal().decode().replace("utf-8", "utf-16").encode("utf-16"))


# --- schema validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", fixture_params(valid_only=True))
def test_the_valid_fixtures_validate(path):
    assert documents.validate(documents.load(path.read_bytes())) == []


def test_the_invalid_fixture_is_reported_invalid_with_lines_and_messages():
    raw = fixture_bytes(INVALID)
    errors = documents.validate(documents.load(raw))
    assert len(errors) == 23
    lines = raw.decode().splitlines()
    assert all(0 < error.line <= len(lines) and error.message for error in errors)
    date_error = next(error for error in errors if "creationDateTime" in error.message)
    assert "creationDateTime" in lines[date_error.line - 1] or "creationDateTime" in lines[date_error.line - 2]
    assert any("typeName" in error.message for error in errors)


def test_validation_of_an_edited_tree_reports_lines_of_the_written_file():
    doc = documents.load(minimal(st_pou("Main", "x")))
    edited = doc.copy()
    edited.root.find(tc6.q("fileHeader")).set("creationDateTime", "yesterday")
    errors = documents.validate(edited)
    assert [error.line for error in errors] == [3]


# --- ids and the index ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", fixture_params())
def test_get_element_reads_the_same_with_or_without_a_built_index(path):
    indexed = documents.load(path.read_bytes())
    fresh = documents.load(path.read_bytes())
    for entry in indexed.index.entries:
        if indexed.index.get(entry.id) is entry:
            assert queries.get_element(fresh, entry.id.upper()) == queries.get_element(indexed, entry.id)
    assert "index" not in fresh.__dict__


@pytest.mark.parametrize("path", fixture_params())
def test_every_indexed_id_resolves_case_insensitively_and_reads_back(path):
    doc = documents.load(path.read_bytes())
    for entry in doc.index.entries:
        if doc.index.get(entry.id) is not entry:
            continue  # a duplicate name in a schema-invalid scope: the first one owns the id
        assert elements.entry_for(doc, entry.id.upper()) is entry
        kind, element, written = elements.resolve(doc.root, entry.id.swapcase())
        assert (kind, element, written) == (entry.kind, entry.element, entry.id)
        item = queries.get_element(doc, entry.id)
        assert item["id"] == entry.id and item["kind"] == entry.kind
        json.dumps(item)


@pytest.mark.parametrize("path", fixture_params())
def test_the_element_index_keeps_no_proxy_of_an_element_but_the_root(path):
    """The collector walks every object a cached document keeps on each pass of its oldest generation, which
    stops every thread: an entry finds its element from the root by position instead of keeping a proxy (the
    50,000-variable project's index held 50,627)."""
    doc = documents.load(path.read_bytes())
    kept = {
        id(held) for entry in doc.index.entries for held in gc.get_referents(entry) if isinstance(held, etree._Element)
    }
    assert kept == {id(doc.root)}


def test_ids_follow_the_documented_paths():
    doc = documents.load(fixture_bytes("batch_records.xml"))
    ids = {entry.id for entry in doc.index.entries}
    assert {
        "pou/BatchMain",
        "pou/BatchMain/var/Operator",
        "type/Reading",
        "config/Cellar",
        "config/Cellar/var/Alarmed",
        "config/Cellar/resource/Plc1",
        "config/Cellar/resource/Plc1/var/Ambient",
        "config/Cellar/resource/Plc1/task/Slow",
        "config/Cellar/resource/Plc1/instance/Batch",
    } <= ids
    tasks = documents.load(fixture_bytes("conveyor_tasks.xml"))
    assert elements.entry_for(tasks, "CONFIG/conveyor/resource/line/task/control/instance/SORTER")


def test_an_unknown_id_is_not_found():
    doc = documents.load(minimal(st_pou("Main", "x")))
    for bad in ("pou/Nope", "pou", "pou/Main/var/x", "pou/Main/task/x", "", "/"):
        with pytest.raises(ElementNotFound):
            queries.get_element(doc, bad)


# --- overview, find, list_variables -----------------------------------------------------------------------


def test_overview_counts_by_kind_pou_type_and_language():
    doc = documents.load(fixture_bytes(MAIN))
    result = queries.overview(doc)
    assert result["name"] == "Dosing Line"
    counts = result["counts"]
    assert counts["pous"] == 7
    assert counts["pous_by_type"] == {"function": 1, "functionBlock": 5, "program": 1}
    assert counts["pous_by_language"] == {"FBD": 2, "IL": 1, "LD": 1, "SFC": 1, "ST": 2}
    assert (counts["configurations"], counts["resources"], counts["tasks"], counts["instances"]) == (1, 1, 1, 1)
    assert counts["variables"] == sum(counts["variables_by_section"].values()) == 42
    assert counts["variables_by_section"] == {
        "externalVars": 2,
        "globalVars": 2,
        "inputVars": 12,
        "localVars": 14,
        "outputVars": 12,
    }


@pytest.mark.parametrize("path", fixture_params())
def test_overview_of_every_fixture_is_json_and_consistent(path):
    doc = documents.load(path.read_bytes())
    counts = queries.overview(doc)["counts"]
    assert counts["pous"] == sum(counts["pous_by_type"].values()) == sum(counts["pous_by_language"].values())
    json.dumps(counts)


def test_find_matches_name_type_and_documentation_case_insensitively():
    doc = documents.load(fixture_bytes(MAIN))
    by_name = queries.find(doc, text="perlitre")["items"]
    assert {item["id"] for item in by_name} >= {"config/Plant/var/PulsesPerLitre"}
    by_doc = queries.find(doc, text="ЗАПОЛНЕНИЯ")["items"]  # Cyrillic documentation of Share
    assert [item["id"] for item in by_doc] == ["pou/FillPercent/var/Share"]
    by_type = queries.find(doc, kind="variable", type="real")["items"]
    assert [item["id"] for item in by_type] == ["pou/FillPercent/var/Share", "pou/LineMain/var/Progress"]
    assert all(item["type"] == "REAL" for item in by_type)
    programs = queries.find(doc, kind="pou", type="program")["items"]
    assert [item["id"] for item in programs] == ["pou/LineMain"]


@pytest.mark.parametrize("path", fixture_params())
def test_find_pages_through_everything_with_cursors(path):
    doc = documents.load(path.read_bytes())
    everything = [entry.id for entry in doc.index.entries]
    seen: list[str] = []
    cursor = None
    while True:
        page = queries.find(doc, limit=7, cursor=cursor)
        assert len(page["items"]) <= 7
        seen.extend(item["id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == everything


def test_limits_above_the_maximum_are_refused_naming_it():
    doc = documents.load(minimal(st_pou("Main", "x")))
    with pytest.raises(ValueError, match="maximum of 200"):
        queries.find(doc, limit=201)
    with pytest.raises(ValueError, match="maximum of 200"):
        queries.list_variables(doc, limit=500)
    with pytest.raises(ValueError, match="at least 1"):
        queries.find(doc, limit=0)
    assert queries.find(doc, limit=200)["items"]


def test_bad_or_foreign_cursors_are_refused():
    doc = documents.load(fixture_bytes(MAIN))
    cursor = queries.find(doc, text="clear", limit=1)["next_cursor"]
    assert cursor
    with pytest.raises(ValueError, match="different query"):
        queries.find(doc, text="pulse", limit=1, cursor=cursor)
    with pytest.raises(ValueError, match="another kind"):
        queries.list_variables(doc, cursor=cursor)
    with pytest.raises(ValueError, match="not valid"):
        queries.find(doc, text="clear", cursor="!!not-base64!!")
    with pytest.raises(ValueError, match="unknown kind"):
        queries.find(doc, kind="banana")


def test_list_variables_by_scope_and_section_with_a_cursor():
    doc = documents.load(fixture_bytes(MAIN))
    first = queries.list_variables(doc, scope="POU/LINEMAIN", section="outputvars", limit=3)
    assert [item["name"] for item in first["items"]] == ["Dosed", "Capped", "Labelled"]
    rest = queries.list_variables(doc, scope="pou/linemain", section="outputVars", cursor=first["next_cursor"])
    assert [item["name"] for item in rest["items"]] == ["Vented", "Rinsed"]
    assert rest["next_cursor"] is None
    globals_ = queries.list_variables(doc, scope="config/plant")["items"]
    assert [(v["name"], v["constant"], v["initial_value"]) for v in globals_] == [
        ("PulsesPerLitre", True, "40"),
        ("TurnsPerCap", True, "6"),
    ]
    every = queries.list_variables(doc, limit=200)["items"]
    assert len(every) == queries.overview(doc)["counts"]["variables"]
    with pytest.raises(ValueError, match="a scope is a POU"):
        queries.list_variables(doc, scope="config/Plant/resource/Cpu1/task/Cycle")
    with pytest.raises(ValueError, match="unknown section"):
        queries.list_variables(doc, section="VAR")


# --- get_element ------------------------------------------------------------------------------------------


def test_a_pou_comes_with_its_interface_and_st_body():
    doc = documents.load(fixture_bytes(MAIN))
    pou = queries.get_element(doc, "pou/fillpercent")
    assert pou["pou_type"] == "function"
    assert pou["interface"]["return_type"] == "REAL"
    assert [s["section"] for s in pou["interface"]["sections"]] == ["inputVars", "localVars"]
    assert pou["body"]["language"] == "ST" and pou["body"]["text"].startswith("Share := INT_TO_REAL(Filled)")
    assert pou["body"]["text"].endswith("FillPercent := Share * 100.0;")
    assert pou["body"]["truncated"] is False and pou["body"]["next_cursor"] is None


def test_a_graphical_body_is_named_not_rendered():
    doc = documents.load(fixture_bytes(MAIN))
    for pou_id, language in (("pou/LabelGate", "FBD"), ("pou/ReliefValve", "LD"), ("pou/RinseCycle", "SFC")):
        body = queries.get_element(doc, pou_id)["body"]
        assert body["language"] == language and body["rendered"] is False and "text" not in body
        assert body["objects"] > 0


def test_a_long_body_continues_with_its_cursor_until_complete():
    code = "".join(f"Counter{i} := Counter{i} + 1; (* line {i} *)\n" for i in range(800))
    doc = documents.load(minimal(st_pou("Big", code)))
    first = queries.get_element(doc, "pou/Big")["body"]
    assert len(first["text"]) == paging.DEFAULT_BODY_LIMIT and first["truncated"] is True
    assert first["total_chars"] == len(code)
    text, cursor = first["text"], first["next_cursor"]
    while cursor:
        body = queries.get_element(doc, "pou/big", cursor=cursor)["body"]
        text += body["text"]
        cursor = body["next_cursor"]
    assert text == code
    by_offset = queries.get_element(doc, "pou/Big", body_offset=100, body_limit=10)["body"]
    assert by_offset["text"] == code[100:110] and by_offset["next_offset"] == 110
    with pytest.raises(ValueError, match="another element"):
        queries.get_element(doc, "pou/Other", cursor=first["next_cursor"])
    with pytest.raises(ValueError, match="maximum of 32000"):
        queries.get_element(doc, "pou/Big", body_limit=50_000)


def test_a_crlf_body_reads_with_lf_line_ends():
    raw = fixture_bytes(PRAGMAS)
    assert b"\r\n" in raw
    doc = documents.load(raw)
    text = queries.get_element(doc, "pou/uptime")["body"]["text"]
    assert "\r" not in text and "\n" in text and "{" in text and "(*" in text


def test_a_large_interface_is_listed_up_to_its_limit():
    variables = "".join(f'<variable name="v{i}"><type><INT/></type></variable>' for i in range(250))
    pou = f'<pou name="Wide" pouType="program"><interface><localVars>{variables}</localVars></interface></pou>'
    doc = documents.load(minimal(pou))
    interface = queries.get_element(doc, "pou/Wide")["interface"]
    assert interface["variable_count"] == 250
    assert sum(len(s["variables"]) for s in interface["sections"]) == queries.INTERFACE_VARIABLE_LIMIT
    assert interface["variables_truncated"] is True


def test_a_variable_reads_with_type_value_address_and_flags():
    doc = documents.load(fixture_bytes("press_io.xml"))
    assert queries.get_element(doc, "pou/PressCell/var/Force")["address"] == "%ID2.4"
    assert queries.get_element(doc, "pou/PressCell/var/Feedback")["address"] == "%I5.0"
    doc = documents.load(fixture_bytes("batch_records.xml"))
    variable = queries.get_element(doc, "pou/BatchMain/var/Operator")
    assert (variable["type"], variable["initial_value"], variable["documentation"]) == (
        "STRING",
        "'nobody'",
        "Who started the batch; set from the panel.",
    )
    assert (variable["section"], variable["retain"], variable["constant"]) == ("localVars", False, False)
    assert queries.get_element(doc, "pou/BatchMain/var/Limits")["initial_value"] == "[0.0, 2(95.5)]"
    assert queries.get_element(doc, "pou/BatchMain/var/Setpoint")["initial_value"] == "(Value := 72.5, Valid := TRUE)"
    assert queries.get_element(doc, "config/Cellar/var/Batches")["retain"] is True
    doc = documents.load(fixture_bytes("signal_tower.xml"))
    lamp = queries.get_element(doc, "pou/SignalTower/var/Green")
    assert (lamp["address"], lamp["documentation"]) == ("%QX0.2", "Grüne Leuchte: ungestörter Betrieb.")


def test_tasks_instances_and_types_read_back():
    doc = documents.load(fixture_bytes("conveyor_tasks.xml"))
    task = queries.get_element(doc, "config/Conveyor/resource/Line/task/OnBoot")
    assert (task["single"], task["interval"], task["priority"]) == ("Boot", None, "0")
    assert [i["type_name"] for i in task["instances"]] == ["Startup"]
    resource = queries.get_element(doc, "config/Conveyor/resource/Line")
    assert [t["name"] for t in resource["tasks"]] == ["OnBoot", "Control", "Report"]
    assert resource["global_variable_count"] == 2
    configuration = queries.get_element(doc, "config/Conveyor")
    assert ([r["name"] for r in configuration["resources"]], configuration["global_variable_count"]) == (
        ["Line", "Panel"],
        1,
    )
    doc = documents.load(fixture_bytes("batch_records.xml"))
    assert queries.get_element(doc, "type/ReadingLog")["type"] == "ARRAY[1..24] OF Reading"
    enum = queries.get_element(doc, "type/BatchState")
    assert (enum["type_kind"], [v["name"] for v in enum["values"]]) == ("enum", ["Empty", "Filling", "Holding"])
    struct = queries.get_element(doc, "type/Reading")
    assert [(m["name"], m["type"]) for m in struct["members"]] == [
        ("Value", "REAL"),
        ("Stamp", "DT"),
        ("Valid", "BOOL"),
    ]
    alias = queries.get_element(doc, "type/Alarm")
    assert (alias["type_kind"], alias["type"], alias["initial_value"]) == ("alias", "BOOL", "FALSE")
    assert queries.get_element(doc, "type/Percent")["type"] == "USINT(0..100)"
    instance = queries.get_element(doc, "config/Cellar/resource/Plc1/instance/Batch")
    assert (instance["type_name"], instance["task"]) == ("BatchMain", None)
    assert queries.get_element(doc, "config/Cellar/resource/Plc1/task/Slow")["instances"] == []
    nested = queries.get_element(documents.load(fixture_bytes("press_io.xml")), "type/Stroke")
    assert [(m["name"], m["type"]) for m in nested["members"]] == [
        ("Depth", "DINT"),
        ("Limits", "Window"),
        ("Spare", "WindowPair"),
    ]


# --- type and value strings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "xml", "rendered"),
    [
        ("int", "<INT/>", "INT"),
        ("TIME_OF_DAY", "<TOD/>", "TOD"),
        ("STRING", "<string/>", "STRING"),
        ("string(10)", '<string length="10"/>', "STRING[10]"),
        ("WSTRING[5]", '<wstring length="5"/>', "WSTRING[5]"),
        ("Motor", '<derived name="Motor"/>', "Motor"),
        (
            "ARRAY[0..9, -1..1] OF REAL",
            '<array><dimension lower="0" upper="9"/><dimension lower="-1" upper="1"/><baseType><REAL/></baseType></array>',
            "ARRAY[0..9, -1..1] OF REAL",
        ),
        ("POINTER TO Motor", '<pointer><baseType><derived name="Motor"/></baseType></pointer>', "POINTER TO Motor"),
        (
            "UINT(0..100)",
            '<subrangeUnsigned><range lower="0" upper="100"/><baseType><UINT/></baseType></subrangeUnsigned>',
            "UINT(0..100)",
        ),
    ],
)
def test_type_strings_become_tc6_type_elements_and_render_back(text, xml, rendered):
    element = grammar.parse_type(text)
    serialized = etree.tostring(element).decode()
    assert re.sub(r' xmlns(:\w+)?="[^"]*"', "", re.sub(r"ns0:", "", serialized)) == xml
    container = etree.Element(tc6.q("type"))
    container.append(element)
    assert grammar.render_type(container) == rendered


@pytest.mark.parametrize(
    "text",
    ["", "LTIME", "WCHAR", "ARRAY[1..] OF INT", "ARRAY[5..1] OF INT", "STRING[x]", "INT INT", "REAL(0..1)", "1abc"],
)
def test_bad_type_strings_are_refused(text):
    with pytest.raises(grammar.TypeStringError):
        grammar.parse_type(text)


@pytest.mark.parametrize(
    "text",
    ["TRUE", "16#FF", "'a, b'", "[1, 2, 3(0)]", "(x := 1, y := [1, 2])", "[(a := 'x,y'), (a := 'z')]", "T#3s"],
)
def test_value_strings_round_trip(text):
    container = etree.Element(tc6.q("initialValue"))
    container.append(grammar.parse_value(text))
    assert grammar.render_value(container) == text


def test_unbalanced_values_are_refused():
    for text in ("[1, 2", "(a := 1", "'open", "   "):
        with pytest.raises(grammar.ValueStringError):
            grammar.parse_value(text)
