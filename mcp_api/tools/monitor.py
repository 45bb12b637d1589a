"""The runtime monitor's tool (DESIGN section 13): `monitor.snapshot`, the latest values runtime connectors
posted for a project's variables (`access.runtime`).

It only reads. No tool of this server changes a value in a running controller, and
`tests/mcp_api/test_no_runtime_writes.py` keeps it so: it fails on a tool named `force...` or one whose
description offers to force, write or pin a runtime value.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from access import runtime
from mcp_api.protocol import CallContext
from mcp_api.registry import NEEDS_GRANT, tool
from mcp_api.tools.common import ProjectArguments

MAX_VARIABLES_PER_CALL = 100

VariableName = Annotated[str, Field(min_length=1, max_length=runtime.MAX_VARIABLE_CHARS)]


class SnapshotArguments(ProjectArguments):
    variables: list[VariableName] = Field(
        min_length=1,
        max_length=MAX_VARIABLES_PER_CALL,
        description=f"The variables to read, 1 to {MAX_VARIABLES_PER_CALL}, as the project names them "
        "(e.g. Main.MotorSpeed).",
    )


@tool("monitor.snapshot", title="Runtime values", arguments=SnapshotArguments, needs=NEEDS_GRANT)
def monitor_snapshot(ctx: CallContext, args: SnapshotArguments) -> dict[str, Any]:
    """The latest values the project's runtime connector reported for the named variables: each with forced
    (whether the running controller holds it forced), observed_at and age_seconds (how old the reading is;
    a large age means the connector has stopped reporting). Names never reported are listed in unknown.
    Read-only: it reports what runs, and changes nothing on the controller."""
    return runtime.latest_values(ctx.project, args.variables)
