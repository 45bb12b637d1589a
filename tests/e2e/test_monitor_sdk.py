"""The runtime monitor end to end: a runtime token made with `manage.py runtime_token create`, a snapshot
posted over HTTP to the live server, and the values read back with monitor.snapshot through the official
`mcp` SDK client (a handshake session, after an operator allows the access from a shell)."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import httpx
import pytest

from tests.live import LiveServer, bearer, streamable_client
from tests.projects.conftest import MAIN, fixture_path

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 20  # seconds for the whole conversation on loopback
SLUG = "sdk-monitored-line"


async def test_values_a_connector_posts_come_back_through_monitor_snapshot(forge_server: LiveServer):
    forge_server.manage("import_project", str(fixture_path(MAIN)), "--slug", SLUG)
    runtime_token = forge_server.manage("runtime_token", "create", SLUG, "--operator", "live").strip().splitlines()[-1]
    taken_at = datetime.now(UTC).replace(microsecond=0)
    sent = [
        {"variable": "LineMain.Pulses", "value": 42, "forced": False},
        {"variable": "LineMain.Valve", "value": True, "forced": True},
    ]

    with anyio.fail_after(BOUND):
        async with httpx.AsyncClient(base_url=forge_server.base) as http:
            posted = await http.post(
                f"/api/projects/{SLUG}/runtime-snapshots",
                json={"taken_at": taken_at.isoformat(), "values": sent},
                headers=bearer(runtime_token),
            )
            refused = await http.post("/mcp", json={}, headers=bearer(runtime_token))
        async with streamable_client(forge_server, mode="legacy") as client:
            asked = await client.call_tool("session.request_access", {"project": SLUG})
            if asked.structured_content["state"] == "pending":
                await anyio.to_thread.run_sync(
                    forge_server.manage, "access_requests", "allow", "--pending", "--as", "live"
                )
            result = await client.call_tool(
                "monitor.snapshot", {"project": SLUG, "variables": ["LineMain.Valve", "LineMain.Pulses", "Nope"]}
            )

    assert posted.status_code == 201, posted.text
    assert refused.status_code == 401
    assert result.is_error is False, result.structured_content
    answer = result.structured_content
    assert [{k: v[k] for k in ("variable", "value", "forced")} for v in answer["values"]] == [sent[1], sent[0]]
    assert all(v["observed_at"] == taken_at.isoformat() and v["age_seconds"] >= 0 for v in answer["values"])
    assert answer["unknown"] == ["Nope"]
