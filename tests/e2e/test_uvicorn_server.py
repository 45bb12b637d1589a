"""`runmcp --server uvicorn` (uvloop + httptools) end to end: the official SDK client against it, an idle stream
that stays open, the request head's limits answered as on daphne, and a clean stop on SIGTERM with a stream
open (forge_site/uvicorn_server.py)."""

from __future__ import annotations

import signal

import anyio
import httpx
import pytest

from forge_site.request_head import MAX_HEAD_BYTES, MAX_HEADERS
from tests.e2e.test_request_head import assert_431_with_json, exchange, head
from tests.live import open_raw_session, prepare, run_server, scratch_database, streamable_client

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 20  # seconds for one whole client conversation on loopback
KEEPALIVE_SECONDS = 0.5
EVENT_STREAM = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def uvicorn_server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("uvicorn")
    with scratch_database() as database:
        env, token = prepare(data_dir, FORGE_SSE_KEEPALIVE_SECONDS=str(KEEPALIVE_SECONDS), **database)
        with run_server(env, token, data_dir, server="uvicorn") as server:
            yield server


async def test_sdk_client_initializes_lists_tools_and_calls_server_info_on_uvicorn(uvicorn_server):
    with anyio.fail_after(BOUND):
        async with streamable_client(uvicorn_server, mode="legacy") as client:
            assert client.server_info.name == "forge-mcp"
            assert "server_info" in {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("server_info", {})
    assert result.is_error is False
    assert result.structured_content["name"] == "forge-mcp"


async def test_an_idle_get_stream_stays_open_on_uvicorn(uvicorn_server):
    # Eight keep-alive comments at 0.5 s apart: the stream stayed open, idle, for about four seconds.
    async with httpx.AsyncClient(base_url=uvicorn_server.base, timeout=None) as http:
        session = await open_raw_session(http, uvicorn_server.token)
        with anyio.fail_after(BOUND):
            async with http.stream("GET", "/mcp", headers={**session, **EVENT_STREAM}) as stream:
                assert stream.status_code == 200
                comments = 0
                async for line in stream.aiter_lines():
                    comments += line.startswith(":")
                    if comments == 8:
                        break
    assert comments == 8


def test_a_huge_header_is_431_with_a_json_body_on_uvicorn(uvicorn_server):
    assert_431_with_json(exchange(uvicorn_server.base, head(b"X-Big: " + b"a" * (MAX_HEAD_BYTES + 10))))


def test_too_many_headers_are_431_with_a_json_body_on_uvicorn(uvicorn_server):
    assert_431_with_json(exchange(uvicorn_server.base, head(*(b"X-H%d: 1" % n for n in range(MAX_HEADERS + 1)))))


def test_a_head_that_never_ends_is_431_once_past_the_limit_on_uvicorn(uvicorn_server):
    # No blank line ever comes: the server answers once the head is too large, without waiting for its end.
    assert_431_with_json(
        exchange(uvicorn_server.base, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 100))
    )


def test_a_head_within_the_limits_is_served_on_uvicorn(uvicorn_server):
    headers = {f"X-H{n}": "c" * 100 for n in range(MAX_HEADERS - 10)}
    assert httpx.get(f"{uvicorn_server.base}/healthz", headers=headers).status_code == 200


def test_a_request_expecting_100_continue_gets_it_before_its_answer_on_uvicorn(uvicorn_server):
    # The protocol reads header lines itself (`on_header`): a name in capitals is still the header uvicorn acts on.
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nEXPECT: 100-Continue\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body

    answer = exchange(uvicorn_server.base, request)

    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 401 "), answer[:200]


def test_every_answer_reaches_the_client_whole_before_a_close_on_uvicorn(uvicorn_server):
    # A response's writes go out at the end of the loop's turn (WritesOfATurn): an answer the server closes the
    # connection after, and two requests sent at once, still reach the client whole and in order.
    assert http_answers(exchange(uvicorn_server.base, head(b"Connection: close"))) == [(200, {"status": "ok"})]
    both = exchange(uvicorn_server.base, head() + head(b"Connection: close"))
    assert http_answers(both) == [(200, {"status": "ok"})] * 2


def http_answers(raw: bytes) -> list[tuple[int, object]]:
    """The status and JSON body of each HTTP/1.1 answer in `raw`, one after another (each with Content-Length)."""
    answers = []
    while raw:
        head_bytes, _, rest = raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head_bytes.split(b"\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(b":") for h in header_lines)}
        length = int(headers[b"content-length"])
        answers.append((int(status_line.split()[1]), httpx.Response(200, content=rest[:length]).json()))
        raw = rest[length:]
    return answers


async def test_sigterm_ends_open_streams_and_stops_uvicorn_with_status_0(tmp_path):
    env, token = prepare(tmp_path)
    with run_server(env, token, tmp_path, server="uvicorn") as server:
        async with httpx.AsyncClient(base_url=server.base, timeout=None) as http:
            session = await open_raw_session(http, token)
            with anyio.fail_after(BOUND):
                async with http.stream("GET", "/mcp", headers={**session, **EVENT_STREAM}) as stream:
                    assert stream.status_code == 200
                    server.process.send_signal(signal.SIGTERM)
                    with pytest.raises(httpx.RemoteProtocolError):  # closed by the server, mid-stream
                        async for _line in stream.aiter_lines():
                            pass
                returncode = await anyio.to_thread.run_sync(lambda: server.process.wait(timeout=BOUND))
    assert returncode == 0
    # Nothing was cut short: the stream ended through its consumer (no task cancelled after the grace period).
    log = (tmp_path / f"server-{server.base.rsplit(':', 1)[1]}.log").read_text()
    assert " ERROR " not in log
    assert "Traceback" not in log
