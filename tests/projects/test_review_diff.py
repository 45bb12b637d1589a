"""The change as a PLC engineer reads it (projects.review_diff): POU by POU, the body as a line diff with
both line numbers, the variable table as a table diff, the other elements by id; computed from two
documents of the main fixture project, the second made by the operations a client would send."""

from __future__ import annotations

from typing import Any

import pytest

from projects import operations
from projects.plcopen import documents
from projects.review_diff import BODY_ROWS_MAX, change_view, line_diff, own_content_differs
from tests.projects.conftest import MAIN, fixture_bytes

NEW_BODY = """(* The flow meter gives PulsesPerLitre pulses per litre; count rising edges. *)
IF Clear THEN
  Pulses := 0;
  Spill := FALSE;
ELSIF Pulse AND NOT LastPulse THEN
  Pulses := Pulses + 1;
END_IF;
LastPulse := Pulse;
Litres := Pulses / PulsesPerLitre;"""


@pytest.fixture(scope="module")
def accepted() -> documents.ProjectDocument:
    return documents.load(fixture_bytes(MAIN))


def changed(accepted: documents.ProjectDocument, *ops: dict[str, Any]) -> dict[str, Any]:
    return change_view(accepted, operations.apply(accepted, list(ops)).doc)


def unit(view: dict[str, Any], element_id: str) -> dict[str, Any]:
    return next(u for u in view["units"] if u["id"] == element_id)


def variable_rows(found: dict[str, Any]) -> dict[str, tuple[str, list[Any]]]:
    """name -> (status, [(before, after, changed) per column]) of a unit's variable table diff."""
    return {
        row["name"]: (row["status"], [(c["before"], c["after"], c["changed"]) for c in row["cells"]])
        for row in found["variables"]["rows"]
    }


