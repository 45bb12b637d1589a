"""The limits on a request's head (request line and headers) that daphne's HTTP server enforces, answered as
HTTP 431 with a JSON body instead of Twisted's bare 400 or a dropped connection.

Twisted's `HTTPChannel` (under daphne) refuses a head over `totalHeadersSize` bytes or `maxHeaders` headers
with "400 Bad Request" and no body, and a single line longer than `MAX_LENGTH` by closing the connection
without a word. `HeadLimitedChannel` checks the same limits first and answers each with 431 (RFC 6585) and
a JSON-RPC error object with id null, so an MCP client sees why; every other malformed head keeps Twisted's
400. `serve_with_head_limits` makes daphne's server build these channels; `runmcp` calls it before serving.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.web import http
from twisted.web.http_headers import Headers

MAX_HEAD_BYTES = 16 * 1024
"""The request line and all header lines together, CRLFs not counted (Twisted's own default)."""
MAX_HEADERS = 100

REFUSAL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": (
                f"Request header fields too large: this server accepts at most {MAX_HEAD_BYTES} bytes of request "
                f"line and headers, and at most {MAX_HEADERS} headers. Send fewer or shorter headers."
            ),
            "data": {"max_head_bytes": MAX_HEAD_BYTES, "max_headers": MAX_HEADERS},
        },
    },
    separators=(",", ":"),
).encode()

RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(REFUSAL)).encode() + b"\r\n"
    b"Connection: close\r\n"
    b"\r\n" + REFUSAL
)


class HeadLimitedChannel(http.HTTPChannel):
    """An HTTP/1.1 channel that answers a request head over its limits with 431 and a JSON body."""

    MAX_LENGTH = MAX_HEAD_BYTES
    totalHeadersSize = MAX_HEAD_BYTES
    maxHeaders = MAX_HEADERS
    _head_refused = False

    def lineReceived(self, line: bytes) -> None:
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._refuse_head()
            return
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        self._refuse_head()

    def headerReceived(self, line: bytes) -> bool:
        if self._receivedHeaderCount >= self.maxHeaders:
            self._refuse_head()
            return False
        return super().headerReceived(line)

    def _refuse_head(self) -> None:
        if self._head_refused:
            return
        self._head_refused = True
        # Whatever else the client sends on this connection is not read: the answer says to start over.
        self.dataReceived = lambda data: None  # type: ignore[method-assign]
        transport: Any = self.transport  # a TCP transport; zope's interface declarations do not type it
        transport.write(RESPONSE)
        self.loseConnection()


def serve_with_head_limits() -> None:
    """Make daphne's server build `HeadLimitedChannel`s where Twisted builds `HTTPChannel`s. Call it after
    importing `daphne.server` (which installs the asyncio reactor) and before `Server(...).run()`, which makes
    its factory from the name patched here.

    Its requests also skip Twisted's parsing of a POSTed form into `request.args`: daphne hands the body to the
    application as it came, and nothing reads those args, yet working out each POST's content type through the
    `email` package cost about a tenth of a small MCP call's CPU (docs/PERFORMANCE.md, section 14). Nor does
    Twisted write its access log line for each request, nor does a request keep Twisted's table of its headers once
    the application has them."""
    from daphne import server
    from daphne.http_protocol import HTTPFactory, WebRequest

    class FormlessRequest(WebRequest):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs, parsePOSTFormSubmission=False)

        def process(self) -> Any:
            handed = super().process()
            if self.application_queue is not None:
                # The application has the headers in its scope now, and Twisted has read what it needed of
                # them (persistence, Expect): a stream holds its request as long as it stays open, and need not
                # hold Twisted's table of them too.
                self.requestHeaders = Headers()
            return handed

    class HeadLimitedHTTPFactory(HTTPFactory):
        def protocol(self) -> http._GenericHTTPChannelProtocol:
            # The wrapper Twisted puts around every HTTP/1.1 channel (it switches to HTTP/2 after ALPN).
            return http._GenericHTTPChannelProtocol(HeadLimitedChannel())

        def log(self, request: Any) -> None:
            """No access log line per request: like daphne's own (runmcp passes no action logger), Twisted's
            formatted one for every call, for nobody to read."""

        def buildProtocol(self, addr: Any) -> Any:
            protocol = super().buildProtocol(addr)
            protocol.requestFactory = FormlessRequest
            return protocol

    server.HTTPFactory = HeadLimitedHTTPFactory
