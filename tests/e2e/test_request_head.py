"""The request head's limits through the real daphne server: too large a head is 431 with a JSON body, never a
bare 400 or a dropped connection (forge_site/request_head.py)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest

from forge_site.request_head import MAX_HEAD_BYTES, MAX_HEADERS

pytestmark = pytest.mark.live


def exchange(base: str, head: bytes) -> bytes:
    """Send a raw request head and read the whole answer (the server closes the connection after it)."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(head)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def head(*headers: bytes) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def assert_431_with_json(answer: bytes) -> None:
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 431 Request Header Fields Too Large", answer[:200]
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"Content-Type: application/json" in headers
    refusal = httpx.Response(431, content=body).json()
    assert refusal["id"] is None
    assert refusal["error"]["code"] == -32600
    assert refusal["error"]["data"] == {"max_head_bytes": MAX_HEAD_BYTES, "max_headers": MAX_HEADERS}


def test_a_huge_header_is_431_with_a_json_body(forge_server):
    assert_431_with_json(exchange(forge_server.base, head(b"X-Big: " + b"a" * (MAX_HEAD_BYTES + 10))))


def test_headers_over_the_total_size_are_431_with_a_json_body(forge_server):
    many = [b"X-Part-%d: " % n + b"b" * 1000 for n in range(MAX_HEAD_BYTES // 1000 + 2)]
    assert_431_with_json(exchange(forge_server.base, head(*many)))


def test_too_many_headers_are_431_with_a_json_body(forge_server):
    assert_431_with_json(exchange(forge_server.base, head(*(b"X-H%d: 1" % n for n in range(MAX_HEADERS + 1)))))


def test_a_head_within_the_limits_is_served(forge_server):
    headers = {f"X-H{n}": "c" * 100 for n in range(MAX_HEADERS - 10)}
    assert httpx.get(f"{forge_server.base}/healthz", headers=headers).status_code == 200
