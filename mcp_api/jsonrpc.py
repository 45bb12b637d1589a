"""JSON-RPC 2.0 framing: decoding a POST body, the standard error codes, and building replies.

`RpcError` is the one exception type that reaches the wire. Everything below the protocol boundary
raises it (or a subclass) with a safe message that says what to do; the boundary turns it into an error
object, and anything else into a bare -32603 without library text or traceback.
"""

from __future__ import annotations

import json
import json.encoder
import re
from collections.abc import Callable
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
# In the range JSON-RPC leaves to the server: the request was understood and refused, for a reason that is
# the client's to act on (`data.error` names it: a cap reached, say). Not an internal error.
REFUSED = -32029


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
    """A refusal that meets the protocol outside a tool call, with its code and message (and details in
    `data`), sent with its HTTP status where the transport answers with one: -32603 when the server could not
    do it (the audit row of a session's opening could not be written), `REFUSED` when the client can act on
    it (a 4xx: the token's cap of open sessions reached)."""
    code = REFUSED if refusal.status < 500 else INTERNAL_ERROR
    return RpcError(code, f"{refusal.code}: {refusal.message}", refusal.structured(), http_status=refusal.status)


class UnreadableMessage(RpcError):
    """A body this server will not act on, refused before anything reads its meaning: not JSON, a `NaN` or
    `Infinity`, a lone surrogate, a NUL character, or nesting past the limit. Carries the id to answer with (the request's
    own where it is usable, else null) and the audit outcome that names the flaw."""

    def __init__(self, code: int, message: str, *, outcome: str, request_id: Any = None, data: Any = None) -> None:
        super().__init__(code, message, data, http_status=400)
        self.outcome = outcome
        self.request_id = request_id


# After decoding, a well-formed pair is one code point; whatever surrogate is left stands alone. NUL (U+0000)
# is a character JSON can carry but nothing here can hold: XML 1.0 forbids it, PostgreSQL refuses it in text.
_UNHOLDABLE = re.compile("[\x00\ud800-\udfff]")


def _text_flaw(text: str) -> str | None:
    found = _UNHOLDABLE.search(text)
    if found is None:
        return None
    return "nul_character" if found.group() == "\x00" else "lone_surrogate"


_MEMBERS = ("jsonrpc", "id", "method", "params", "result", "error")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def decode(body: bytes, *, max_depth: int) -> Any:
    """Decode a request body as JSON and screen what it carries, or raise `UnreadableMessage`.

    Not JSON, or `NaN` / `Infinity` (which Python's parser accepts and JSON does not): -32700. A lone
    surrogate (it cannot be encoded again, so no answer or audit row could carry it), the NUL character (no
    PLCopen file and no PostgreSQL text can hold it), or nesting deeper than
    `max_depth` (a message itself is depth 1): -32600 with id null when it is in the id, -32602 with the
    request's id when it is in `params`, -32600 with the id anywhere else. A batch is screened entry by
    entry and refused whole with the first entry's flaw."""
    try:
        # `json.loads(body, parse_constant=...)`, without building its decoder on every call.
        message = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except (ValueError, RecursionError):
        raise UnreadableMessage(
            PARSE_ERROR,
            "Parse error: the body is not valid JSON (NaN and Infinity are not JSON). Send one JSON-RPC 2.0 message.",
            outcome="bad_json",
        ) from None
    if _plainly_screened(body, max_depth):
        return message
    try:
        for entry in message if isinstance(message, list) else [message]:
            _screen(entry, max_depth)
    except RecursionError:  # a limit set past what the stack allows: the message is too deep all the same
        raise _unreadable("too_deep", "message", None, max_depth) from None
    return message


