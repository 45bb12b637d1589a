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

Only a Streamable HTTP session's single POST that accepts `text/event-stream` can carry a conversation. For
any other call in a session (JSON only, a batch, the legacy transport) the tool runs to its end in its one
hop: its progress is dropped, and each request it makes raises `FORGE_ERR_CLIENT_UNREACHABLE` inside it.

At the stateless revision (2026-07-28) the server sends its client no requests at all (SEP-2322): a POST that
accepts `text/event-stream` carries the call's progress, and its requests are rounds (`Rounds`). The call
runs from its start on each request; what it asks is answered from the answers the request brings (its
`inputResponses`, and earlier rounds' sealed in its `requestState`), and the first request they do not answer
ends the call with an `input_required` result naming what to ask; the client asks, and sends the call again
with the answers. So a tool that converses must ask the same things, by the same keys, each time it is run
with the same arguments and answers (which reading tools do). A request for a capability the request's
client did not declare ends the call with -32021 (`dialogue.can_ask` lets a tool ask only what it may). A
batch (`ask_all`) goes out in one round at 2026-07-28 and one request after another in a session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings

from forge_core.canonical import canonical_json
from forge_core.errors import Refusal
from mcp_api import jsonrpc, request_state
from mcp_api.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError

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
    """A request to the client: its method, its params, the client capability it needs, and the key that names
    it among a 2026-07-28 call's input requests (by default its capability and its place in the call)."""

    method: str
    params: dict[str, Any]
    capability: str
    key: str | None = None


@dataclass(frozen=True)
class Batch:
    """Requests to the client that do not depend on one another, by key; the yield evaluates to their results
    by the same keys. At 2026-07-28 they go out together, in one input_required; in a session, one after
    another."""

    asks: dict[str, Ask]


def progress(done: float, total: float | None = None, message: str | None = None) -> Progress:
    """Yield this to report progress (sent only when the call asked for it with a progress token)."""
    return Progress(done, total, message)


def pause(seconds: float) -> Pause:
    """Yield this to wait a moment without holding a worker thread (at most MAX_PAUSE_SECONDS)."""
    return Pause(min(max(seconds, 0.0), MAX_PAUSE_SECONDS))


def create_message(messages: list[dict[str, Any]], *, max_tokens: int, key: str | None = None, **extra: Any) -> Ask:
    """Yield this to ask the client's model for a message (sampling); it evaluates to the client's result."""
    return Ask("sampling/createMessage", {"messages": messages, "maxTokens": max_tokens, **extra}, "sampling", key)


def elicit(message: str, requested_schema: dict[str, Any], *, key: str | None = None) -> Ask:
    """Yield this to ask the client's user for input (form elicitation); it evaluates to the client's result
    (`action` accept, decline or cancel, and `content`)."""
    return Ask("elicitation/create", {"message": message, "requestedSchema": requested_schema}, "elicitation", key)


def list_roots(*, key: str | None = None) -> Ask:
    """Yield this to ask the client for its roots; it evaluates to the client's result (`roots`)."""
    return Ask("roots/list", {}, "roots", key)


def ask_all(asks: dict[str, Ask]) -> Batch:
    """Yield this to make several requests at once; it evaluates to the client's results by the same keys."""
    return Batch(asks)


def can_ask(ctx: CallContext, capability: str) -> bool:
    """Whether this request's (or session's) client declared `capability` (sampling, elicitation, roots)."""
    return capability in (ctx.client_capabilities or {})


def converses(tool: Tool) -> bool:
    return tool.handler_is_generator


def reply_group(token: ClientToken, session_id: str, request_id: Any) -> str:
    """The channel-layer group where the client's answer to one server request arrives: named by the session
    and the request's id, so only a POST of the session the request went to can answer it."""
    digest = hashlib.sha256(json.dumps([f"session:{session_id}", token.pk, request_id]).encode()).hexdigest()[:40]
    return f"mcp-reply.{digest}"


# --- 2026-07-28: rounds of one call (multi round-trip requests) ------------------------------------------------


ROUNDS_STATE_VERSION = "frr1"
ROUNDS_PURPOSE = "mcp.rounds"
ROUNDS_STATE_KEYS = frozenset({"purpose", "principal", "call", "arguments", "answers", "expires"})
ROUNDS_STATE_SECONDS = 60 * 60
MAX_ROUNDS_STATE_CHARS = 1_000_000
MAX_INPUT_RESPONSES = 50


@dataclass(frozen=True)
class InputRequired:
    """A call that cannot end before its client answers: the `input_required` result it answers with."""

    result: dict[str, Any]


class Rounds:
    """What a 2026-07-28 request brings to a call that asks its client: the answers of earlier rounds (sealed in
    its `requestState`) and this round's `inputResponses`. The call runs again from its start on every round;
    each request it makes is answered from these, by key, and the first round it makes one they do not answer
    ends with `input_required`: the requests not answered, and a new state sealing every answer used so far
    (so an earlier answer cannot be changed on the way back). A key the call never asks for is ignored."""

    def __init__(self, ctx: CallContext, call: str, digest: str, sealed: dict[str, Any], fresh: dict[str, Any]):
        self.ctx, self.call, self.digest = ctx, call, digest
        self.sealed, self.fresh = sealed, fresh
        self.used: dict[str, Any] = {}
        self.asked = 0

    @classmethod
    def open(cls, ctx: CallContext, call: str, arguments: dict[str, Any], params: dict[str, Any]) -> Rounds:
        """The rounds of this request of `call` ("tool:NAME", "prompt:NAME"); -32602 when its `inputResponses`
        are not results by key, or its `requestState` is not one this server issued for this principal and
        call (changed, forged, stale, another's)."""
        responses = params.get("inputResponses", {})
        if not isinstance(responses, dict) or len(responses) > MAX_INPUT_RESPONSES:
            raise RpcError(
                INVALID_PARAMS,
                "Invalid params: inputResponses is an object with the client's result for each key of the "
                f"inputRequests you were sent (at most {MAX_INPUT_RESPONSES}).",
            )
        for key, value in responses.items():
            if not isinstance(value, dict):
                raise RpcError(
                    INVALID_PARAMS,
                    f"Invalid params: inputResponses[{str(key)[:60]!r}] must be the client's result object for that "
                    "request (for elicitation/create: action and content).",
                )
        digest = hashlib.sha256(canonical_json(arguments).encode()).hexdigest()
        state = params.get("requestState")
        sealed = {} if state is None else cls._opened(ctx, call, digest, state)
        return cls(ctx, call, digest, sealed, responses)

    @staticmethod
    def _opened(ctx: CallContext, call: str, digest: str, state: Any) -> dict[str, Any]:
        def refused(why: str) -> RpcError:
            return RpcError(
                INVALID_PARAMS,
                f"Invalid params: the requestState {why}. Send the request again without requestState and "
                "inputResponses to start over.",
            )

        try:
            parts = request_state.unseal(
                ROUNDS_STATE_VERSION, ROUNDS_PURPOSE, state, ROUNDS_STATE_KEYS, MAX_ROUNDS_STATE_CHARS
            )
        except request_state.StateRefused as why:
            raise refused(
                "was changed or forged" if str(why) == "changed" else "is not one this server issued"
            ) from None
        if parts["principal"] != ctx.token.owner_id:
            raise refused("was issued to another client")
        if parts["call"] != call or parts["arguments"] != digest:
            raise refused("was issued for another call (its name or arguments differ)")
        if not isinstance(parts["expires"], int) or parts["expires"] < time.time():
            raise refused("is stale")
        answers = json.loads(parts["answers"])
        return answers if isinstance(answers, dict) else {}

    def take(self, item: Ask | Batch) -> tuple[Any, dict[str, Ask]]:
        """The answer to what the call yields now (a result, or results by key for a batch) and the requests
        still unanswered. A request the client did not declare the capability for ends the call with -32021."""
        asks = item.asks if isinstance(item, Batch) else {self._key(item): item}
        missing = [ask.capability for ask in asks.values() if not can_ask(self.ctx, ask.capability)]
        if missing:
            raise RpcError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"This call needs the client capability {', '.join(sorted(set(missing)))}, which the request's "
                "io.modelcontextprotocol/clientCapabilities does not declare; declare it to be asked.",
                {"requiredCapabilities": {capability: {} for capability in sorted(set(missing))}},
            )
        answers: dict[str, Any] = {}
        unanswered: dict[str, Ask] = {}
        for key, ask in asks.items():
            self.asked += isinstance(item, Batch)
            found = self.sealed.get(key, self.fresh.get(key))
            if found is None:
                unanswered[key] = ask
            else:
                answers[key] = self.used[key] = found
        if isinstance(item, Batch):
            return answers, unanswered
        return next(iter(answers.values()), None), unanswered

    def _key(self, ask: Ask) -> str:
        self.asked += 1
        return ask.key or f"{ask.capability}_{self.asked}"

    def input_required(self, unanswered: dict[str, Ask]) -> InputRequired:
        parts = {
            "purpose": ROUNDS_PURPOSE,
            "principal": self.ctx.token.owner_id,
            "call": self.call,
            "arguments": self.digest,
            "answers": json.dumps(self.used, sort_keys=True, separators=(",", ":")),
            "expires": int(time.time()) + ROUNDS_STATE_SECONDS,
        }
        requests = {key: {"method": ask.method, "params": ask.params} for key, ask in unanswered.items()}
        return InputRequired(
            {
                "resultType": "input_required",
                "inputRequests": requests,
                "requestState": request_state.seal(ROUNDS_STATE_VERSION, parts),
            }
        )


