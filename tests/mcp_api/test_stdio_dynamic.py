"""mcp_stdio without --url, in process: a call cut off after it was sent is answered and never sent again; a
server that refuses connections sends the session back to unbound with a note; a server that could not be joined
is named in the refusals."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pytest

from forge_core import instances
from mcp_api.management.commands.mcp_stdio import Dynamic

SERVER = instances.Instance(pid=4242, urls=("http://127.0.0.1:1",), data_fingerprint="f" * 64, started_at="")


class CutOff:
    """A bridge whose every relay breaks as `error` says, counting what it was asked to send."""

    def __init__(self, error: httpx.HTTPError) -> None:
        self.error = error
        self.sent: list[bytes] = []
        self.closed = False

    def relay(self, line: bytes) -> None:
        self.sent.append(line)
        raise self.error

    def close(self) -> None:
        self.closed = True


def connected(monkeypatch, error: httpx.HTTPError) -> tuple[Dynamic, CutOff, io.StringIO]:
    out = io.StringIO()
    dynamic = Dynamic("token", out, Path("/nowhere"))
    bridge = CutOff(error)
    dynamic.bridge, dynamic.instance = bridge, SERVER  # type: ignore[assignment]
    monkeypatch.setattr(instances, "live_instances", lambda data_dir: [SERVER])
    return dynamic, bridge, out


def call(name: str, request_id: int = 7) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": {}}}
    return json.dumps(message).encode()


def answers(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_change_cut_off_after_it_was_sent_is_reported_and_not_sent_again(monkeypatch):
    dynamic, bridge, out = connected(monkeypatch, httpx.ReadError("connection reset"))

    dynamic.handle(call("change_group.stage"))

    [answer] = answers(out)
    assert answer["id"] == 7
    assert answer["result"]["isError"] is True
    refusal = answer["result"]["structuredContent"]
    assert refusal["error"] == "FORGE_ERR_INTERRUPTED"
    assert "may have been carried out" in refusal["message"]
    assert "not sent again" in refusal["message"]
    assert len(bridge.sent) == 1
    assert bridge.closed
    assert dynamic.bridge is None
    assert "not sent again" in dynamic.local.note


def test_a_read_cut_off_says_it_may_be_asked_again(monkeypatch):
    dynamic, bridge, out = connected(monkeypatch, httpx.RemoteProtocolError("server disconnected"))

    dynamic.handle(call("project.overview"))

    [answer] = answers(out)
    assert answer["result"]["structuredContent"]["error"] == "FORGE_ERR_INTERRUPTED"
    assert "Ask again" in answer["result"]["structuredContent"]["message"]
    assert len(bridge.sent) == 1


def test_a_server_refusing_connections_sends_the_call_to_the_unbound_answers(monkeypatch):
    dynamic, bridge, out = connected(monkeypatch, httpx.ConnectError("connection refused"))

    dynamic.handle(call("session.status"))

    [answer] = answers(out)
    status = answer["result"]["structuredContent"]
    assert status["mode"] == "unbound"
    assert "could not be reached" in status["note"]
    assert bridge.closed
    assert dynamic.bridge is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "https://127.0.0.1:1"])
def test_a_server_that_cannot_be_joined_is_named_in_the_refusals(monkeypatch, url):
    out = io.StringIO()
    dynamic = Dynamic("token", out, Path("/nowhere"))
    server = instances.Instance(pid=4242, urls=(url,), data_fingerprint="f" * 64, started_at="")
    monkeypatch.setattr(instances, "live_instances", lambda data_dir: [server])
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    dynamic.initialize = json.dumps(initialize).encode()  # answered before the server's record appeared

    dynamic.handle(call("project.list"))

    [answer] = answers(out)
    refusal = answer["result"]["structuredContent"]
    assert refusal["error"] == "FORGE_ERR_NO_SERVER"
    assert f"{url}/mcp" in refusal["message"]
    assert ("--ca" in refusal["message"]) is url.startswith("https")
    assert dynamic.bridge is None