def test_a_new_st_body_is_a_line_diff_with_the_old_and_new_line_numbers(accepted):
    view = changed(accepted, {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": NEW_BODY})

    body = unit(view, "pou/FlowTotal")["body"]

    assert (body["language"], body["rendered"], body["cut"]) == ("ST", True, 0)
    assert [(r["kind"], r["old"], r["new"], r["text"]) for r in body["rows"]] == [
        ("hunk", None, None, "@@ -1,6 +1,7 @@"),
        ("same", 1, 1, "(* The flow meter gives PulsesPerLitre pulses per litre; count rising edges. *)"),
        ("same", 2, 2, "IF Clear THEN"),
        ("same", 3, 3, "  Pulses := 0;"),
        ("added", None, 4, "  Spill := FALSE;"),
        ("same", 4, 5, "ELSIF Pulse AND NOT LastPulse THEN"),
        ("same", 5, 6, "  Pulses := Pulses + 1;"),
        ("same", 6, 7, "END_IF;"),
    ]


def test_a_changed_line_is_the_old_line_removed_and_the_new_one_added():
    rows = line_diff(["a := 1;", "b := 2;", "c := 3;"], ["a := 1;", "b := 20;", "c := 3;"])

    assert [(r["kind"], r["old"], r["new"]) for r in rows] == [
        ("hunk", None, None),
        ("same", 1, 1),
        ("removed", 2, None),
        ("added", None, 2),
        ("same", 3, 3),
    ]


def test_added_removed_and_changed_variables_are_rows_of_the_table_diff_with_the_fields_that_differ(accepted):
    view = changed(
        accepted,
        {"op": "add_variable", "scope": "pou/FlowTotal", "section": "localVars", "name": "Spill", "type": "BOOL"},
        {"op": "remove_variable", "id": "pou/FlowTotal/var/LastPulse"},
        {"op": "update_variable", "id": "pou/FlowTotal/var/Pulses", "type": "DINT"},
        {"op": "update_variable", "id": "pou/FlowTotal/var/Litres", "initial_value": "0"},
    )

    found = unit(view, "pou/FlowTotal")
    rows = variable_rows(found)

    assert found["variables"]["columns"][:4] == ["Section", "Type", "Initial value", "Address"]
    assert set(rows) == {"Spill", "LastPulse", "Pulses", "Litres"}
    assert rows["Spill"][0] == "added" and rows["Spill"][1][:2] == [(None, "localVars", False), (None, "BOOL", False)]
    assert rows["LastPulse"][0] == "removed" and rows["LastPulse"][1][1] == ("BOOL", None, False)
    assert rows["Pulses"] == ("changed", [(c[0], c[1], c[0] != c[1]) for c in rows["Pulses"][1]])
    assert rows["Pulses"][1][1] == ("INT", "DINT", True)
    assert rows["Litres"][1][2] == (None, "0", True)
    assert (found["status"], found["body"], found["facts"]) == ("changed", None, [])


def test_a_pou_that_gains_variables_and_a_new_body_shows_both(accepted):
    view = changed(
        accepted,
        {"op": "add_variable", "scope": "pou/FlowTotal", "section": "localVars", "name": "Spill", "type": "BOOL"},
        {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": NEW_BODY},
    )

    found = unit(view, "pou/FlowTotal")

    assert [u["id"] for u in view["units"]] == ["pou/FlowTotal"]
    assert list(variable_rows(found)) == ["Spill"]
    assert ("added", None, 4, "  Spill := FALSE;") in [
        (r["kind"], r["old"], r["new"], r["text"]) for r in found["body"]["rows"]
    ]


def test_an_added_pou_is_all_added_lines_and_variables(accepted):
    view = changed(
        accepted,
        {"op": "add_pou", "name": "Later", "pou_type": "program", "body": "x := 1;\ny := 2;"},
        {"op": "add_variable", "scope": "pou/Later", "section": "localVars", "name": "x", "type": "INT"},
    )

    found = unit(view, "pou/Later")

    assert (found["status"], found["pou_type"]) == ("added", "program")
    assert [(r["kind"], r["new"], r["text"]) for r in found["body"]["rows"][1:]] == [
        ("added", 1, "x := 1;"),
        ("added", 2, "y := 2;"),
    ]
    assert variable_rows(found)["x"][0] == "added"


def test_a_removed_pou_is_all_removed_lines_and_variables(accepted):
    view = changed(accepted, {"op": "remove_pou", "id": "pou/FlowTotal"})

    found = unit(view, "pou/FlowTotal")

    assert found["status"] == "removed"
    assert {r["kind"] for r in found["body"]["rows"][1:]} == {"removed"}
    last = dict(found["body"]["rows"][-1])
    last.pop("spans")  # the highlighted runs of the removed line, tested on their own
    assert last == {
        "kind": "removed",
        "old": 8,
        "new": None,
        "text": "Litres := Pulses / PulsesPerLitre;",
    }
    assert {status for status, _ in variable_rows(found).values()} == {"removed"}
    assert len(variable_rows(found)) == 6


def test_a_graphical_body_is_named_not_rendered(accepted):
    moved = fixture_bytes(MAIN).replace(b'<position x="40" y="40"/>', b'<position x="48" y="40"/>', 1)

    body = unit(change_view(accepted, documents.load(moved)), "pou/LineMain")["body"]

    assert (body["before_language"], body["language"], body["rendered"], body["rows"]) == ("FBD", "FBD", False, [])


def test_a_variable_added_to_a_configuration_is_a_row_of_its_table(accepted):
    view = changed(accepted, {"op": "add_variable", "scope": "config/Plant", "name": "Shift", "type": "INT"})

    assert [u["id"] for u in view["units"]] == ["config/Plant"]
    assert variable_rows(unit(view, "config/Plant"))["Shift"][0] == "added"


def test_tasks_and_data_types_are_listed_by_id(accepted):
    view = changed(
        accepted,
        {"op": "add_task", "resource": "config/Plant/resource/Cpu1", "name": "Slow", "interval": "T#1s", "priority": 5},
    )

    assert view["others"] == [{"id": "config/Plant/resource/Cpu1/task/Slow", "kind": "task", "status": "added"}]
    assert view["units"] == []


def test_an_unchanged_document_shows_nothing(accepted):
    assert change_view(accepted, accepted) == {"units": [], "others": [], "truncated": False}


def test_a_long_body_diff_is_cut_and_says_so(accepted):
    text = "\n".join(f"x{i} := {i};" for i in range(BODY_ROWS_MAX + 50))
    view = changed(accepted, {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": text})

    found = unit(view, "pou/FlowTotal")

    assert len(found["body"]["rows"]) == BODY_ROWS_MAX and found["body"]["cut"] > 0
    assert found["truncated"] and view["truncated"]


def test_a_variable_that_comes_with_a_section_of_its_own_does_not_change_its_pou(accepted):
    after = operations.apply(
        accepted,
        [{"op": "add_variable", "scope": "pou/FlowTotal", "section": "tempVars", "name": "Scratch", "type": "INT"}],
    ).doc

    view = change_view(accepted, after)

    assert not own_content_differs(accepted.index.get("pou/FlowTotal"), after.index.get("pou/FlowTotal"))
    assert unit(view, "pou/FlowTotal")["other_content"] is False
    assert list(variable_rows(unit(view, "pou/FlowTotal"))) == ["Scratch"]


def test_a_new_body_changes_its_pou_whatever_variables_came_with_it(accepted):
    after = operations.apply(
        accepted,
        [
            {"op": "add_variable", "scope": "pou/FlowTotal", "section": "tempVars", "name": "Scratch", "type": "INT"},
            {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": NEW_BODY},
        ],
    ).doc

    assert own_content_differs(accepted.index.get("pou/FlowTotal"), after.index.get("pou/FlowTotal"))


def test_an_st_body_is_highlighted_run_by_run_and_the_runs_join_to_each_line(accepted):
    view = changed(accepted, {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": NEW_BODY})

    rows = [r for r in unit(view, "pou/FlowTotal")["body"]["rows"] if r["kind"] != "hunk"]

    assert all("".join(text for _, text in r["spans"]) == r["text"] for r in rows)
    by_line = {r["new"]: r["spans"] for r in rows}
    assert by_line[1] == [["comment", NEW_BODY.splitlines()[0]]]
    assert ["keyword", "ELSIF"] in by_line[5] and ["operator", ":="] in by_line[6]


def test_a_finding_is_marked_on_the_line_of_the_body_it_is_about(accepted):
    text = NEW_BODY.replace("  Spill := FALSE;", "  Spill := FALSE\n  Ghost := 1;")
    view = changed(accepted, {"op": "set_pou_body", "id": "pou/FlowTotal", "language": "ST", "text": text})

    rows = {r["new"]: r for r in unit(view, "pou/FlowTotal")["body"]["rows"] if r["kind"] != "hunk"}

    assert ("st_syntax", "problem") in {(m["code"], m["severity"]) for m in rows[4]["marks"]}
    assert [(m["code"], "'Ghost'" in m["message"]) for m in rows[5]["marks"]] == [("undeclared_identifier", True)]
    assert not any("marks" in r for n, r in rows.items() if n not in (4, 5))