def run_rounds(ctx: CallContext, steps: Generator[Any, Any, Any], rounds: Rounds | None) -> Any:
    """Run a conversing handler to its end in one hop, progress dropped: at 2026-07-28 (`rounds`) its requests
    are answered from the rounds or end it with `InputRequired`; elsewhere each raises
    FORGE_ERR_CLIENT_UNREACHABLE inside it. Used where no event stream carries the call (prompts/get)."""
    answer: Any = None
    refusal: Refusal | None = None
    while True:
        try:
            item = steps.throw(refusal) if refusal is not None else steps.send(answer)
        except StopIteration as stop:
            return stop.value
        answer, refusal = None, None
        if isinstance(item, Ask | Batch):
            if rounds is None:
                refusal = unreachable(item)
                continue
            answer, unanswered = rounds.take(item)
            if unanswered:
                steps.close()
                return rounds.input_required(unanswered)


def unreachable(item: Ask | Batch) -> Refusal:
    method = item.method if isinstance(item, Ask) else ", ".join(ask.method for ask in item.asks.values())
    return Refusal(
        "FORGE_ERR_CLIENT_UNREACHABLE",
        f"This asks the client ({method}) while it runs, which needs a Streamable HTTP session whose POST accepts "
        "text/event-stream, or revision 2026-07-28 (its input_required rounds); call it that way, on its own "
        "(not in a batch).",
    )


