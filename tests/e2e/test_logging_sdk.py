"""MCP logging end to end: the official `mcp` SDK client against the live server sets the session's log level
(logging/setLevel) and then hears `notifications/message` for its own tool calls, at or above that level, on
the call's own event stream; before it sets one it hears nothing."""

from __future__ import annotations

import warnings

import anyio
import pytest
from mcp.types import LoggingMessageNotificationParams

from tests.live import streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30  # seconds for one whole conversation on loopback


async def test_the_sdk_client_hears_its_calls_log_messages_once_it_sets_a_level(forge_server):
    heard: list[LoggingMessageNotificationParams] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        heard.append(params)

    with anyio.fail_after(BOUND):
        async with streamable_client(forge_server, mode="legacy", logging_callback=on_log) as client:
            assert client.server_capabilities.logging is not None
            await client.call_tool("server_info", {})
            before = list(heard)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated only from 2026-07-28 on; this session is 2025-11-25
                await client.set_logging_level("info")
            answered = await client.call_tool("server_info", {})
            refused = await client.call_tool("project.overview", {"project": "no-such-project"})

    assert before == []
    assert answered.is_error is False and refused.is_error is True
    assert [(m.level, m.logger, m.data["tool"]) for m in heard] == [
        ("info", "forge.tools", "server_info"),
        ("warning", "forge.tools", "project.overview"),
    ]
    assert heard[1].data["code"] == refused.structured_content["error"]
