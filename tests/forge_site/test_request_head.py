"""The requests daphne builds through `serve_with_head_limits`, driven in-process over a fake transport (the
limits' answers through the live server are in tests/e2e/test_request_head.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from daphne import server
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from forge_site.request_head import serve_with_head_limits


class RecordingServer:
    """What daphne's HTTP factory and requests ask of their server, recording the requests and scopes."""

    root_path = ""
    server_name = "daphne"
    http_timeout = None
    request_buffer_size = 8192
    proxy_forwarded_address_header = proxy_forwarded_port_header = proxy_forwarded_proto_header = None

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.scopes: list[dict[str, Any]] = []
        self.connection: Any = None  # the one connection the fixture opens

    def protocol_connected(self, request: Any) -> None:
        self.requests.append(request)

    def protocol_disconnected(self, request: Any) -> None:
        pass

    def create_application(self, request: Any, scope: dict[str, Any]) -> asyncio.Queue:
        self.scopes.append(scope)
        return asyncio.Queue()


@pytest.fixture
def recording(monkeypatch) -> RecordingServer:
    """A connection of the patched HTTP factory, its requests and scopes recorded; daphne's factory restored after."""
    monkeypatch.setattr(server, "HTTPFactory", server.HTTPFactory)
    serve_with_head_limits()
    recorder = RecordingServer()
    recorder.connection = server.HTTPFactory(recorder).buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
    recorder.connection.makeConnection(StringTransport())
    return recorder


def test_a_request_handed_to_the_application_keeps_no_table_of_its_headers(recording):
    recording.connection.dataReceived(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer fmcp_x\r\n\r\n")

    [scope] = recording.scopes
    assert scope["headers"] == [(b"host", b"127.0.0.1"), (b"authorization", b"Bearer fmcp_x")]
    [request] = recording.requests
    assert list(request.requestHeaders.getAllRawHeaders()) == []
