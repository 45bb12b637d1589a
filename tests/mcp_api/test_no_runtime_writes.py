"""No tool of this server forces, writes or pins a value in a running controller (DESIGN section 13: the
runtime monitor only reports). The registry is read whole, the direct-write tools of override deployments
included: a tool named force... (in any part of its dotted name) or one whose description offers to force,
write, set, pin or override a runtime value fails the test. The checker's own tests show it notices such a
tool and leaves alone the project-file writes and a description that only reports `forced`."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from mcp_api.registry import REGISTRY, NoArguments, Tool
from mcp_api.tools.writes import register_write_tools, unregister_write_tools

VERBS = r"(?:force|forces|forcing|write|writes|writing|set|sets|setting|pin|pins|pinning|override|overrides|overriding)"
RUNTIME = r"(?:runtime|live|online|running|controller|plc|process)"
OFFERS_TO_CHANGE_A_RUNTIME_VALUE = re.compile(
    rf"\b{VERBS}\b[^.;:]{{0,60}}?\b{RUNTIME}\b[^.;:]{{0,20}}?\b(?:values?|variables?|outputs?|inputs?|i/o|tags?)\b"
    rf"|\b{VERBS}\b[^.;:]{{0,20}}?\b(?:values?|variables?|outputs?|inputs?|tags?)\b[^.;:]{{0,30}}?\b(?:on|in|of)\s+the\s+{RUNTIME}\b",
    re.IGNORECASE,
)


def offends(tool: Tool) -> str | None:
    """Why a tool would change a runtime value, or None."""
    if any(part.lower().startswith("force") for part in re.split(r"[._\-]", tool.name)):
        return f"{tool.name}: its name offers to force"
    offer = OFFERS_TO_CHANGE_A_RUNTIME_VALUE.search(f"{tool.title}. {tool.description}")
    if offer is not None:
        return f"{tool.name}: its description offers to change a runtime value ({offer.group(0)!r})"
    return None


@pytest.fixture
def every_tool(settings) -> Iterator[list[Tool]]:
    settings.FORGE_OVERRIDE_SECURITIES = True
    register_write_tools()
    yield list(REGISTRY.values())
    unregister_write_tools()


def declared(name: str, description: str, title: str = "A tool") -> Tool:
    return Tool(name=name, title=title, description=description, arguments=NoArguments, handler=lambda ctx, a: {})


def test_no_registered_tool_offers_to_force_write_or_pin_a_runtime_value(every_tool):
    names = {tool.name for tool in every_tool}
    assert {"monitor.snapshot", "project.write.add_variable", "team.revoke_peer"} <= names  # the whole table
    assert [why for tool in every_tool if (why := offends(tool))] == []


def test_the_monitor_tool_is_registered_read_only(every_tool):
    monitor = REGISTRY["monitor.snapshot"]
    assert monitor.read_only and not monitor.destructive
    assert offends(monitor) is None


@pytest.mark.parametrize(
    "tool",
    [
        declared("force.variable", "Reads a variable."),
        declared("monitor.force", "Reads a variable."),
        declared("monitor.forceValue", "Reads a variable."),
        declared("runtime.set", "Write a runtime value to the PLC."),
        declared("monitor.pin", "Pins the live value of a variable until released."),
        declared("monitor.hold", "Forces a variable on the running controller to the value given."),
        declared("monitor.apply", "Sets the output on the PLC."),
        declared("monitor.apply", "Overrides the runtime input values for a test."),
        declared("io.apply", "Reads nothing.", title="Write online variables"),
    ],
    ids=["force-family", "force-verb", "force-camel", "write", "pin", "force-text", "set", "override", "title"],
)
def test_the_checker_notices_a_tool_that_would_change_a_runtime_value(tool):
    assert offends(tool) is not None


@pytest.mark.parametrize(
    "tool",
    [
        declared("project.write.add_variable", "Add a variable to a POU's interface, written to the project file."),
        declared("monitor.snapshot", "The latest values, each with forced (whether the controller holds it forced)."),
        declared("project.write.set_pou_body", "Set the ST body of a POU in the project."),
    ],
    ids=["file-write", "reports-forced", "set-body"],
)
def test_the_checker_leaves_project_writes_and_reports_alone(tool):
    assert offends(tool) is None
