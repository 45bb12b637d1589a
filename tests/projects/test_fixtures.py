"""The PLCopen test projects themselves (tests/fixtures/plcopen): the committed files are what
make_fixtures.py writes, the list the tests use is the folder's, and together they still exercise every
feature of the format the tests rely on, so that a change to one fixture cannot quietly drop coverage."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

import pytest
from lxml import etree

from projects.plcopen import documents, tc6
from tests.fixtures.plcopen import make_fixtures
from tests.projects.conftest import FIXTURES, FIXTURES_DIR, INVALID_FIXTURES, fixture_bytes

NS = {"p": tc6.NS}
XHTML = tc6.XHTML_NS


def parsed(name: str) -> etree._Element:
    return etree.fromstring(fixture_bytes(name), etree.XMLParser(strip_cdata=False, resolve_entities=False))


def valid_roots() -> Iterator[tuple[str, etree._Element]]:
    for name in FIXTURES:
        if name not in INVALID_FIXTURES:
            yield name, parsed(name)


def everywhere(path: str) -> list:
    """What an XPath selects in all the valid fixtures together."""
    return [found for _, root in valid_roots() for found in root.xpath(path, namespaces=NS)]


def st_texts() -> list[str]:
    return ["".join(st.itertext()) for st in everywhere("//p:ST")]


# --- the files ---------------------------------------------------------------------------------------


def test_the_committed_fixtures_are_exactly_what_make_fixtures_writes():
    written = make_fixtures.build_all()

    assert sorted(written) == sorted(FIXTURES)
    for name, data in written.items():
        assert fixture_bytes(name) == data, f"{name} differs: run tests/fixtures/plcopen/make_fixtures.py"


def test_the_tests_list_every_fixture_of_the_folder_and_the_readme_describes_each():
    readme = (FIXTURES_DIR / "README.md").read_text(encoding="utf-8")

    assert sorted(path.name for path in FIXTURES_DIR.glob("*.xml")) == sorted(FIXTURES)
    assert sorted(re.findall(r"^\| `([\w.]+\.xml)` \|", readme, flags=re.MULTILINE)) == sorted(FIXTURES)


def test_every_valid_fixture_validates_round_trips_and_the_invalid_one_does_not_validate():
    for name in FIXTURES:
        document = documents.load(fixture_bytes(name))
        if name in INVALID_FIXTURES:
            assert documents.validate(document), name
        else:
            assert documents.validate(document) == [], name
            assert documents.serialize(document) == fixture_bytes(name), name


# --- what they cover together --------------------------------------------------------------------------


def test_all_five_languages_have_bodies_and_the_graphical_ones_keep_their_layout():
    languages = {tc6.local_name(body[0]) for body in everywhere("//p:pou/p:body")}
    assert languages == {"ST", "IL", "FBD", "LD", "SFC"}
    for language in ("FBD", "LD", "SFC"):
        assert everywhere(f"//p:{language}/*/p:position"), language
        assert everywhere(f"//p:{language}//p:connectionPointIn/p:connection[p:position]"), language
        assert everywhere(f"//p:{language}//p:connectionPointOut/p:relPosition"), language
    assert everywhere("//p:FBD/p:block/p:inputVariables/p:variable/p:connectionPointIn/p:connection[@formalParameter]")
    assert everywhere("//p:FBD/p:block/p:inputVariables/p:variable[@negated='true']")
    assert everywhere("//p:FBD/p:comment/p:content") and everywhere("//p:FBD/p:vendorElement")
    assert everywhere("//p:FBD/p:connector") and everywhere("//p:FBD/p:continuation")
    assert everywhere("//p:LD/p:leftPowerRail") and everywhere("//p:LD/p:rightPowerRail")
    assert everywhere("//p:LD/p:contact[@negated='true']") and everywhere("//p:LD/p:contact[@edge='rising']")
    assert everywhere("//p:LD/p:coil") and everywhere("//p:LD/p:block")


def test_sfc_has_pou_level_actions_and_transitions_inline_conditions_qualifiers_and_both_branchings():
    assert {tc6.local_name(b[0]) for b in everywhere("//p:pou/p:actions/p:action/p:body")} == {"LD"}
    assert {tc6.local_name(b[0]) for b in everywhere("//p:pou/p:transitions/p:transition/p:body")} == {"FBD"}
    assert everywhere("//p:SFC/p:step[@initialStep='true']")
    assert everywhere("//p:SFC/p:transition/p:condition/p:inline/p:ST")
    assert everywhere("//p:SFC/p:transition/p:condition/p:reference")
    assert everywhere("//p:SFC/p:actionBlock/p:action/p:inline/p:ST")
    assert {"N", "P", "P1", "S", "R", "L", "D"} <= set(everywhere("//p:SFC/p:actionBlock/p:action/@qualifier"))
    assert everywhere("//p:SFC/p:actionBlock/p:action[@qualifier='D'][@duration]")
    referenced = set(everywhere("//p:SFC/p:actionBlock/p:action/p:reference/@name"))
    actions = set(everywhere("//p:pou/p:actions/p:action/@name"))
    assert referenced & actions and referenced - actions  # named actions and BOOL variables
    for element in ("selectionDivergence", "selectionConvergence", "jumpStep"):
        assert everywhere(f"//p:SFC/p:{element}"), element


def test_functions_function_blocks_and_programs_with_their_interfaces():
    assert {"function", "functionBlock", "program"} == set(everywhere("//p:pou/@pouType"))
    assert everywhere("//p:pou[@pouType='function']/p:interface/p:returnType")
    assert everywhere("//p:interface/p:externalVars[@constant='true']")
    assert everywhere("//p:configuration/p:globalVars[@constant='true']")
    assert everywhere("//p:configuration/p:globalVars[@retain='true']")
    two_local_sections = "//p:interface/p:localVars[following-sibling::*[1][self::p:localVars]]"
    assert everywhere(two_local_sections)
    assert everywhere("//p:variable/p:documentation") and everywhere("//p:pou/p:documentation")


def test_configurations_resources_tasks_and_instances_in_every_arrangement():
    for name, root in valid_roots():
        assert root.xpath("count(//p:configuration)", namespaces=NS) >= 1, name
    assert any(root.xpath("count(//p:configuration)", namespaces=NS) >= 2 for _, root in valid_roots())
    assert any(root.xpath("count(//p:configuration/p:resource)", namespaces=NS) >= 2 for _, root in valid_roots())
    assert any(root.xpath("count(//p:resource/p:task)", namespaces=NS) >= 3 for _, root in valid_roots())
    assert everywhere("//p:task[@single][not(@interval)]")
    assert everywhere("//p:resource[p:task[not(p:pouInstance)]]/p:pouInstance")
    assert everywhere("//p:resource/p:globalVars") and everywhere("//p:configuration/p:globalVars")


def test_data_types_of_every_kind_and_initial_values_of_every_form():
    base = "//p:dataType/p:baseType"
    for kind in ("struct", "enum", "array", "subrangeUnsigned", "BOOL", "string"):
        assert everywhere(f"{base}/p:{kind}"), kind
    assert everywhere(f"{base}/p:array/p:baseType/p:derived")  # an array of a structure
    nested = set(everywhere(f"{base}/p:struct/p:variable/p:type/p:derived/@name"))
    assert nested & set(everywhere("//p:dataType[p:baseType/p:struct]/@name"))  # a structure in a structure
    for kind in ("string", "DT", "TOD", "DATE", "TIME", "DINT"):
        assert everywhere(f"//p:variable/p:type/p:{kind}"), kind
    assert everywhere("//p:initialValue/p:arrayValue/p:value[@repetitionValue]")
    assert everywhere("//p:initialValue/p:structValue/p:value[@member]")


def test_located_variables_with_and_without_a_size_prefix():
    addresses = set(everywhere("//p:variable/@address"))
    for prefix in ("%IX", "%QX", "%ID", "%QD"):
        assert any(address.startswith(prefix) for address in addresses), prefix
    assert {"%I5.0", "%Q5.0"} <= addresses


def test_st_code_holds_pragmas_and_comments_and_vendor_data_is_kept():
    assert any("{" in text and "(*" in text for text in st_texts())
    assert everywhere("/p:project/p:addData/p:data") and everywhere("//p:pou/p:addData/p:data")
    assert everywhere("//p:body/p:addData/p:data") and everywhere("//p:block/p:addData/p:data")
    assert everywhere("//p:contentHeader/p:addDataInfo/p:info")


def test_text_in_several_scripts_encodings_line_ends_and_xhtml_styles():
    texts = ["".join(element.itertext()) for element in everywhere("//p:documentation")]
    assert any(re.search("[а-яА-Я]", text) for text in texts)  # Cyrillic
    assert any(re.search("[äöüß]", text) for text in texts)  # German
    assert any("\n" in text for text in everywhere("/p:project/p:fileHeader/@contentDescription"))
    raws = {name: fixture_bytes(name) for name in FIXTURES}
    assert any(b"\r\n" in raw for raw in raws.values()) and any(b"\r\n" not in raw for raw in raws.values())
    assert any(raw.startswith(b'<?xml version="1.0" encoding="ISO-8859-1"?>') for raw in raws.values())
    assert not any(raw.startswith(codecs.BOM_UTF8) for raw in raws.values())  # the BOM has its own test
    assert any(b"<![CDATA[" in raw for raw in raws.values())
    assert everywhere(f"//p:documentation/*[local-name()='xhtml' and namespace-uri()='{XHTML}']")
    assert everywhere(f"//p:documentation/*[local-name()='p' and namespace-uri()='{XHTML}']")
    assert everywhere("/p:project/@*[local-name()='schemaLocation']")


@pytest.mark.parametrize("name", sorted(INVALID_FIXTURES))
def test_the_invalid_fixture_has_the_habits_of_old_editors(name):
    raw = fixture_bytes(name)
    root = parsed(name)

    assert " " in root.find("p:fileHeader", NS).get("creationDateTime")
    assert root.xpath("//p:pouInstance[@type][not(@typeName)]", namespaces=NS)
    assert root.xpath("//p:ST[normalize-space(text())]", namespaces=NS)
    assert root.xpath("//p:SFC/p:actionBlock/p:action[not(@localId)][not(p:relPosition)]", namespaces=NS)
    assert re.search(rb"<fileHeader [^>]*\n", raw) and b" />" in raw  # attributes on several lines, `<x />`
    assert {tc6.local_name(body[0]) for body in root.xpath("//p:pou/p:body", namespaces=NS)} == {
        "ST",
        "IL",
        "FBD",
        "LD",
        "SFC",
    }
