"""Findings over TC6 2.01 projects: each code triggered by a small hand-made project, none on a clean one,
none on the valid fixtures in tests/fixtures/plcopen, and exactly the deliberate mistakes of the invalid one."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from lxml import etree

from projects import findings
from projects.findings import LIBRARY_TYPES, SEVERITIES, Finding, check
from projects.plcopen import tc6
from projects.plcopen.documents import SCHEMA_PATH
from tests.projects.conftest import INVALID, INVALID_FIXTURES, fixture_params, fixture_path

# ---------------------------------------------------------------------------------------------------------
# Building small projects
# ---------------------------------------------------------------------------------------------------------


def type_xml(type_name: str) -> str:
    if type_name.startswith("<"):
        return type_name
    if type_name in tc6.ELEMENTARY_TYPE_ELEMENTS:
        return f"<{type_name}/>"
    return f'<derived name="{type_name}"/>'


def var(name: str, type_name: str = "INT", *, init: str | None = None, address: str | None = None) -> str:
    located = f' address="{address}"' if address else ""
    initial = ""
    if init is not None:
        initial = init if init.startswith("<") else f'<simpleValue value="{init}"/>'
        initial = f"<initialValue>{initial}</initialValue>"
    return f'<variable name="{name}"{located}><type>{type_xml(type_name)}</type>{initial}</variable>'


def section(kind: str, *variables: str) -> str:
    return f"<{kind}>{''.join(variables)}</{kind}>"


def st(code: str) -> str:
    return f"<body><ST><xhtml:p><![CDATA[{code}]]></xhtml:p></ST></body>"


def pou(name: str, kind: str = "program", *sections: str, body: str | None = None, returns: str | None = None) -> str:
    result = f"<returnType>{type_xml(returns)}</returnType>" if returns else ""
    return (
        f'<pou name="{name}" pouType="{kind}"><interface>{result}{"".join(sections)}</interface>'
        f"{body if body is not None else st('')}</pou>"
    )


def instance(name: str, type_name: str) -> str:
    return f'<pouInstance name="{name}" typeName="{type_name}"/>'


def task(name: str, *instances: str) -> str:
    return f'<task name="{name}" priority="1" interval="T#20ms">{"".join(instances)}</task>'


def resource(name: str = "R0", *, tasks: str = "", globals_: str = "", instances: str = "") -> str:
    return f'<resource name="{name}">{tasks}{globals_}{instances}</resource>'


def configuration(name: str = "C0", *, resources: str = "", globals_: str = "") -> str:
    return f'<configuration name="{name}">{resources}{globals_}</configuration>'


@functools.cache
def schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(SCHEMA_PATH)))


def project(*, data_types: str = "", pous: str = "", configurations: str = "") -> etree._Element:
    """A minimal TC6 2.01 document; findings are about what the schema does not check, so every project
    built here must be schema-valid."""
    xml = tc6.project_skeleton(
        name="Tests",
        product="Forge tests",
        created="2024-01-01T00:00:00",
        data_types=f"{data_types}\n" if data_types else "",
        pous=f"{pous}\n" if pous else "",
        configurations=f"{configurations}\n" if configurations else "",
    )
    root = etree.fromstring(xml.encode(), etree.XMLParser(strip_cdata=False))
    schema().assertValid(root)
    return root


def found(root: etree._Element, **kwargs) -> set[tuple[str, str]]:
    return {(f.code, f.element_id) for f in check(root, **kwargs)}


def only(root: etree._Element, code: str) -> list[Finding]:
    return [f for f in check(root) if f.code == code]


CLEAN_TYPES = (
    '<dataType name="Mode"><baseType><enum><values><value name="Idle"/><value name="Run"/></values></enum>'
    '</baseType><initialValue><simpleValue value="Idle"/></initialValue></dataType>'
    '<dataType name="Point"><baseType><struct>'
    + var("X", "REAL", init="0.0")
    + var("Y", "REAL")
    + "</struct></baseType></dataType>"
)
CLEAN_FB = pou(
    "Blinker",
    "functionBlock",
    section("inputVars", var("Enable", "BOOL"), var("Period", "TIME", init="T#500ms")),
    section("outputVars", var("Light", "BOOL")),
    section("localVars", var("Pulse", "TON")),
    body=st("Pulse(IN := Enable AND NOT Pulse.Q, PT := Period);\nIF Pulse.Q THEN Light := NOT Light; END_IF;"),
)
CLEAN_FUNCTION = pou(
    "Scale",
    "function",
    section("inputVars", var("Raw", "INT")),
    section("localVars", var("Factor", "REAL", init="0.5")),
    body=st("Scale := INT_TO_REAL(Raw) * Factor;"),
    returns="REAL",
)
CLEAN_MAIN = pou(
    "Main",
    "program",
    section("externalVars", var("Speed", "REAL")),
    section(
        "localVars", var("Blink", "Blinker"), var("Lamp", "BOOL", address="%QX0.0"), var("State", "Mode", init="Run")
    ),
    section("localVars", var("Target", "Point"), var("Label", '<string length="8"/>', init="'lamp'")),
    body=st(
        "(* runs every cycle *)\n"
        "Blink(Enable := State = Mode#Run, Period := T#1s);\n"
        "Lamp := Blink.Light;\n"
        "Target.X := Scale(Raw := 5) + Speed;\n"
        "IF State = Idle THEN Label := 'idle'; END_IF;\n"
        "Speed := MAX(Speed, LIMIT(0.0, Target.X, 10.0));"
    ),
)
CLEAN_CONFIG = configuration(
    "C0",
    resources=resource("R0", tasks=task("Fast", instance("MainInstance", "Main"))),
    globals_=section("globalVars", var("Speed", "REAL", init="1.5")),
)


def clean(**overrides: str) -> etree._Element:
    parts = {
        "data_types": CLEAN_TYPES,
        "pous": CLEAN_FB + CLEAN_FUNCTION + CLEAN_MAIN,
        "configurations": CLEAN_CONFIG,
    }
    parts.update(overrides)
    return project(**parts)


# ---------------------------------------------------------------------------------------------------------
# The shape of a finding and of the result
# ---------------------------------------------------------------------------------------------------------


def test_a_clean_project_has_no_findings():
    assert check(clean()) == []


def test_an_empty_project_has_no_findings():
    assert check(project()) == []


def test_a_finding_serialises_to_its_four_fields():
    finding = Finding.of("unused_variable", "pou/Main/var/X", "never used")
    assert finding.to_dict() == {
        "code": "unused_variable",
        "severity": "advisory",
        "element_id": "pou/Main/var/X",
        "message": "never used",
    }


def test_schema_invalid_is_a_problem_the_caller_can_report():
    assert Finding.of("schema_invalid", "", "bad").severity == "problem"


def test_advisories_are_what_compiles_but_deserves_a_look():
    # An input assigned inside its POU and a vendor-dialect statement compile in the tools that allow them,
    # so they are advisories (issue 18), like an unused variable and a program no task runs.
    advisories = {code for code, severity in SEVERITIES.items() if severity == "advisory"}
    assert advisories == {"unused_variable", "program_not_instantiated", "assignment_to_input", "st_dialect"}


def test_findings_are_sorted_by_element_id_then_code():
    root = clean(
        pous=CLEAN_FB + CLEAN_FUNCTION + CLEAN_MAIN + pou("b_Unused", "program", section("localVars", var("x__y"))),
        configurations=CLEAN_CONFIG,
    )
    findings = check(root)
    assert [(f.element_id, f.code) for f in findings] == [
        ("pou/b_Unused", "program_not_instantiated"),
        ("pou/b_Unused/var/x__y", "invalid_identifier"),
        ("pou/b_Unused/var/x__y", "unused_variable"),
    ]
    assert check(root) == findings


def test_a_document_that_is_not_a_tc6_2_01_project_is_refused():
    with pytest.raises(ValueError):
        check(etree.fromstring(b'<project xmlns="http://www.plcopen.org/xml/tc6_0200"/>'))


# ---------------------------------------------------------------------------------------------------------
# Identifiers
# ---------------------------------------------------------------------------------------------------------


def test_an_invalid_variable_name_is_reported_on_the_variable():
    root = project(pous=pou("Main", "program", section("inputVars", var("1abc")), section("outputVars", var("a__b"))))
    assert found(root) >= {
        ("invalid_identifier", "pou/Main/var/1abc"),
        ("invalid_identifier", "pou/Main/var/a__b"),
    }


def test_invalid_names_of_pous_types_configurations_resources_tasks_and_instances_are_reported():
    root = project(
        data_types='<dataType name="Bad_"><baseType><INT/></baseType></dataType>',
        pous=pou("Main_", "program"),
        configurations=configuration("C-0", resources=resource("R 0", tasks=task("Fast!", instance("i__1", "Main_")))),
    )
    assert {element for code, element in found(root) if code == "invalid_identifier"} == {
        "type/Bad_",
        "pou/Main_",
        "config/C-0",
        "config/C-0/resource/R 0",
        "config/C-0/resource/R 0/task/Fast!",
        "config/C-0/resource/R 0/task/Fast!/instance/i__1",
    }


def test_a_reserved_word_as_a_name_is_reported():
    root = project(pous=pou("Main", "program", section("inputVars", var("END_IF", "BOOL"), var("Int"))))
    assert found(root) >= {
        ("reserved_identifier", "pou/Main/var/END_IF"),
        ("reserved_identifier", "pou/Main/var/Int"),
    }


def test_explicit_en_input_and_eno_output_are_allowed_but_not_as_locals():
    root = project(
        pous=pou(
            "F",
            "functionBlock",
            section("inputVars", var("EN", "BOOL")),
            section("outputVars", var("ENO", "BOOL")),
            section("localVars", var("en1", "BOOL")),
            body=st("ENO := EN; en1 := EN;"),
        )
        + pou("G", "functionBlock", section("localVars", var("ENO", "BOOL")), body=st("ENO := TRUE;"))
    )
    reserved = {element for code, element in found(root) if code == "reserved_identifier"}
    assert reserved == {"pou/G/var/ENO"}


def test_members_and_enumeration_values_are_checked_on_their_data_type():
    root = project(
        data_types='<dataType name="Bad"><baseType><struct>'
        + var("ok")
        + var("x__")
        + '</struct></baseType></dataType><dataType name="E"><baseType><enum><values><value name="IF"/>'
        '<value name="A"/></values></enum></baseType></dataType>'
    )
    findings = check(root)
    assert {(f.code, f.element_id) for f in findings} == {
        ("invalid_identifier", "type/Bad"),
        ("reserved_identifier", "type/E"),
    }
    assert "member of data type 'Bad'" in findings[0].message


# ---------------------------------------------------------------------------------------------------------
# Duplicate names
# ---------------------------------------------------------------------------------------------------------


def test_variables_of_one_pou_clash_across_sections_case_insensitively():
    root = project(
        pous=pou("Main", "program", section("localVars", var("Counter")), section("inputVars", var("COUNTER")))
    )
    findings = only(root, "duplicate_name")
    assert [f.element_id for f in findings] == ["pou/Main/var/COUNTER"]
    assert "Counter" in findings[0].message and "case-insensitive" in findings[0].message


def test_the_same_variable_name_in_two_pous_is_fine():
    root = project(
        pous=pou("A", "program", section("localVars", var("X"))) + pou("B", "program", section("localVars", var("x")))
    )
    assert only(root, "duplicate_name") == []


def test_a_function_variable_may_not_take_the_function_name():
    root = project(pous=pou("Scale", "function", section("inputVars", var("scale")), returns="INT"))
    assert [f.element_id for f in only(root, "duplicate_name")] == ["pou/Scale/var/scale"]


def test_pou_and_data_type_names_share_one_scope():
    root = project(
        data_types='<dataType name="Motor"><baseType><INT/></baseType></dataType>',
        pous=pou("MOTOR", "functionBlock") + pou("Main", "program") + pou("main", "function", returns="INT"),
    )
    assert {f.element_id for f in only(root, "duplicate_name")} == {"pou/MOTOR", "pou/main"}


def test_a_pou_may_not_take_a_standard_function_block_or_function_name():
    root = project(pous=pou("TON", "functionBlock") + pou("Limit", "function", returns="INT"))
    assert {f.element_id for f in only(root, "duplicate_name")} == {"pou/TON", "pou/Limit"}


def test_tasks_and_instances_clash_within_a_resource():
    root = project(
        pous=pou("Main", "program"),
        configurations=configuration(
            resources=resource(
                tasks=task("Fast", instance("inst", "Main")) + task("fast"),
                instances=instance("INST", "Main"),
            )
        ),
    )
    assert {f.element_id for f in only(root, "duplicate_name")} == {
        "config/C0/resource/R0/task/fast",
        "config/C0/resource/R0/instance/INST",
    }


def test_globals_clash_within_their_configuration_or_resource_only():
    root = project(
        configurations=configuration(
            "C0",
            resources=resource("R0", globals_=section("globalVars", var("G"), var("g")))
            + resource("R1", globals_=section("globalVars", var("G"))),
            globals_=section("globalVars", var("G")) + section("globalVars", var("G", "BOOL")),
        )
        + configuration("C1", globals_=section("globalVars", var("G")))
    )
    assert {f.element_id for f in only(root, "duplicate_name")} == {
        "config/C0/resource/R0/var/g",
        "config/C0/var/G",
    }


def test_configurations_and_resources_have_unique_names():
    root = project(configurations=configuration("C0", resources=resource("R0") + resource("r0")) + configuration("c0"))
    assert {f.element_id for f in only(root, "duplicate_name")} == {"config/C0/resource/r0", "config/c0"}


def test_members_of_a_structure_and_values_of_an_enumeration_clash_within_their_type():
    root = project(
        data_types='<dataType name="S"><baseType><struct>'
        + var("a")
        + var("A", "BOOL")
        + '</struct></baseType></dataType><dataType name="E"><baseType><enum><values><value name="On"/>'
        '<value name="ON"/></values></enum></baseType></dataType>'
    )
    findings = only(root, "duplicate_name")
    assert [f.element_id for f in findings] == ["type/E", "type/S"]
    assert "in enumeration 'E'" in findings[0].message and "in structure 'S'" in findings[1].message


# ---------------------------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------------------------


def test_an_unknown_derived_type_is_reported():
    root = project(pous=pou("Main", "program", section("localVars", var("M", "Motr"), var("T", "TON"))))
    findings = only(root, "unknown_type")
    assert [f.element_id for f in findings] == ["pou/Main/var/M"]
    assert "'Motr'" in findings[0].message


def test_standard_function_blocks_data_types_and_function_blocks_are_known_types():
    standard = ["TON", "TOF", "TP", "CTU", "CTD", "CTUD", "R_TRIG", "F_TRIG", "SR", "RS", "ctu_dint"]
    root = project(
        data_types='<dataType name="Motor"><baseType><INT/></baseType></dataType>',
        pous=pou("Drive", "functionBlock")
        + pou(
            "Main",
            "program",
            section("localVars", *(var(f"v{i}", name) for i, name in enumerate([*standard, "motor", "DRIVE"]))),
        ),
    )
    assert only(root, "unknown_type") == []


def test_a_program_or_function_is_not_a_variable_type():
    root = project(
        pous=pou("Helper", "function", returns="INT")
        + pou("Other", "program")
        + pou("Main", "program", section("localVars", var("a", "Helper"), var("b", "Other")))
    )
    messages = {f.element_id: f.message for f in only(root, "unknown_type")}
    assert set(messages) == {"pou/Main/var/a", "pou/Main/var/b"}
    assert "is a function" in messages["pou/Main/var/a"]


def test_library_types_are_known_by_default_and_can_be_replaced():
    assert "python_eval" in LIBRARY_TYPES
    root = project(pous=pou("Main", "program", section("localVars", var("p", "python_eval"), var("v", "VendorFB"))))
    assert {e for c, e in found(root) if c == "unknown_type"} == {"pou/Main/var/v"}
    assert {e for c, e in found(root, known_types=["VendorFB"]) if c == "unknown_type"} == {"pou/Main/var/p"}


def test_unknown_types_inside_arrays_structures_and_results_are_reported():
    array = '<array><dimension lower="0" upper="3"/><baseType><derived name="Nope"/></baseType></array>'
    root = project(
        data_types='<dataType name="S"><baseType><struct>' + var("m", "Missing") + "</struct></baseType></dataType>",
        pous=pou("F", "function", section("inputVars", var("a", array)), returns="Gone"),
    )
    findings = only(root, "unknown_type")
    assert {f.element_id for f in findings} == {"type/S", "pou/F", "pou/F/var/a"}
    assert any("member 'm' of data type 'S'" in f.message for f in findings)


def test_an_instance_must_run_a_program_of_the_project():
    root = project(
        pous=pou("Main", "program") + pou("Fb", "functionBlock"),
        configurations=configuration(
            resources=resource(
                tasks=task("T", instance("a", "Main"), instance("b", "Missing")), instances=instance("c", "Fb")
            )
        ),
    )
    assert {f.element_id for f in only(root, "unknown_type")} == {
        "config/C0/resource/R0/task/T/instance/b",
        "config/C0/resource/R0/instance/c",
    }


# ---------------------------------------------------------------------------------------------------------
# Initial values
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "init"),
    [
        ("INT", "40000"),
        ("SINT", "-129"),
        ("UINT", "-1"),
        ("BYTE", "16#100"),
        ("BOOL", "maybe"),
        ("REAL", "1,5"),
        ("TIME", "500ms"),
        ("DATE", "D#2024-02-30"),
        ("TOD", "TOD#25:00:00"),
        ("DT", "DT#2024-01-01"),
        ('<string length="3"/>', "'abcd'"),
        ("string", "'a'b'"),
        ("wstring", '"$00"'),
    ],
)
def test_an_initial_value_that_does_not_fit_an_elementary_type_is_reported(type_name, init):
    root = project(
        pous=pou("Main", "program", section("localVars", var("v", type_name, init=init.replace('"', "&quot;"))))
    )
    assert found(root) >= {("bad_initial_value", "pou/Main/var/v")}


@pytest.mark.parametrize(
    ("type_name", "init"),
    [
        ("INT", "-32768"),
        ("BOOL", "FALSE"),
        ("TIME", "t#1.5s"),
        ('<string length="4"/>', "'abcd'"),
        # Beremiz writes STRING initial values without quotes and adds them when it generates code.
        ('<string length="4"/>', "test"),
        ("wstring", "wide"),
    ],
)
def test_a_valid_initial_value_is_not_reported(type_name, init):
    root = project(
        pous=pou("F", "functionBlock", section("localVars", var("v", type_name, init=init)), body=st("v := v;"))
    )
    assert check(root) == []


def test_an_unquoted_beremiz_string_still_has_to_fit_its_length():
    root = project(pous=pou("Main", "program", section("localVars", var("v", '<string length="3"/>', init="toolong"))))
    assert found(root) >= {("bad_initial_value", "pou/Main/var/v")}


def test_initial_values_of_aliases_enumerations_and_subranges_follow_their_data_type():
    root = project(
        data_types='<dataType name="Speed"><baseType><USINT/></baseType></dataType>'
        '<dataType name="Mode"><baseType><enum><values><value name="Idle"/><value name="Run"/></values></enum>'
        "</baseType></dataType>"
        '<dataType name="Percent"><baseType><subrangeUnsigned><range lower="0" upper="100"/><baseType><USINT/>'
        "</baseType></subrangeUnsigned></baseType></dataType>",
        pous=pou(
            "Main",
            "program",
            section(
                "localVars",
                var("s1", "Speed", init="200"),
                var("s2", "Speed", init="300"),
                var("m1", "Mode", init="Mode#Run"),
                var("m2", "Mode", init="Walk"),
                var("m3", "Mode", init="Other#Run"),
                var("p1", "Percent", init="100"),
                var("p2", "Percent", init="101"),
            ),
            body=st("s1 := s2; m1 := m2; m3 := m1; p1 := p2;"),
        ),
    )
    assert {e for c, e in found(root) if c == "bad_initial_value"} == {
        "pou/Main/var/s2",
        "pou/Main/var/m2",
        "pou/Main/var/m3",
        "pou/Main/var/p2",
    }


def test_array_and_structure_initial_values_are_checked_element_by_element():
    array = '<array><dimension lower="0" upper="2"/><baseType><SINT/></baseType></array>'
    values = "".join(f'<value><simpleValue value="{v}"/></value>' for v in ("1", "200"))
    too_many = '<value repetitionValue="4"><simpleValue value="0"/></value>'
    root = project(
        data_types='<dataType name="P"><baseType><struct>' + var("X", "REAL") + "</struct></baseType></dataType>",
        pous=pou(
            "Main",
            "program",
            section(
                "localVars",
                var("a1", array, init=f"<arrayValue>{values}</arrayValue>"),
                var("a2", array, init=f"<arrayValue>{too_many}</arrayValue>"),
                var("s1", "P", init='<structValue><value member="X"><simpleValue value="x"/></value></structValue>'),
                var("s2", "P", init='<structValue><value member="Z"><simpleValue value="1.0"/></value></structValue>'),
                var("s3", "P", init='<structValue><value member="x"><simpleValue value="1.0"/></value></structValue>'),
            ),
            body=st("a1 := a2; s1 := s2; s3 := s1;"),
        ),
    )
    messages = {f.element_id: f.message for f in only(root, "bad_initial_value")}
    assert set(messages) == {"pou/Main/var/a1", "pou/Main/var/a2", "pou/Main/var/s1", "pou/Main/var/s2"}
    assert "element 2" in messages["pou/Main/var/a1"]
    assert "4 values for an array of 3" in messages["pou/Main/var/a2"]


def test_initial_values_of_data_types_and_globals_are_checked():
    root = project(
        data_types='<dataType name="Small"><baseType><SINT/></baseType><initialValue><simpleValue value="999"/>'
        "</initialValue></dataType>",
        configurations=configuration(globals_=section("globalVars", var("G", "BOOL", init="2"))),
    )
    assert found(root) == {("bad_initial_value", "type/Small"), ("bad_initial_value", "config/C0/var/G")}


def test_a_data_type_defined_through_itself_does_not_loop():
    root = project(
        data_types='<dataType name="A"><baseType><derived name="B"/></baseType></dataType>'
        '<dataType name="B"><baseType><derived name="A"/></baseType></dataType>',
        pous=pou(
            "F", "functionBlock", section("localVars", var("v", "A", init="1", address="%MW0")), body=st("v := v;")
        ),
    )
    assert check(root) == []


# ---------------------------------------------------------------------------------------------------------
# Addresses
# ---------------------------------------------------------------------------------------------------------


def test_a_malformed_address_is_reported():
    root = project(
        pous=pou(
            "Main",
            "program",
            section("localVars", var("a", "BOOL", address="%ZX0.0"), var("b", "BOOL", address="QX0.0")),
        ),
        configurations=configuration(resources=resource(tasks=task("T", instance("i", "Main")))),
    )
    assert {e for c, e in found(root) if c == "bad_address"} == {"pou/Main/var/a", "pou/Main/var/b"}


def test_an_address_whose_size_does_not_fit_the_type_is_reported():
    root = project(
        data_types='<dataType name="Flag"><baseType><BOOL/></baseType></dataType>',
        pous=pou(
            "Main",
            "program",
            section(
                "localVars",
                var("ok1", "BOOL", address="%IX0.0"),
                var("ok2", "INT", address="%IW1"),
                var("ok3", "REAL", address="%MD2"),
                var("ok4", "BOOL", address="%I*"),
                var("bad1", "BOOL", address="%IW3"),
                var("bad2", "Flag", address="%QB0"),
            ),
            body=st("ok1 := ok4; ok2 := 1; ok3 := 1.0; bad1 := bad2;"),
        ),
        configurations=configuration(resources=resource(tasks=task("T", instance("i", "Main")))),
    )
    findings = only(root, "bad_address")
    assert {f.element_id for f in findings} == {"pou/Main/var/bad1", "pou/Main/var/bad2"}
    assert all("use an address whose size fits the type" in f.message for f in findings)


def test_the_same_address_in_two_pous_is_a_duplicate():
    root = project(
        pous=pou("A", "program", section("localVars", var("x", "BOOL", address="%QX0.0")), body=st("x := TRUE;"))
        + pou("B", "program", section("localVars", var("y", "BOOL", address="%Q0.0")), body=st("y := TRUE;")),
        configurations=configuration(resources=resource(tasks=task("T", instance("a", "A"), instance("b", "B")))),
    )
    findings = only(root, "duplicate_address")
    assert [(f.element_id, f.severity) for f in findings] == [("pou/B/var/y", "problem")]
    assert "%QX0.0" in findings[0].message and "pou/A/var/x" in findings[0].message


def test_the_same_address_in_one_configuration_is_a_duplicate_but_not_across_configurations():
    root = project(
        configurations=configuration(
            "C0",
            resources=resource("R0", globals_=section("globalVars", var("a", "INT", address="%MW0"))),
            globals_=section("globalVars", var("b", "INT", address="%MW0")),
        )
        + configuration("C1", globals_=section("globalVars", var("c", "INT", address="%MW0")))
    )
    assert {e for c, e in found(root) if c == "duplicate_address"} == {"config/C0/var/b"}


def test_incomplete_addresses_are_never_duplicates():
    root = project(
        configurations=configuration(
            globals_=section("globalVars", var("a", "BOOL", address="%I*"), var("b", "BOOL", address="%I*"))
        )
    )
    assert check(root) == []


# ---------------------------------------------------------------------------------------------------------
# Undeclared identifiers
# ---------------------------------------------------------------------------------------------------------


def test_an_undeclared_identifier_in_st_is_reported_once_on_the_pou():
    root = project(
        pous=pou("Main", "program", section("localVars", var("x")), body=st("x := Spead + 1;\nx := spead;")),
        configurations=configuration(resources=resource(tasks=task("T", instance("i", "Main")))),
    )
    findings = check(root)
    assert [(f.code, f.element_id) for f in findings] == [("undeclared_identifier", "pou/Main")]
    assert "'Spead'" in findings[0].message and "line 1" in findings[0].message


def test_standard_functions_conversions_globals_enum_values_pous_and_members_are_declared():
    root = clean()
    assert only(root, "undeclared_identifier") == []


def test_values_of_an_enumeration_declared_in_a_variable_of_any_pou_are_declared_names():
    inline = (
        '<variable name="mode"><type><enum><values><value name="Filling"/><value name="Draining"/></values>'
        "</enum></type></variable>"
    )
    root = project(
        pous=pou("Tank", "functionBlock", section("localVars", inline), body=st("mode := Filling;"))
        + pou("Main", "program", section("localVars", var("x")), body=st("x := Draining; x := Emptying;")),
        configurations=configuration(resources=resource(tasks=task("T", instance("i", "Main")))),
    )
    messages = [f.message for f in only(root, "undeclared_identifier")]
    assert len(messages) == 1 and "'Emptying'" in messages[0]


def test_st_in_actions_transitions_and_sfc_inline_code_is_read():
    sfc = (
        '<body><SFC><step localId="1" name="Start" initialStep="true"><position x="0" y="0"/></step>'
        '<transition localId="2"><position x="0" y="0"/><condition><inline name="c">'
        "<ST><xhtml:p><![CDATA[Ghost1 AND Start.X]]></xhtml:p></ST></inline></condition></transition>"
        "</SFC></body>"
    )
    actions = '<actions><action name="Act"><body><ST><xhtml:p><![CDATA[Ghost2 := 1;]]></xhtml:p></ST></body></action></actions>'
    root = project(
        pous=pou("Seq", "functionBlock", section("localVars", var("x")), body=sfc).replace(
            "</interface>", "</interface>" + actions
        )
    )
    messages = [f.message for f in only(root, "undeclared_identifier")]
    assert len(messages) == 2
    assert any("'Ghost1'" in m and "SFC transition" in m for m in messages)
    assert any("'Ghost2'" in m and "action 'Act'" in m for m in messages)


def test_formal_parameters_and_members_of_instances_are_not_identifiers_of_the_pou():
    root = project(
        pous=pou(
            "Main",
            "program",
            section("localVars", var("t", "TON"), var("done", "BOOL")),
            body=st("t(IN := NOT done, PT := T#1s, Q => done, ET => );\ndone := t.Q OR t.ET > T#0s;"),
        ),
        configurations=configuration(resources=resource(tasks=task("T", instance("i", "Main")))),
    )
    assert check(root) == []


# ---------------------------------------------------------------------------------------------------------
# Unused variables and programs that never run
# ---------------------------------------------------------------------------------------------------------


def test_an_unused_local_or_temp_variable_of_an_st_pou_is_an_advisory():
    root = project(
        pous=pou(
            "Calc",
            "functionBlock",
            section("inputVars", var("In1")),
            section("outputVars", var("Out1")),
            section("localVars", var("Used"), var("Spare")),
            section("tempVars", var("Scratch")),
            body=st("Used := 1; (* Spare *)"),
        )
    )
    findings = only(root, "unused_variable")
    assert [(f.element_id, f.severity) for f in findings] == [
        ("pou/Calc/var/Scratch", "advisory"),
        ("pou/Calc/var/Spare", "advisory"),
    ]


def test_a_variable_used_only_in_a_pragma_counts_as_used():
    root = project(pous=pou("F", "functionBlock", section("localVars", var("Buf")), body=st("{{ SetFbVar(BUF, 1); }}")))
    assert only(root, "unused_variable") == []


def test_variables_of_pous_with_graphical_bodies_are_not_judged():
    fbd = '<body><FBD><inVariable localId="1"><position x="0" y="0"/><connectionPointOut/><expression>Spare</expression></inVariable></FBD></body>'
    root = project(pous=pou("F", "functionBlock", section("localVars", var("Spare")), body=fbd))
    assert only(root, "unused_variable") == []


def test_a_program_without_an_instance_is_an_advisory():
    root = project(pous=pou("Main", "program") + pou("Lib", "functionBlock"))
    findings = only(root, "program_not_instantiated")
    assert [(f.element_id, f.severity) for f in findings] == [("pou/Main", "advisory")]


def test_a_program_instantiated_by_a_resource_without_a_task_runs():
    root = project(
        pous=pou("Main", "program"),
        configurations=configuration(resources=resource(instances=instance("i", "main"))),
    )
    assert check(root) == []


# ---------------------------------------------------------------------------------------------------------
# The fixtures
# ---------------------------------------------------------------------------------------------------------

# The invalid fixture imitates an old editor's export and carries deliberate mistakes.
LEGACY_FINDINGS = {
    ("bad_address", "config/Workshop/resource/Station/var/Speed"),
    ("bad_address", "config/Workshop/var/Running"),
    ("bad_address", "config/Workshop/var/Setpoint"),
    ("bad_initial_value", "pou/Majority/var/B"),
    ("program_not_instantiated", "pou/Mixer"),
    ("undeclared_identifier", "pou/Hoist"),
}


def load(path: Path) -> etree._Element:
    return etree.parse(str(path), etree.XMLParser(strip_cdata=False)).getroot()


@pytest.mark.parametrize("path", fixture_params())
def test_every_fixture_is_checked_with_known_codes_and_element_ids(path):
    root = load(path)
    findings = check(root)
    for finding in findings:
        assert finding.severity == SEVERITIES[finding.code]
        assert finding.element_id.split("/")[0] in {"pou", "type", "config"}
        assert finding.message
    if path.name not in INVALID_FIXTURES:
        assert findings == [], [f.to_dict() for f in findings]


def test_the_deliberate_mistakes_of_the_invalid_fixture_are_found():
    findings = check(load(fixture_path(INVALID)))
    assert {(f.code, f.element_id) for f in findings} == LEGACY_FINDINGS
    undeclared = sorted(f.message.split("'")[1] for f in findings if f.code == "undeclared_identifier")
    assert undeclared == ["Brake", "Overload", "TopStop", "creep"]


def test_library_types_are_unknown_when_only_iec_types_are_known():
    findings = check(load(fixture_path("batch_records.xml")), known_types=())
    unknown = {re.search(r"unknown: '([^']+)'", f.message).group(1) for f in findings if f.code == "unknown_type"}
    assert unknown == {"PID", "RTC"}


def test_checking_some_pous_gives_the_whole_checks_findings_about_them_and_the_rest_of_the_project():
    root = project(
        pous=pou("First", "program", section("localVars", var("unused_a")), body=st("Missing1 := 1;"))
        + pou("Second", "program", section("localVars", var("unused_b")), body=st("Missing2 := 2;")),
    )
    everything = set(check(root))
    some = set(check(root, pous={"FIRST"}))

    def inside_second(finding: Finding) -> bool:
        return finding.element_id.casefold().startswith("pou/second")

    left_out = everything - some
    assert some <= everything
    assert left_out and all(inside_second(f) for f in left_out)
    assert {f.code for f in left_out} == {"undeclared_identifier", "unused_variable"}


def test_st_kept_in_a_pous_add_data_is_not_read():
    kept = (
        '<addData><data name="https://example.com/vendor" handleUnknown="discard">'
        "<ST><xhtml:p><![CDATA[Ghost := 1;]]></xhtml:p></ST></data></addData>"
    )
    root = project(
        pous=pou("Main", "program", section("localVars", var("x")), body=st("x := 1;")).replace(
            "</pou>", f"{kept}</pou>"
        ),
        configurations=configuration(resources=resource(tasks=task("T", instance("i", "Main")))),
    )
    assert only(root, "undeclared_identifier") == []


def test_a_checks_xpath_calls_do_not_grow_with_its_pous(monkeypatch):
    """lxml lets go of the GIL twice on every XPath call, and each time a thread waiting for it wakes, finds it
    taken again and starts its wait over: a check searches the whole document with XPath a fixed number of times
    and walks each POU without it (the 50,000-variable project made 3,514 calls, 7,032 releases)."""
    paths: list[str] = []
    search = findings._xpath
    monkeypatch.setattr(findings, "_xpath", lambda element, path: paths.append(path) or search(element, path))
    sfc = (
        '<body><SFC><step localId="1" name="Start" initialStep="true"><position x="0" y="0"/></step>'
        '<transition localId="2"><position x="0" y="0"/><condition><inline name="c">'
        "<ST><xhtml:p><![CDATA[Start.X]]></xhtml:p></ST></inline></condition></transition>"
        "</SFC></body>"
    )
    actions = (
        '<actions><action name="Act"><body><ST><xhtml:p><![CDATA[x := 1;]]></xhtml:p></ST></body></action></actions>'
    )
    mode = '<variable name="mode"><type><enum><values><value name="A"/></values></enum></type></variable>'

    def calls(pous: int) -> int:
        paths.clear()
        sequences = "".join(
            pou(f"Seq{n}", "functionBlock", section("localVars", var("x"), mode), body=sfc).replace(
                "</interface>", "</interface>" + actions
            )
            for n in range(pous)
        )
        check(project(data_types=CLEAN_TYPES, pous=sequences + CLEAN_FB + CLEAN_MAIN))
        return len(paths)

    assert calls(1) == calls(10)
