"""A live `runmcp`'s read processes (projects.read_pool): it starts FORGE_READ_PROCESSES of them, answers the
project reads through them, replaces ones killed under it, and they end when it stops."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

import anyio
import pytest

from tests.e2e.test_project_tools_sdk import PROJECT_FILE, answer
from tests.live import prepare, run_server, scratch_database, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 30  # seconds for the whole conversation on loopback
SLUG = "read-processes"


def read_processes(server_pid: int) -> list[int]:
    """The server's children that run `projects.read_process`, zombies (killed, not yet reaped) left out."""
    found = []
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            stat = Path(f"/proc/{child}/stat").read_text()
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if b"projects.read_process" in command and stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(child))
    return sorted(found)


def wait_ended(pid: int, seconds: float) -> bool:
    """Whether the process (not ours: the server's child) has ended within `seconds`."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([handle], [], [], seconds)[0])
    finally:
        os.close(handle)


async def test_a_live_server_reads_in_its_processes_replaces_killed_ones_and_ends_them_when_it_stops(tmp_path):
    with scratch_database() as database:
        env, token = prepare(tmp_path, FORGE_READ_PROCESSES="2", **database)
        with run_server(env, token, tmp_path) as server:
            server.manage("import_project", str(PROJECT_FILE), "--slug", SLUG)
            started = read_processes(server.pid)
            with anyio.fail_after(BOUND):
                async with streamable_client(server, mode="legacy") as client:
                    first = await answer(client, "project.check", {"project": SLUG, "limit": 5}, server)
                    for pid in started:
                        os.kill(pid, signal.SIGKILL)
                    again = await answer(client, "project.check", {"project": SLUG, "limit": 5}, server)
            serving = read_processes(server.pid)

        assert len(started) == 2
        assert again == first
        assert serving and not set(serving) & set(started)
        assert all(wait_ended(pid, 10) for pid in serving)
