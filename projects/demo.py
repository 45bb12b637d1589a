"""The demo project of the quickstart: a small conveyor line, built with the operation vocabulary.

It is made here rather than copied from a sample (the samples are other tools' files, kept as test
fixtures), and it is built by `operations.apply` on an empty skeleton, so the demo is also a check that
the vocabulary produces a schema-valid project.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from projects import operations
from projects.plcopen import documents
from projects.plcopen.tc6 import project_skeleton

CREATED = "2026-01-01T00:00:00"

SKELETON = project_skeleton(
    name="Conveyor line demo",
    product="Forge MCP demo",
    company="Forge MCP",
    created=CREATED,
    modified=CREATED,
    configurations='      <configuration name="Plant">\n        <resource name="Cpu"/>\n      </configuration>\n',
)

MOTOR_BODY = """(* Runs the motor while enabled and no fault is latched. *)
IF Reset THEN
  Fault := FALSE;
END_IF;
IF Overload THEN
  Fault := TRUE;
END_IF;
Running := Enable AND NOT Fault;
"""

CONVEYOR_BODY = """(* Start the belt when a part waits at the infeed; stop it at the end of the line. *)
StartDelay(IN := PartAtInfeed AND NOT PartAtEnd, PT := T#500ms);
BeltMotor(Enable := StartDelay.Q AND NOT EmergencyStop, Overload := MotorOverload, Reset := ResetButton);
BeltRunning := BeltMotor.Running;
IF BeltRunning THEN
  PartsMoved := PartsMoved + 1;
END_IF;
"""

OPERATIONS: list[dict[str, Any]] = [
    {"op": "add_data_type", "name": "LineMode", "values": ["Stopped", "Manual", "Automatic"]},
    {
        "op": "add_pou",
        "name": "Motor",
        "pou_type": "functionBlock",
        "language": "ST",
        "body": MOTOR_BODY,
        "documentation": "A motor with an enable, an overload input and a latched fault.",
        "variables": [
            {"section": "inputVars", "name": "Enable", "type": "BOOL"},
            {"section": "inputVars", "name": "Overload", "type": "BOOL"},
            {"section": "inputVars", "name": "Reset", "type": "BOOL"},
            {"section": "outputVars", "name": "Running", "type": "BOOL"},
            {"section": "outputVars", "name": "Fault", "type": "BOOL"},
        ],
    },
    {
        "op": "add_pou",
        "name": "Conveyor",
        "pou_type": "program",
        "language": "ST",
        "body": CONVEYOR_BODY,
        "documentation": "The infeed conveyor of line 1.",
        "variables": [
            {"section": "localVars", "name": "PartAtInfeed", "type": "BOOL", "address": "%IX0.0"},
            {"section": "localVars", "name": "PartAtEnd", "type": "BOOL", "address": "%IX0.1"},
            {"section": "localVars", "name": "EmergencyStop", "type": "BOOL", "address": "%IX0.2"},
            {"section": "localVars", "name": "MotorOverload", "type": "BOOL", "address": "%IX0.3"},
            {"section": "localVars", "name": "ResetButton", "type": "BOOL", "address": "%IX0.4"},
            {"section": "localVars", "name": "BeltRunning", "type": "BOOL", "address": "%QX0.0"},
            {
                "section": "localVars",
                "name": "PartsMoved",
                "type": "UDINT",
                "initial_value": "0",
                "documentation": "Parts moved since start-up.",
            },
            {"section": "localVars", "name": "Mode", "type": "LineMode", "initial_value": "Automatic"},
            {"section": "localVars", "name": "StartDelay", "type": "TON"},
            {"section": "localVars", "name": "BeltMotor", "type": "Motor"},
        ],
    },
    {"op": "add_task", "resource": "config/Plant/resource/Cpu", "name": "Fast", "priority": 1, "interval": "T#20ms"},
    {
        "op": "add_pou_instance",
        "target": "config/Plant/resource/Cpu/task/Fast",
        "name": "Line1",
        "type_name": "Conveyor",
    },
]


def demo_project_bytes() -> bytes:
    """The demo project's file: the same bytes every time (its modification time is fixed)."""
    skeleton = documents.load(SKELETON.encode())
    built = operations.apply(skeleton, operations.parse_operations(OPERATIONS), now=datetime(2026, 1, 1, tzinfo=UTC))
    return documents.serialize(built.doc)
