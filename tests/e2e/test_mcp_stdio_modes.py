"""The stdio modes of `manage.py mcp_stdio`, driven by the official SDK's stdio client:

- no `--url`: the bridge finds the server of its data folder through the instance record runmcp writes;
- a bridge started before the server answers unbound, and its next call after the server appears goes to it
  (the client is told its tool list changed); when the server stops cleanly its record goes with it;
- `--offline-project FILE`: the server's read tools, with its names and schemas, over a local file; every
  change refused with the reason; the file byte-identical after every tool;
- several live servers of one data folder: the bridge refuses to choose and says how (--url);
- a token file others may read is refused with `chmod 600`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from forge_core import instances
from tests.live import (
    INITIALIZE,
    ROOT,
    LiveServer,
    prepare,
    run_server,
    scratch_database,
    server_env,
    streamable_client,
)

pytestmark = [pytest.mark.live, pytest.mark.anyio]

FIXTURE = ROOT / "tests" / "fixtures" / "plcopen" / "press_io.xml"


def token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "client-token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def bridge(env: dict[str, str], *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", *args], env=env, cwd=str(ROOT))


def structured(result) -> dict:
    return result.structured_content


def run_stdio(tmp_path: Path, *args: str, lines: str = "", env: dict[str, str] | None = None):
    """mcp_stdio run to the end of `lines` on its stdin, in a data folder of its own unless `env` is given."""
    return subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio", *args],
        cwd=ROOT,
        env=env or server_env(tmp_path / "data"),
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- discovery ----------------------------------------------------------------------------------------


async def test_without_a_url_the_bridge_finds_the_server_of_its_data_folder(forge_server, tmp_path):
    [record] = instances.live_instances(forge_server.data_dir)
    assert record.pid == forge_server.pid
    assert forge_server.token not in (forge_server.data_dir / "instances" / f"{record.pid}.json").read_text()
    params = bridge(forge_server.env, "--token-file", str(token_file(tmp_path, forge_server.token)))

    with anyio.fail_after(60):
        async with Client(stdio_client(params), mode="legacy") as client:
            instructions = client.instructions
            status = structured(await client.call_tool("session.status", {}))
            tools = [tool.name for tool in (await client.list_tools()).tools]

    assert instructions.startswith(f"CONNECTED through mcp_stdio to the Forge server at {forge_server.mcp_url}")
    assert status["mode"] == "connected"
    assert status["server"] == forge_server.mcp_url
    assert status["owner"] == "live"
    assert status["session_id"]
    assert "change_group.begin" in tools


async def test_a_bridge_started_before_the_server_answers_unbound_then_promotes_itself(tmp_path):
    data_dir = tmp_path / "late"
    data_dir.mkdir()
    told = anyio.Event()

    async def on_message(message) -> None:
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            told.set()

    with scratch_database() as database:
        env, token = prepare(data_dir, **database, FORGE_RUNTIME_DIR=str(tmp_path / "runtime"))
        params = bridge(env, "--token-file", str(token_file(tmp_path, token)))
        with anyio.fail_after(120):
            async with Client(stdio_client(params), mode="legacy", message_handler=on_message) as client:
                unbound_instructions = client.instructions
                unbound = structured(await client.call_tool("session.status", {}))
                unbound_tools = [tool.name for tool in (await client.list_tools()).tools]
                refused = await client.call_tool("project.list", {})

                with run_server(env, token, data_dir) as server:
                    connected = structured(await client.call_tool("session.status", {}))
                    await told.wait()
                    tools = [tool.name for tool in (await client.list_tools(cache_mode="refresh")).tools]
                    projects = await client.call_tool("project.list", {})
                    record = data_dir / "instances" / f"{server.pid}.json"
                    assert record.exists()
                    binding = tmp_path / "runtime" / f"{instances.data_fingerprint(data_dir)[:32]}-{server.pid}.json"
                    while not binding.exists():  # written by the server's records thread once it serves
                        await anyio.sleep(0.1)

                after_stop = structured(await client.call_tool("session.status", {}))

    assert unbound_instructions.startswith("UNBOUND")
    assert unbound["mode"] == "unbound"
    assert unbound["connected"] is False
    assert unbound_tools == ["session.status"]
    assert refused.is_error
    assert structured(refused)["error"] == "FORGE_ERR_NO_SERVER"
    assert "connects by itself" in structured(refused)["message"]

    assert connected["mode"] == "connected"
    assert connected["server"] == server.mcp_url
    assert connected["session_id"]
    assert "change_group.begin" in tools
    assert not projects.is_error

    assert not record.exists()  # a clean stop removes both records
    assert not binding.exists()
    assert after_stop["mode"] == "unbound"
    assert "went away" in after_stop["note"]


def test_several_live_servers_of_one_data_folder_are_not_chosen_between(tmp_path):
    data_dir = tmp_path / "twice"
    data_dir.mkdir()
    env = server_env(data_dir)
    records = instances.private_folder(data_dir / "instances")
    for pid, port in ((os.getpid(), 8101), (os.getppid(), 8102)):  # two live processes stand in for two servers
        content = {"format": 1, "pid": pid, "urls": [f"http://127.0.0.1:{port}"]}
        content["data_fingerprint"] = instances.data_fingerprint(data_dir)
        instances.write_record(records / f"{pid}.json", content)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "project.list", "arguments": {}}}

    lines = json.dumps(INITIALIZE) + "\n" + json.dumps(call) + "\n"
    done = run_stdio(tmp_path, "--token-file", str(token_file(tmp_path, "some-token")), lines=lines, env=env)

    assert done.returncode == 0, done.stderr
    initialized, answer = [json.loads(line) for line in done.stdout.splitlines()]
    assert initialized["result"]["instructions"].startswith("UNBOUND")
    refusal = answer["result"]["structuredContent"]
    assert answer["result"]["isError"]
    assert refusal["error"] == "FORGE_ERR_SEVERAL_SERVERS"
    assert "http://127.0.0.1:8101/mcp" in refusal["message"]
    assert "--url" in refusal["message"]


def test_a_token_file_others_may_read_is_refused_saying_chmod_600(tmp_path):
    loose = tmp_path / "token"
    loose.write_text("a-token")
    loose.chmod(0o644)

    done = run_stdio(tmp_path, "--token-file", str(loose))

    assert done.returncode != 0
    assert f"chmod 600 {loose}" in done.stderr
    assert "Traceback" not in done.stderr


# --- offline ------------------------------------------------------------------------------------------


def checksum(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


async def server_tools(server: LiveServer) -> dict[str, dict]:
    async with streamable_client(server, mode="legacy") as client:
        return {
            tool.name: tool.model_dump(mode="json", by_alias=True, exclude_none=True)
            for tool in (await client.list_tools()).tools
        }


async def test_offline_serves_the_servers_read_tools_over_a_file_refuses_changes_and_leaves_it_byte_identical(
    forge_server, tmp_path
):
    project = tmp_path / "press-io.xml"
    shutil.copyfile(FIXTURE, project)
    project.chmod(0o444)  # reading needs nothing more; the checksum below proves it
    before = checksum(project)
    on_server = await server_tools(forge_server)
    # The server's project reads: what offline mode offers, beside session.status.
    reads = [
        name for name, tool in on_server.items() if name.startswith("project.") and tool["annotations"]["readOnlyHint"]
    ]
    env = {key: value for key, value in server_env(tmp_path / "offline-data").items() if key != "FORGE_MCP_TOKEN"}

    answers: dict[str, object] = {}
    with anyio.fail_after(60):
        async with Client(stdio_client(bridge(env, "--offline-project", str(project))), mode="legacy") as client:
            instructions = client.instructions
            listed = {
                tool.name: tool.model_dump(mode="json", by_alias=True, exclude_none=True)
                for tool in (await client.list_tools()).tools
            }
            named = "press-io"
            answers["project.list"] = await client.call_tool("project.list", {})
            answers["project.overview"] = await client.call_tool("project.overview", {"project": named})
            found = await client.call_tool("project.find", {"project": named, "kind": "variable", "limit": 5})
            answers["project.find"] = found
            element = structured(found)["items"][0]["id"]
            answers["project.get_element"] = await client.call_tool(
                "project.get_element", {"project": named, "element_id": element}
            )
            answers["project.list_variables"] = await client.call_tool("project.list_variables", {"project": named})
            answers["project.check"] = await client.call_tool("project.check", {"project": named})
            answers["project.export"] = await client.call_tool("project.export", {"project": named})
            answers["project.suggest_placement"] = await client.call_tool(
                "project.suggest_placement", {"project": named, "topic": "press"}
            )
            status = structured(await client.call_tool("session.status", {}))
            draft = await client.call_tool("project.overview", {"project": named, "view": "working_draft"})
            other = await client.call_tool("project.overview", {"project": "line-3"})
            changes = {
                name: await client.call_tool(name, {"project": named})
                for name, tool in on_server.items()
                if not tool["annotations"]["readOnlyHint"]
            }
            server_only = await client.call_tool("draft.status", {"project": named})

    assert checksum(project) == before
    assert instructions.startswith("OFFLINE MODE")
    assert sorted(listed) == sorted([*reads, "session.status"])
    for name in reads:  # the server's names, schemas and annotations
        assert listed[name] == on_server[name], name
    assert status["mode"] == "offline"
    assert status["connected"] is False

    assert sorted(answers) == sorted(reads)
    assert structured(answers["project.list"])["projects"] == [{"project": named, "name": "Press IO"}]
    for name, answer in answers.items():
        assert not answer.is_error, (name, structured(answer))
        if name != "project.list":
            assert structured(answer)["view"] == "accepted", name
            assert structured(answer)["project"] == named
    assert structured(answers["project.export"])["xml"] == FIXTURE.read_text()[:32_000]
    assert structured(answers["project.get_element"])["id"] == element

    assert draft.is_error and structured(draft)["error"] == "FORGE_ERR_OFFLINE_READ_ONLY"
    assert other.is_error and structured(other)["error"] == "FORGE_ERR_NOT_FOUND"
    assert "change_group.stage" in changes and "session.request_access" in changes
    for name, answer in changes.items():
        assert answer.is_error, name
        assert structured(answer)["error"] == "FORGE_ERR_OFFLINE_READ_ONLY", name
        assert "only writer" in structured(answer)["message"], name
    assert server_only.is_error and "only the Forge server keeps" in structured(server_only)["message"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--url", "http://127.0.0.1:1/mcp"], "--offline-project never connects"),
        ([], "cannot read --offline-project"),
    ],
)
def test_offline_refuses_a_url_or_a_missing_file_in_one_line(tmp_path, extra, said):
    done = run_stdio(tmp_path, "--offline-project", str(tmp_path / "missing.xml"), *extra)

    assert done.returncode != 0
    assert said in done.stderr
    assert "Traceback" not in done.stderr
