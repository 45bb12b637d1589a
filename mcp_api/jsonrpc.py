"""JSON-RPC 2.0 framing: decoding a POST body, the standard error codes, and building replies.

`RpcError` is the one exception type that reaches the wire. Everything below the protocol boundary
raises it (or a subclass) with a safe message that says what to do; the boundary turns it into an error
object, and anything else into a bare -32603 without library text or traceback.
"""

from __future__ import annotations

import json
from typing import Any

from forge_core.errors import Refusal

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022


class RpcError(Exception):
    """A JSON-RPC error with a message safe to show the client, and the HTTP status to send it with."""

    def __init__(self, code: int, message: str, data: Any = None, *, http_status: int = 200) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def refusal_error(refusal: Refusal) -> RpcError:
    """A refusal that meets the protocol outside a tool call (the audit row of a session's opening could not
    be written): -32603 with the refusal's code and message, sent with its HTTP status where the transport
    answers with one."""
    return RpcError(
        INTERNAL_ERROR, f"{refusal.code}: {refusal.message}", {"error": refusal.code}, http_status=refusal.status
    )


def decode(body: bytes) -> Any:
    """Decode a request body as JSON, or raise the -32700 parse error (HTTP 400)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise RpcError(
            PARSE_ERROR,
            "Parse error: the body is not valid JSON. Send one JSON-RPC 2.0 message.",
            http_status=400,
        ) from None


def encode(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def is_valid_id(value: Any) -> bool:
    return (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))) and (
        not isinstance(value, str) or len(value) <= 200
    )


def kind_of(message: Any) -> str:
    """Classify one decoded message: 'request', 'notification', 'response', or 'invalid'."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "invalid"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return "invalid"
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return "invalid"
        if "id" not in message:
            return "notification"
        return "request" if is_valid_id(message["id"]) else "invalid"
    if "id" in message and ("result" in message or "error" in message):
        return "response"
    return "invalid"


def invalid_request(detail: str = "") -> RpcError:
    text = "Invalid request: send a JSON-RPC 2.0 object with 'jsonrpc': '2.0', a string 'method' and an id."
    return RpcError(INVALID_REQUEST, f"{text} {detail}".strip(), http_status=400)


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, exc: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": exc.to_error()}


def safe_id(message: Any) -> Any:
    """The id to answer an invalid message with: its own when usable, else null."""
    if isinstance(message, dict) and is_valid_id(message.get("id")):
        return message["id"]
    return None