def _plainly_screened(body: bytes, max_depth: int) -> bool:
    """Whether the raw body alone shows that no decoded text holds NUL or a surrogate and that nothing nests deeper
    than `max_depth`: no escape (`\\u`), no NUL byte, no byte that starts a code point from U+D000 to U+DFFF in
    UTF-8 (a surrogate passes the decoder raw), and fewer opening brackets in all than the limit. Most messages
    are; one that is not is screened value by value."""
    return (
        b"\\u" not in body
        and b"\x00" not in body
        and b"\xed" not in body
        and body.count(b"{") + body.count(b"[") < max_depth
    )


def _screen(message: Any, max_depth: int) -> None:
    if not isinstance(message, dict):
        flaw = _flaw(message, max_depth)
        if flaw is not None:
            raise _unreadable(flaw, "message", None, max_depth)
        return
    id_flaw = _flaw(message["id"], max_depth - 1) if "id" in message else None
    if id_flaw is not None:
        raise _unreadable(id_flaw, "id", None, max_depth)
    request_id = message.get("id") if is_valid_id(message.get("id")) else None
    for key, value in message.items():
        flaw = _text_flaw(key) or _flaw(value, max_depth - 1)
        if flaw is not None:
            raise _unreadable(flaw, key if key in _MEMBERS else "message", request_id, max_depth)


def _flaw(value: Any, depth_left: int) -> str | None:
    """'lone_surrogate', 'nul_character' or 'too_deep' for the first flaw in `value`, or None; never looks deeper
    than allowed."""
    if isinstance(value, str):
        return _text_flaw(value)
    if not isinstance(value, (dict, list)):
        return None
    if depth_left <= 0:
        return "too_deep"
    for key in value if isinstance(value, dict) else ():
        key_flaw = _text_flaw(key)
        if key_flaw is not None:
            return key_flaw
    for item in value.values() if isinstance(value, dict) else value:
        flaw = _flaw(item, depth_left - 1)
        if flaw is not None:
            return flaw
    return None


def _unreadable(flaw: str, where: str, request_id: Any, max_depth: int) -> UnreadableMessage:
    if flaw == "too_deep":
        what = (
            f"nests objects and arrays deeper than this server's limit of {max_depth} levels "
            f"(FORGE_MAX_JSON_DEPTH, the message itself counting as one); flatten it"
        )
        data: Any = {"limit": max_depth, "where": where}
    elif flaw == "nul_character":
        what = "contains the NUL character (U+0000), which no name, text or PLC source here can hold; remove it"
        data = {"where": where}
    else:
        what = "contains a lone UTF-16 surrogate, which is not a character; send valid Unicode text"
        data = {"where": where}
    if where == "params":
        return UnreadableMessage(
            INVALID_PARAMS, f"Invalid params: params {what}.", outcome=flaw, request_id=request_id, data=data
        )
    return UnreadableMessage(
        INVALID_REQUEST,
        f"Invalid request: the message's {where!r} {what}.",
        outcome=flaw,
        request_id=request_id,
        data=data,
    )


def one_pass_encoder(*, separators: tuple[str, str], default: Callable[[Any], Any]) -> Callable[[Any], str]:
    """`json.dumps(value, ensure_ascii=False, separators=separators, default=default)` as a function, whose C
    encoder is made once rather than on every call, and which keeps no record of the containers it is inside: a
    value that contains itself fails as deep recursion (`RecursionError`) instead of `ValueError`, both an error
    of the caller's. The same text otherwise; the record is a dict insert and delete for every dict and list
    encoded, a quarter of the encoding of a call's answer (docs/PERFORMANCE.md)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the C encoder
        return json.JSONEncoder(separators=separators, ensure_ascii=False, default=default, check_circular=False).encode
    item_separator, key_separator = separators
    chunks = make(
        None, default, json.encoder.encode_basestring, None, key_separator, item_separator, False, False, True
    )
    return lambda value: "".join(chunks(value, 0))


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODE = one_pass_encoder(separators=(",", ":"), default=_not_json)


def encode(message: Any) -> bytes:
    return _ENCODE(message).encode()


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
