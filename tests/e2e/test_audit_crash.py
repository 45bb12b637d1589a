"""A server killed (SIGKILL) while many clients' audit rows are being group-committed: no call it acknowledged
lacks its row, no row exists for a call beyond the one each client had in flight, and the server starts again
on the same data with a log that verifies (the mirror lines of the batch that never committed set aside).

Sixteen clients, each on its own session, call `server_info` back to back (a read-only tool: its row is
group-committed with the others'). The server is killed at a moment of the test's choosing, mid-load; each
client counts the answers it received. Rows are counted per session afterwards.
"""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from tests.live import ACCEPT_BOTH, bearer, open_raw_session, prepare, run_server, scratch_database

pytestmark = [pytest.mark.live, pytest.mark.anyio]

CLIENTS = 16
BOUND = 60
ROWS_BY_SESSION = """
import json
from collections import Counter
from audit.models import AuditEvent
print(json.dumps(Counter(AuditEvent.objects.filter(tool="server_info").values_list("session", flat=True))))
"""
CALL = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}}


async def test_a_kill_mid_batch_loses_no_acknowledged_row_and_the_log_verifies_after_restart(tmp_path):
    with scratch_database() as database:
        env, token = prepare(tmp_path, **database)
        acknowledged: dict[str, int] = {}
        with run_server(env, token, tmp_path) as server:
            async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
                sessions = [await open_raw_session(http, token) for _ in range(CLIENTS)]
            loaded = anyio.Event()

            async def client(headers: dict[str, str]) -> None:
                session_id = headers["Mcp-Session-Id"]
                acknowledged[session_id] = 0
                async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
                    while True:
                        try:
                            response = await http.post("/mcp", headers=headers, json=CALL)
                        except httpx.TransportError:
                            return  # the server is gone: this call was never acknowledged
                        answer = response.json()
                        assert not answer["result"]["isError"], answer
                        acknowledged[session_id] += 1
                        if sum(acknowledged.values()) >= 20 * CLIENTS:
                            loaded.set()

            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as clients:
                    for headers in sessions:
                        clients.start_soon(client, headers)
                    await loaded.wait()
                    server.process.kill()  # mid-load: batches are being written
                    server.process.wait()

        rows = json.loads(server.manage("shell", "-c", ROWS_BY_SESSION).strip().splitlines()[-1])
        for session_id, count in acknowledged.items():
            # Every acknowledged call has its row; at most the one call in flight has a row it never heard of.
            assert count <= rows.get(session_id, 0) <= count + 1, (session_id, count, rows.get(session_id))

        with run_server(env, token, tmp_path) as restarted:
            verified = restarted.manage("audit_verify")
            async with httpx.AsyncClient(base_url=restarted.base, timeout=30) as http:
                headers = await open_raw_session(http, token)
                after = await http.post("/mcp", headers={**headers, **bearer(token), "Accept": ACCEPT_BOTH}, json=CALL)
        assert verified.strip().splitlines()[-1].startswith("ok")
        assert after.status_code == 200 and not after.json()["result"]["isError"]
