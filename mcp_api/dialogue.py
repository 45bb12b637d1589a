"""A tool call that talks with its client while it runs: progress notifications, and requests the server sends
the client (`sampling/createMessage`, `elicitation/create`) whose answers the tool waits for.

A tool that converses is a generator function: it yields what it has to say (`progress`, `pause`,
`create_message`, `elicit`) and returns its result as any tool does. A request's yield evaluates to the
client's `result` object as the client sent it (untrusted input: check its shape), or raises a `Refusal`
inside the tool (the client answered an error, did not declare the capability, did not answer in time, or
cannot be reached), which the tool may catch. Such a tool only reads (no transaction can span its steps),
which the method layer enforces (`protocol._converse`).

Each step runs in the worker pool, as any call does; the waits never do. Between steps the call's consumer
holds the call's SSE answer on the event loop, sends what the step said and, for a request, waits for the
client's answer (a POST of the session that any process may receive: it reaches the consumer through the
channel layer, in the request's reply group), the client cancelling the call, the client going away, or
`FORGE_CLIENT_REQUEST_SECONDS`. So a client that answers slowly, or never, holds no worker thread and keeps
no other client waiting, and a stream always ends: with the call's answer, or, cancelled, with none.

Only a Streamable HTTP session's single POST that accepts `text/event-stream` can carry a conversation; at
the stateless revision (2026-07-28) such a POST carries progress, but the server sends its client no
requests there, so each raises `FORGE_ERR_CLIENT_UNREACHABLE` inside the tool. For any other call (JSON only,
a batch, the legacy transport) the tool runs to its end in its one hop: its progress is dropped, and each
request it makes raises `FORGE_ERR_CLIENT_UNREACHABLE` inside it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import secrets
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings

from forge_core.errors import Refusal
from mcp_api import jsonrpc
from mcp_api.jsonrpc import INTERNAL_ERROR, RpcError

if TYPE_CHECKING:
    from access.models import ClientToken
    from mcp_api.protocol import CallContext
    from mcp_api.registry import Tool

logger = logging.getLogger("forge.mcp")

MAX_PAUSE_SECONDS = 5.0


@dataclass(frozen=True)
class Progress:
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Ask:
    """A request to the client: its method, its params, and the client capability it needs."""

    method: str
    params: dict[str, Any]
    capability: str


def progress(done: float, total: float | None = None, message: str | None = None) -> Progress:
    """Yield this to report progress (sent only when the call asked for it with a progress token)."""
    return Progress(done, total, message)


def pause(seconds: float) -> Pause:
    """Yield this to wait a moment without holding a worker thread (at most MAX_PAUSE_SECONDS)."""
    return Pause(min(max(seconds, 0.0), MAX_PAUSE_SECONDS))


def create_message(messages: list[dict[str, Any]], *, max_tokens: int, **extra: Any) -> Ask:
    """Yield this to ask the client's model for a message (sampling); it evaluates to the client's result."""
    return Ask("sampling/createMessage", {"messages": messages, "maxTokens": max_tokens, **extra}, "sampling")


def elicit(message: str, requested_schema: dict[str, Any]) -> Ask:
    """Yield this to ask the client's user for input (form elicitation); it evaluates to the client's result
    (`action` accept, decline or cancel, and `content`)."""
    return Ask("elicitation/create", {"message": message, "requestedSchema": requested_schema}, "elicitation")


def converses(tool: Tool) -> bool:
    return inspect.isgeneratorfunction(tool.handler)


def reply_group(token: ClientToken, session_id: str, request_id: Any) -> str:
    """The channel-layer group where the client's answer to one server request arrives: named by the session
    and the request's id, so only a POST of the session the request went to can answer it."""
    digest = hashlib.sha256(json.dumps([f"session:{session_id}", token.pk, request_id]).encode()).hexdigest()[:40]
    return f"mcp-reply.{digest}"


# --- what a step tells the consumer ---------------------------------------------------------------------


@dataclass
class Said:
    """What a step said: the notifications to send now (log messages queued, a progress report), then a request
    to send and wait for (with the group its answer arrives in), or a pause; or, at the call's end, its result
    (concluded: audited, a refusal already made the tool's result) or the fault that ended it."""

    notes: list[dict[str, Any]] = field(default_factory=list)
    request: dict[str, Any] | None = None
    reply_group: str = ""
    pause: float = 0.0
    result: dict[str, Any] | None = None
    failure: Exception | None = None

    @property
    def ended(self) -> bool:
        return self.result is not None or self.failure is not None