def one_at_a_time(steps: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """The steps of a conversing tool with each batch of requests asked one after another, as a session's stream
    carries them; a refusal of one of them is raised in the tool at the batch's yield."""
    try:
        return (yield from _batches_in_turn(steps))
    finally:
        steps.close()  # the call ended early (cancelled, its client gone): the tool's own clean-up runs now


def _batches_in_turn(steps: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            item = steps.throw(thrown) if thrown is not None else steps.send(sent)
        except StopIteration as stop:
            return stop.value
        sent, thrown = None, None
        if not isinstance(item, Batch):
            try:
                sent = yield item
            except Refusal as refusal:
                thrown = refusal
            continue
        answers: dict[str, Any] = {}
        try:
            for key, ask in item.asks.items():
                answers[key] = yield ask
            sent = answers
        except Refusal as refusal:
            thrown = refusal


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
        rounds: Rounds | None = None,
    ) -> None:
        self.ctx = ctx
        # At 2026-07-28 the call's requests are its rounds' (`Rounds`); in a session they go out on its stream.
        self.rounds = rounds
        self.steps = steps if rounds is not None else one_at_a_time(steps)
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
        if isinstance(said.failure, RpcError):
            return jsonrpc.error(self.request_id, said.failure)
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
            elif isinstance(item, Ask | Batch) and self.rounds is not None:
                ended = self._from_rounds(item)
                if isinstance(ended, Said):
                    return Said(notes=[*notes, *ended.notes], result=ended.result, failure=ended.failure)
                answer = ended
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
        """Run the tool to its end in this hop, where no stream carries a conversation (its progress is dropped;
        at 2026-07-28 its requests are answered from its rounds)."""
        answer: Any = None
        refusal: Refusal | None = None
        while True:
            try:
                item = self.steps.throw(refusal) if refusal is not None else self.steps.send(answer)
            except StopIteration as stop:
                return self.conclude(_returning(stop.value))
            except Exception as failure:
                return self.conclude(raising(failure))
            answer, refusal = None, None
            if isinstance(item, Ask | Batch) and self.rounds is not None:
                ended = self._from_rounds(item)
                if isinstance(ended, Said):
                    if ended.failure is not None:
                        raise ended.failure
                    assert ended.result is not None
                    return ended.result
                answer = ended
            elif isinstance(item, Ask | Batch):
                refusal = unreachable(item)

    def _from_rounds(self, item: Ask | Batch) -> Any:
        """The answer the rounds hold for what the tool yields, or (a `Said`) the call's end: input_required for
        requests not answered yet, or the -32021 of one the client cannot be asked."""
        assert self.rounds is not None
        try:
            answer, unanswered = self.rounds.take(item)
        except RpcError as rejected:
            self.steps.close()
            return self._finish([], raising(rejected))
        if unanswered:
            self.steps.close()
            return self._finish([], _returning(self.rounds.input_required(unanswered)))
        return answer

    def _unaskable(self, item: Ask) -> Refusal | None:
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
