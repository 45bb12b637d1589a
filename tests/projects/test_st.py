"""The ST analysis on tree-sitter's IEC 61131-3 grammar (projects/st.py) and the findings made from it
(issue 18): positions mapped back to the body, each finding code with a body that triggers it and the same
body without the mistake, no syntax problem in any fixture, and a property test over generated ST."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as s

from projects import st as st_analysis
from projects.findings import check
from projects.plcopen.documents import load
from tests.projects.conftest import fixture_params, fixture_path
from tests.projects.test_findings import configuration, instance, pou, project, resource, section, st, task, var

# ---------------------------------------------------------------------------------------------------------
# Positions
# ---------------------------------------------------------------------------------------------------------


def test_a_missing_semicolon_is_reported_at_its_line_and_column_in_the_body():
    (issue,) = st_analysis.analyse("x := 1;\n  y := 2\nz := 3;").issues
    assert (issue.line, issue.column, issue.missing) == (2, 9, ";")
    assert issue.excerpt == "y := 2"


def test_columns_count_characters_after_non_ascii_text_and_comments():
    text = "s := 'élan';\n(* é (* nested *) *) y := ;"
    (issue,) = st_analysis.analyse(text).issues
    assert (issue.line, issue.column) == (2, 26)  # right after ':=', in characters (é is two bytes)
    uses = {(u.name, u.line, u.column) for u in st_analysis.analyse("(* é *) a := b;").uses}
    assert uses == {("a", 1, 9), ("b", 1, 14)}


def test_a_missing_end_if_is_reported_at_the_end_of_the_body_not_in_the_wrapper():
    (issue,) = st_analysis.analyse("IF a THEN\n  b := 1;").issues
    assert (issue.line, issue.missing) == (2, "END_IF")


def test_a_condition_and_a_transition_assignment_parse_without_issues():
    assert st_analysis.analyse("NOT Reset AND (Level > 10)", "condition").issues == ()
    assert st_analysis.analyse(":= AND(a, b);", "condition").issues == ()
    assert st_analysis.analyse("Done := Level = 0;", "condition").issues == ()
    (issue,) = st_analysis.analyse("Level >", "condition").issues
    assert (issue.line, issue.column) == (1, 8)


def test_pragmas_addresses_enumerated_literals_and_unbound_outputs_are_not_syntax_errors():
    text = "{{ char c = GetFbVar(IN); }}\nx := %IX0.0;\nm := Mode#Run;\nt(IN := x, ET => );\nt(ET =>, IN := x);"
    found = st_analysis.analyse(text)
    assert found.issues == ()
    assert {"getfbvar", "in"} <= found.pragma_words
    assert "Z" not in {u.name[:1] for u in found.uses}


def test_roles_of_names_in_calls_assignments_and_loops():
    uses = st_analysis.analyse("t(IN := a, Q => b); c.d[i] := f(e); FOR k := 1 TO n DO END_FOR;").uses
    assert [(u.name, u.role) for u in uses] == [
        ("t", "call"),
        ("a", "read"),
        ("b", "write"),
        ("c", "write"),
        ("i", "read"),
        ("f", "call"),
        ("e", "read"),
        ("k", "write"),
        ("n", "read"),
    ]


def test_a_text_is_parsed_once_and_then_answered_from_the_cache():
    st_analysis.clear_cache()
    first = st_analysis.analyse("x := x + 1;")
    assert st_analysis.analyse("x := x + 1;") is first
    assert st_analysis.parse_count() == 1
    assert st_analysis.analyse("x := x + 1;", "condition") is not first


# ---------------------------------------------------------------------------------------------------------
# Findings: each code, triggered and not
# ---------------------------------------------------------------------------------------------------------

CONFIG = configuration(resources=resource(tasks=task("T", instance("i", "Main"))))


def main(code: str, *sections: str) -> list:
    return check(project(pous=pou("Main", "program", *sections, body=st(code)), configurations=CONFIG))


def codes(found: list) -> set[str]:
    return {f.code for f in found}


LOCALS = section("localVars", var("x"), var("y"))


def test_st_syntax_names_the_body_line_and_column():
    found = [f for f in main("x := 1;\ny := x +;", LOCALS) if f.code == "st_syntax"]
    assert [(f.severity, f.body, f.line, f.column) for f in found] == [("problem", "body", 2, 9)]
    assert found[0].to_dict()["line"] == 2 and "line 2, column 9" in found[0].message
    assert "st_syntax" not in codes(main("x := 1;\ny := x + 1;", LOCALS))


def test_a_vendor_statement_is_an_advisory_never_a_syntax_problem():
    found = main("y S= x;", LOCALS)
    assert {(f.code, f.severity) for f in found if f.code.startswith("st_")} == {("st_dialect", "advisory")}
    assert "st_dialect" not in codes(main("IF x > 0 THEN y := 1; END_IF;", LOCALS))


def test_an_undeclared_name_is_found_at_its_position():
    (found,) = [f for f in main("x := y + zz;", LOCALS) if f.code == "undeclared_identifier"]
    assert (found.line, found.column) == (1, 10)
    assert "undeclared_identifier" not in codes(main("x := y + x;", LOCALS))


def test_an_unused_local_is_an_advisory():
    assert "unused_variable" in codes(main("x := 1;", LOCALS))
    assert "unused_variable" not in codes(main("x := y;", LOCALS))


def test_assigning_a_constant_is_a_problem():
    constants = section("localVars", var("x")).replace("<localVars>", '<localVars constant="true">')
    found = [
        f for f in main("y := x;\nx := 2;", constants, section("localVars", var("y"))) if f.code.startswith("assign")
    ]
    assert [(f.code, f.severity, f.line) for f in found] == [("assignment_to_constant", "problem", 2)]
    assert not codes(main("y := x;", constants, section("localVars", var("y")))) & {"assignment_to_constant"}


def test_assigning_a_constant_global_is_a_problem():
    globals_ = '<globalVars constant="true">' + var("Limit") + "</globalVars>"
    config = configuration(resources=resource(tasks=task("T", instance("i", "Main"))), globals_=globals_)
    body = pou("Main", "program", LOCALS, body=st("x := Limit; y := x;\nLimit := 3;"))
    assert "assignment_to_constant" in codes(check(project(pous=body, configurations=config)))
    body = pou("Main", "program", LOCALS, body=st("x := Limit; y := x;"))
    assert "assignment_to_constant" not in codes(check(project(pous=body, configurations=config)))


def test_assigning_an_input_is_an_advisory():
    inputs = section("inputVars", var("Speed"))
    found = [f for f in main("Speed := 0; x := Speed; y := x;", inputs, LOCALS) if f.code == "assignment_to_input"]
    assert [(f.severity, f.column) for f in found] == [("advisory", 1)]
    assert "assignment_to_input" not in codes(main("x := Speed; y := x;", inputs, LOCALS))


def test_calling_a_variable_that_is_no_instance_is_an_unknown_function():
    timers = section("localVars", var("x"), var("t", "TON"))
    found = [f for f in main("x(IN := TRUE);\nt(IN := TRUE);", timers) if f.code == "unknown_function"]
    assert [(f.severity, f.line) for f in found] == [("problem", 1)]
    assert "unknown_function" not in codes(main("t(IN := TRUE); x := MAX(1, 2);", timers))


def test_calling_a_function_block_type_instead_of_an_instance_is_an_unknown_function():
    timers = section("localVars", var("t", "TON"))
    assert "unknown_function" in codes(main("TON(IN := TRUE, PT := T#1s);", timers))
    assert "unknown_function" not in codes(main("t(IN := TRUE, PT := T#1s);", timers))


# ---------------------------------------------------------------------------------------------------------
# Fixtures and generated ST
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", fixture_params())
def test_no_fixture_has_an_st_syntax_problem(name):
    assert [f for f in check(load(fixture_path(name).read_bytes()).root) if f.code == "st_syntax"] == []


NAMES = s.sampled_from(["a", "b", "Count", "Level_2", "x"])


@s.composite
def expressions(draw: s.DrawFn, depth: int = 0) -> list[str]:
    choice = draw(s.integers(0, 5 if depth < 3 else 1))
    if choice == 0:
        return [draw(NAMES)]
    if choice == 1:
        return [str(draw(s.integers(0, 999)))]
    if choice == 2:
        return ["NOT", "(", *draw(expressions(depth + 1)), ")"]
    if choice == 3:
        operator = draw(s.sampled_from(["+", "-", "*", "/", "AND", "OR", "XOR", "=", "<>", "<", ">=", "MOD"]))
        return ["(", *draw(expressions(depth + 1)), operator, *draw(expressions(depth + 1)), ")"]
    if choice == 4:
        return ["MAX", "(", *draw(expressions(depth + 1)), ",", *draw(expressions(depth + 1)), ")"]
    return ["(", *draw(expressions(depth + 1)), ")"]


@s.composite
def statements(draw: s.DrawFn, depth: int = 0) -> list[str]:
    choice = draw(s.integers(0, 5 if depth < 2 else 0))
    if choice == 0:
        return [draw(NAMES), ":=", *draw(expressions()), ";"]
    body = [token for _ in range(draw(s.integers(1, 2))) for token in draw(statements(depth + 1))]
    if choice == 1:
        tail = ["ELSE", *draw(statements(depth + 1))] if draw(s.booleans()) else []
        return ["IF", *draw(expressions()), "THEN", *body, *tail, "END_IF", ";"]
    if choice == 2:
        return ["WHILE", *draw(expressions()), "DO", *body, "END_WHILE", ";"]
    if choice == 3:
        return ["REPEAT", *body, "UNTIL", *draw(expressions()), "END_REPEAT", ";"]
    if choice == 4:
        return ["FOR", draw(NAMES), ":=", "1", "TO", "10", "BY", "2", "DO", *body, "END_FOR", ";"]
    label = str(draw(s.integers(0, 9)))
    return ["CASE", *draw(expressions()), "OF", label, ":", *body, "END_CASE", ";"]


@given(s.lists(statements(), min_size=1, max_size=4), s.data())
@settings(max_examples=150, deadline=None)
def test_generated_st_parses_and_deleting_a_token_breaks_it_or_changes_the_tree(program, data):
    tokens = [token for statement in program for token in statement]
    text = " ".join(tokens)
    assert st_analysis.analyse(text).issues == ()
    index = data.draw(s.integers(0, len(tokens) - 1))
    shorter = " ".join(tokens[:index] + tokens[index + 1 :])
    assert st_analysis.analyse(shorter).issues or st_analysis.tree_shape(shorter) != st_analysis.tree_shape(text)


# ---------------------------------------------------------------------------------------------------------
# Highlighting
# ---------------------------------------------------------------------------------------------------------


def test_highlight_classes_keywords_literals_comments_pragmas_and_addresses():
    (line,) = st_analysis.highlight("IF a THEN b := 'x' + T#1s; END_IF; (* c *) {p} q := %QX0.1;")
    classed = {text: css for css, text in line if css}
    assert classed["IF"] == classed["END_IF"] == "keyword"
    assert classed["'x'"] == classed["T#1s"] == "string"
    assert (classed["(* c *)"], classed["{p}"], classed["%QX0.1"]) == ("comment", "attribute", "constant")
    assert set(classed.values()) <= st_analysis.HIGHLIGHT_CLASSES


@given(s.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_highlighted_runs_join_to_the_lines_of_any_text(text):
    lines = st_analysis.highlight(text)
    assert ["".join(run for _, run in line) for line in lines] == text.split("\n")


@given(s.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_text_is_analysed_with_positions_inside_it(text):
    lines = text.split("\n")
    found = st_analysis.analyse(text)
    for line, column in [(i.line, i.column) for i in found.issues] + [(u.line, u.column) for u in found.uses]:
        assert 1 <= line <= len(lines) and 1 <= column <= len(lines[line - 1]) + 1