class Conversation:
    """One tools/call of a conversing tool, between its steps. `conclude(produce)` is the method layer's end of
    a call (the audit row, a refusal as the tool's result), and `shape(value)` its final result's shape."""

    def __init__(
        self,
        ctx: CallContext,
        steps: Generator[Any, Any, Any],
        conclude: Callable[[Callable[[], Any]], dict[str, Any]],
        shape: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        self.ctx = ctx
        self.steps = steps
        self.conclude = conclude
        self.shape = shape
        self.request_id: Any = None
        self.progress_token: Any = ctx.progress_token
        self.outstanding: Ask | None = None

    @property
    def seconds(self) -> float:
        return settings.FORGE_CLIENT_REQUEST_SECONDS

    def final(self, said: Said) -> dict[str, Any]:
        """The call's JSON-RPC response, once a step ended it."""
        if said.failure is not None:
            logger.error("a conversing tool failed", exc_info=said.failure)
            return jsonrpc.error(
                self.request_id, RpcError(INTERNAL_ERROR, "Internal error. The server logged it; try again.")
            )
        assert said.result is not None
        return jsonrpc.result(self.request_id, self.shape(said.result))

    def advance(self, answer: Any = None, refusal: Refusal | None = None) -> Said:
        """Resume the tool (with the client's answer, or raising `refusal` in it) until it says something."""
        self.outstanding = None
        notes: list[dict[str, Any]] = []
        while True:
            try:
                item = self.steps.throw(refusal) if refusal is not None else self.steps.send(answer)
            except StopIteration as stop:
                return self._finish(notes, _returning(stop.value))
            except Exception as failure:  # a refusal or a fault: the method layer classifies and audits it
                return self._finish(notes, raising(failure))
            answer, refusal = None, None
            notes.extend(self._flush())
            if isinstance(item, Progress):
                if self.progress_token is not None:
                    notes.append(self._progress(item))
                    return Said(notes=notes)
            elif isinstance(item, Pause):
                return Said(notes=notes, pause=item.seconds)
            elif isinstance(item, Ask):
                refusal = self._unaskable(item)
                if refusal is None:
                    self.outstanding = item
                    request_id = f"forge-{secrets.token_hex(12)}"
                    request = {"jsonrpc": "2.0", "id": request_id, "method": item.method, "params": item.params}
                    group = reply_group(self.ctx.token, self.ctx.session_id, request_id)
                    return Said(notes=notes, request=request, reply_group=group)
            else:
                return self._finish(notes, raising(TypeError(f"a conversing tool yielded {item!r}")))

    def answered(self, message: dict[str, Any]) -> Said:
        """The client's response to the outstanding request: its result into the tool, or its error as a refusal."""
        asked = self.outstanding
        method = asked.method if asked is not None else "the request"
        if isinstance(message.get("result"), dict):
            return self.advance(message["result"])
        if "result" in message:
            return self.advance(
                refusal=Refusal(
                    "FORGE_ERR_CLIENT_REFUSED", f"The client answered {method} with a result that is not an object."
                )
            )
        found = message.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        detail = " ".join(str(error.get("message", "")).split())[:200]
        return self.advance(
            refusal=Refusal(
                "FORGE_ERR_CLIENT_REFUSED",
                f"The client answered {method} with an error ({error.get('code')}: {detail}).",
                client_error=error.get("code"),
            )
        )

    def timed_out(self) -> Said:
        asked = self.outstanding
        return self.advance(
            refusal=Refusal(
                "FORGE_ERR_CLIENT_TIMEOUT",
                f"The client did not answer {asked.method if asked else 'the request'} within "
                f"{self.seconds:g} s (FORGE_CLIENT_REQUEST_SECONDS); the request was cancelled. Call the tool again "
                "when the client can answer.",
            )
        )

    def abandon(self, outcome: str) -> None:
        """The client cancelled the call or went away, or its session ended: close the tool, and audit the call with
        this outcome."""
        self.steps.close()
        self.ctx.messages.clear()
        with _suppress_all():
            self.conclude(
                raising(Refusal(outcome, "The call ended before its answer: " + outcome.replace("_", " ") + "."))
            )

    def run_through(self) -> dict[str, Any]:
        """Run the tool to its end in this hop, where nothing can carry a conversation."""
        refusal: Refusal | None = None
        while True:
            try:
                item = self.steps.throw(refusal) if refusal is not None else self.steps.send(None)
            except StopIteration as stop:
                return self.conclude(_returning(stop.value))
            except Exception as failure:
                return self.conclude(raising(failure))
            refusal = None
            if isinstance(item, Ask):
                refusal = Refusal(
                    "FORGE_ERR_CLIENT_UNREACHABLE",
                    f"This tool asks the client ({item.method}) while it runs, which needs a Streamable HTTP "
                    "session whose POST accepts text/event-stream; call it that way, on its own (not in a batch).",
                )

    def _unaskable(self, item: Ask) -> Refusal | None:
        if self.ctx.stateless:
            return Refusal(
                "FORGE_ERR_CLIENT_UNREACHABLE",
                f"This tool asks the client ({item.method}) while it runs; at revision {self.ctx.revision} the server "
                "sends no requests to its client. Call it in a session (initialize, revision 2025-11-25).",
            )
        declared = self.ctx.client_capabilities or {}
        if item.capability in declared:
            return None
        return Refusal(
            "FORGE_ERR_CLIENT_CAPABILITY",
            f"This tool asks the client for {item.capability} ({item.method}), which this session's client did not "
            "declare at initialize; use a client that offers it.",
            capability=item.capability,
        )

    def _flush(self) -> list[dict[str, Any]]:
        queued = list(self.ctx.messages)
        self.ctx.messages.clear()
        return queued

    def _progress(self, item: Progress) -> dict[str, Any]:
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": item.progress}
        if item.total is not None:
            params["total"] = item.total
        if item.message:
            params["message"] = item.message
        return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}

    def _finish(self, notes: list[dict[str, Any]], produce: Callable[[], Any]) -> Said:
        try:
            return Said(notes=[*notes, *self._flush()], result=self.conclude(produce))
        except Exception as failure:  # audited by `conclude`; answered -32603 by whoever sends the answer
            return Said(notes=[*notes, *self._flush()], failure=failure)


def _returning(value: Any) -> Callable[[], Any]:
    return lambda: value


def raising(error: BaseException) -> Callable[[], Any]:
    def produce() -> Any:
        raise error

    return produce


class _suppress_all:
    """Nothing that fails while abandoning a call may reach the consumer: the client is gone already."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        if exc[0] is not None:
            logger.warning("auditing an abandoned call failed", exc_info=exc)
        return True
