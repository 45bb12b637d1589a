"""No tool makes a change the project by itself: acceptance is a person's, in the console (DESIGN 8.1)."""

from __future__ import annotations

import re

import pytest

from mcp_api.registry import REGISTRY
from mcp_api.tools.writes import register_write_tools, unregister_write_tools

OFFERS = re.compile(r"\b(accept|apply|promote|commit)\b", re.IGNORECASE)


@pytest.fixture
def every_tool(settings):
    settings.FORGE_OVERRIDE_SECURITIES = True
    register_write_tools()
    yield list(REGISTRY.values())
    unregister_write_tools()


def test_no_tool_name_or_description_offers_to_accept_apply_promote_or_commit(every_tool):
    offending = [
        f"{tool.name}: {match.group(0)!r}"
        for tool in every_tool
        for match in [OFFERS.search(tool.name.replace(".", " ").replace("_", " ")), OFFERS.search(tool.description)]
        if match
    ]
    assert offending == []


def test_the_check_catches_an_offering_word():
    assert OFFERS.search("Call change_group.commit to apply the draft")
    assert not OFFERS.search("with its accepted revision; the applied changes")
