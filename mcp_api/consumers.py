"""The MCP transports as Channels consumers: Streamable HTTP at /mcp, legacy HTTP+SSE at /sse + /messages/.

One consumer instance per HTTP request. A plain exchange (most POSTs) reads the body within the size
limit, makes exactly one database hop through a transport's entry point (`mcp_api.transports`) and writes
the reply; it never touches the channel layer. A stream (GET /mcp, GET /sse, `subscriptions/listen`, and
the legacy transport's answers) joins channel-layer groups, so a message sent by any process reaches it:
events arrive as `mcp.message`, `mcp.tools_changed`, `mcp.task_status`, `mcp.revoked`, `mcp.session_ended`
and land in the methods of the same names. The stream mechanics (keep-alive comments, the periodic re-check that also
renews group membership, the end on disconnect) are `forge_core.streams`'; what is MCP's here is the token
and session a stream re-checks, its event ids, and how a listen stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from audit.models import EventKind
from audit.services import record
from confirmations.services import confirmation_group
from forge_core.errors import AuditUnavailable
from forge_core.live import SSE_HEADERS
from forge_core.origin import refusal_reason
from forge_core.streams import KEEPALIVE, EventStreamConsumer
from forge_core.workers import in_pool
from mcp_api import jsonrpc
from mcp_api import logging as client_logging
from mcp_api.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, RpcError, encode
from mcp_api.revisions import SUBSCRIPTION_ID_META_KEY
from mcp_api.transports import answers, legacy_sse, streamable, upkeep
from mcp_api.transports.core import ConversationPlan, Exchange, Reply, StreamPlan, WaitPlan

logger = logging.getLogger("forge.mcp")


def sse_event(data: str, *, event: str = "message", event_id: str | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


ABANDONED = {"gone": "client_gone", "cancelled": "client_cancelled", "ended": "session_ended"}
"""The audit outcome of a conversing call that ended without its answer, by what ended it."""


def _events(messages: list[Any]) -> bytes:
    return b"".join(sse_event(encode(message).decode()) for message in messages)


def progress_notification(token: Any, progress: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {
            "progressToken": token,
            "progress": progress,
            "message": "Waiting for an operator to approve or deny this change in the Forge console.",
        },
    }


async def _leave(layer: Any, channel: str, groups: list[str], pending: list[asyncio.Future]) -> None:
    """The end of a call held on its stream: what it still waited for is cancelled, its groups are left."""
    for waiting in pending:
        waiting.cancel()
    for group in groups:
        with contextlib.suppress(Exception):
            await layer.group_discard(group, channel)


def _audit_origin_refusal(path: str, reason: str) -> None:
    with contextlib.suppress(AuditUnavailable):
        record(EventKind.ORIGIN_REFUSED, arguments={"path": path, "reason": reason}, outcome="refused")


class McpHttpConsumer(EventStreamConsumer):
    """Base of the MCP endpoints: request/response by default, a channel-layer stream when asked."""

    handlers: dict[str, Callable[[Exchange], Reply]] = {}

    async def __call__(self, scope, receive, send) -> None:
        self.scope = scope
        self.base_send = send
        self.plan: StreamPlan | None = None
        self.response_started = self.response_ended = False
        self.event_seq = 0
        self.stream_key = ""  # drawn with the stream's first event id (most exchanges send none)
        self.receive = receive
        exchange = await self.read_exchange(scope, receive)
        if exchange is None:
            return
        try:
            reply = await self.reply_to(exchange)
            # A stream may stay open for hours: the request's parsed headers and body are not kept that long.
            del exchange
            await self.carry_out(reply)
        except Exception:  # the one boundary of an exchange: a failure ends the response, never leaves it open
            logger.exception("an MCP exchange failed; its response ends with an error")
            await self.end_with_error()

    async def read_exchange(self, scope: dict[str, Any], receive: Any) -> Exchange | None:
        """The request as the transports see it, or None once it has been answered: refused for its Host or
        Origin, or for its size, or its client gone before the body arrived."""
        exchange = Exchange.from_scope(scope)
        reason = refusal_reason(exchange.headers)
        if reason is not None:
            await in_pool(_audit_origin_refusal)(exchange.path, reason)
            await self.send_reply(Reply.rpc_error(RpcError(INVALID_REQUEST, f"Forbidden: {reason}"), status=403))
            return None
        body = await self.read_body(receive, exchange.headers)
        if body is None:
            return None
        exchange.body = body
        return exchange

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
        elif not message.get("more_body", False):
            self.response_ended = True
        await super().send(message)

    async def end_with_error(self) -> None:
        """End the response with a JSON-RPC -32603: as a JSON body when nothing was sent yet, else as the last
        event of the stream already open."""
        error = jsonrpc.error(None, RpcError(INTERNAL_ERROR, "Internal error. The server logged it; try again."))
        with contextlib.suppress(Exception):  # the client may have gone: nothing left to tell
            if not self.response_started:
                await self.send_reply(Reply(status=500, body=error))
            elif not self.response_ended:
                await self.send_body(sse_event(encode(error).decode()), more=False)

    async def read_body(self, receive, headers: dict[str, str]) -> bytes | None:
        """The request body, or None after refusing one over the limit (before parsing any of it)."""
        limit = settings.FORGE_MAX_BODY_BYTES
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self.refuse_oversize(limit)
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self.refuse_oversize(limit)
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def refuse_oversize(self, limit: int) -> None:
        exc = RpcError(INVALID_REQUEST, f"The request body is larger than {limit} bytes; send a smaller message.")
        await self.send_reply(Reply.rpc_error(exc, status=413))

    async def reply_to(self, exchange: Exchange) -> Reply:
        """The transport's reply to the exchange, with the messages it delivers and cancels already sent."""
        handler = self.handlers.get(exchange.method)
        if handler is None:
            allowed = ", ".join(sorted(self.handlers))
            exc = RpcError(INVALID_REQUEST, f"Method {exchange.method} is not allowed here; use {allowed}.")
            reply = Reply.rpc_error(exc, status=405)
            reply.headers["Allow"] = allowed
            return reply
        reply = await in_pool(handler)(exchange)
        if reply.deliver:
            layer = get_channel_layer()
            for group, message in reply.deliver:
                # As JSON text: a shared layer's serializer (msgpack) cannot carry every JSON value, such as
                # an id past 64 bits, which a client may choose.
                await layer.group_send(group, {"type": "mcp.message", "json": encode(message).decode()})
        for group in reply.cancel:
            await get_channel_layer().group_send(group, {"type": "mcp.cancelled"})
        for group, response in reply.replies:
            await get_channel_layer().group_send(group, {"type": "mcp.client_reply", "json": encode(response).decode()})
        if reply.stream is not None:
            # The stream's principal authenticated with this certificate if there is one (it decides alone).
            reply.stream.certificate = exchange.client_cert_chain
        return reply

    async def carry_out(self, reply: Reply) -> None:
        """Put the reply on the wire: a stream to hold open, a write call's wait, or the answer whole."""
        if reply.stream is not None:
            await self.open_stream(reply.stream, reply.headers)
        elif reply.wait is not None:
            await self.wait_for_decision(reply)
        elif reply.conversation is not None:
            await self.converse(reply.conversation)
        else:
            await self.send_reply(reply)

    async def wait_for_decision(self, reply: Reply) -> None:
        """Answer a write call on an SSE stream once an operator decides, with progress until then.

        The decision arrives through the confirmation's channel-layer group, from whichever process
        approved it; the state is read once after joining, so a decision made before that is not missed.
        At the deadline the call answers FORGE_ERR_CONFIRMATION_REQUIRED (the client then polls
        editor.confirm); a client that goes away simply ends the wait; a client that cancels the request
        (`notifications/cancelled`, through the request's group) cancels the confirmation and gets no answer,
        as cancellation asks. Whatever fails while waiting ends the stream with a JSON-RPC error, never leaves
        it open."""
        wait = reply.wait
        assert wait is not None
        layer = get_channel_layer()
        channel = await layer.new_channel()
        groups = [confirmation_group(wait.confirmation_id), wait.cancel_group]
        for group in groups:
            await layer.group_add(group, channel)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + headers})
        if reply.notes:
            await self.send_body(_events(reply.notes), more=True)
        disconnect = asyncio.ensure_future(self.wait_for_disconnect())
        received: list[asyncio.Future] = []
        try:
            try:
                last = await self.decision(wait, reply.body, layer, channel, disconnect, received)
            except Exception:
                logger.exception("a waiting write call failed; its stream ends with an error")
                failed = RpcError(
                    INTERNAL_ERROR,
                    "Internal error while waiting for the operator's decision. Call editor.confirm with the pending "
                    "id to learn the outcome.",
                )
                last = sse_event(encode(jsonrpc.error(wait.request_id, failed)).decode())
            # The answer first: leaving the groups is a round trip to Redis each, which the client need not wait for.
            if last is not None:
                await self.send_body(last, more=False)
        finally:
            await _leave(layer, channel, groups, [*received, disconnect])

    async def decision(
        self,
        wait: WaitPlan,
        deadline_answer: Any,
        layer: Any,
        channel: str,
        disconnect: asyncio.Future,
        received: list[asyncio.Future],
    ) -> bytes | None:
        """The last bytes of a waiting write call's stream, sending progress until they are known: its final
        answer, or nothing once the client cancelled the request; None when the client has gone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait.seconds
        progress = 0
        final = await in_pool(answers.decided)(wait)
        while final is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                final = deadline_answer
                break
            # One receive stays pending across progress ticks: cancelling a layer receive can drop the
            # message it was about to return.
            if not received:
                received.append(asyncio.ensure_future(layer.receive(channel)))
            done, _ = await asyncio.wait(
                {received[0], disconnect}, timeout=min(wait.interval, remaining), return_when=asyncio.FIRST_COMPLETED
            )
            if disconnect in done:
                return None
            if received[0] in done:
                event = received.pop().result()
                if event.get("type") == "mcp.cancelled":
                    await in_pool(answers.cancel_wait)(wait)
                    return b""
                if event.get("outcome") is not None:
                    final = answers.decided_answer(wait, event["outcome"])
                continue
            progress += 1
            notification = progress_notification(wait.progress_token, progress)
            await self.send_body(sse_event(encode(notification).decode()), more=True)
        if wait.log_decision and final is not deadline_answer:
            return _events([client_logging.decision_arrived(wait.tool, final), final])
        return sse_event(encode(final).decode())

    async def converse(self, plan: ConversationPlan) -> None:
        """Carry on a conversing tool's call on its SSE answer (`mcp_api.dialogue`): send what each step says,
        run the next step in the pool, and wait on the event loop (never in a worker) for the client's answer to
        a request until it comes, the client cancels the call or goes away, or FORGE_CLIENT_REQUEST_SECONDS pass
        (the request is then cancelled and the tool told). The stream ends with the call's answer, or with none
        when the client cancelled the call, as cancellation asks."""
        conversation = plan.conversation
        layer = get_channel_layer()
        channel = await layer.new_channel()
        # The call's cancellation, and its session's end or its token's revocation (which end the wait at once).
        joined = [plan.cancel_group, *plan.ends]
        for group in joined:
            await layer.group_add(group, channel)
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        disconnect = asyncio.ensure_future(self.wait_for_disconnect())
        received: list[asyncio.Future] = []
        said = plan.first
        last: bytes | None = None
        try:
            while True:
                if said.notes:
                    await self.send_body(_events(said.notes), more=True)
                if said.ended:
                    last = sse_event(encode(conversation.final(said)).decode())
                    break
                asked = said.request
                if asked is not None:
                    await layer.group_add(said.reply_group, channel)
                    joined.append(said.reply_group)
                    await self.send_body(sse_event(encode(asked).decode()), more=True)
                seconds = conversation.seconds if asked is not None else said.pause
                event = await self.client_event(layer, channel, disconnect, received, seconds, asked)
                if event in ("gone", "cancelled", "ended"):
                    await in_pool(conversation.abandon)(ABANDONED[event])
                    last = b"" if event != "gone" else None
                    break
                if asked is None:
                    said = await in_pool(conversation.advance)()
                elif event == "timeout":
                    cancel = {"requestId": asked["id"], "reason": "The client did not answer in time."}
                    notice = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
                    await self.send_body(sse_event(encode(notice).decode()), more=True)
                    said = await in_pool(conversation.timed_out)()
                else:
                    said = await in_pool(conversation.answered)(event)
        except Exception:
            logger.exception("a conversing tool call failed; its stream ends with an error")
            failed = RpcError(INTERNAL_ERROR, "Internal error. The server logged it; try again.")
            last = sse_event(encode(jsonrpc.error(conversation.request_id, failed)).decode())
        finally:
            await _leave(layer, channel, joined, [*received, disconnect])
        if last is not None:
            await self.send_body(last, more=False)

    async def client_event(
        self,
        layer: Any,
        channel: str,
        disconnect: asyncio.Future,
        received: list[asyncio.Future],
        seconds: float,
        asked: dict[str, Any] | None,
    ) -> Any:
        """What ends one wait of a conversation: the client's response to `asked` (the message), "cancelled",
        "gone", "ended" (the session ended or the token was revoked), or "timeout" after `seconds`; keep-alive comments go out meanwhile. A late answer to an earlier
        request is ignored."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return "timeout"
            # One receive stays pending across waits: cancelling a layer receive can drop its message.
            if not received:
                received.append(asyncio.ensure_future(layer.receive(channel)))
            timeout = min(remaining, settings.FORGE_SSE_KEEPALIVE_SECONDS)
            done, _ = await asyncio.wait(
                {received[0], disconnect}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if disconnect in done:
                return "gone"
            if received[0] not in done:
                if loop.time() < deadline:
                    await self.send_body(KEEPALIVE, more=True)
                continue
            event = received.pop().result()
            if event.get("type") == "mcp.cancelled":
                return "cancelled"
            if event.get("type") in ("mcp.session_ended", "mcp.revoked"):
                return "ended"
            if event.get("type") == "mcp.client_reply" and asked is not None:
                message = json.loads(event["json"])
                if message.get("id") == asked["id"]:
                    return message

    async def wait_for_disconnect(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass

    async def send_body(self, body: bytes, *, more: bool) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": more})

    async def send_reply(self, reply: Reply) -> None:
        """The reply whole. A JSON or empty body goes with its Content-Length: without one the server sends it
        chunked, which costs daphne a good part of a small call's CPU (docs/PERFORMANCE.md, section 14)."""
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()]
        if reply.body is None:
            if reply.status != 204:  # a 204 carries no Content-Length (RFC 9110, section 8.6)
                headers.append((b"content-length", b"0"))
            await self.send({"type": "http.response.start", "status": reply.status, "headers": headers})
            await self.send({"type": "http.response.body", "body": b""})
            return
        if reply.sse:
            await self.send({"type": "http.response.start", "status": reply.status, "headers": SSE_HEADERS + headers})
            await self.send({"type": "http.response.body", "body": _events([*reply.notes, reply.body])})
            return
        if isinstance(reply.body, str):
            body, content_type = reply.body.encode(), b"text/plain; charset=utf-8"
        else:
            body, content_type = encode(reply.body), b"application/json"
        headers.append((b"content-type", content_type))
        headers.append((b"content-length", str(len(body)).encode()))
        await self.send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    # --- streams ----------------------------------------------------------------------------------

    async def open_stream(self, plan: StreamPlan, extra_headers: dict[str, str]) -> None:
        """Stream the plan's events until the client goes away or the stream ends (`forge_core.streams`)."""
        self.plan = plan
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra_headers.items()]
        first = b"".join(
            sse_event(data, event=event, event_id=self.next_event_id()) for event, data in plan.first_events
        )
        # A comment as the first bytes makes the server flush the headers, so the client sees the stream open.
        await self.stream(self.receive, plan.groups, first=first or b": open\n\n", headers=headers)

    def next_event_id(self) -> str | None:
        if self.plan is None or not self.plan.event_ids:
            return None
        if not self.event_seq:
            # Event ids are "<stream key>-<n>": a session's streams never share one, whichever process holds them.
            self.stream_key = secrets.token_hex(6)
        self.event_seq += 1
        return f"{self.stream_key}-{self.event_seq}"

    async def send_event(self, message: dict[str, Any]) -> None:
        await self.send(
            {
                "type": "http.response.body",
                "body": sse_event(encode(message).decode(), event_id=self.next_event_id()),
                "more_body": True,
            }
        )

    def lapsed(self) -> bool:
        expires_at = self.plan.token_expires_at if self.plan is not None else None
        return expires_at is not None and expires_at <= timezone.now()

    async def may_stay_open(self) -> bool:
        plan = self.plan
        assert plan is not None
        return await in_pool(upkeep.stream_may_stay_open)(
            plan.token_id, plan.session_id, plan.stream_id, certificate=plan.certificate
        )

    async def end_stream(self) -> None:
        plan = self.plan
        if plan is not None and plan.subscription_id is not None:
            final = {
                "jsonrpc": "2.0",
                "id": plan.subscription_id,
                "result": {
                    "resultType": "complete",
                    "_meta": {SUBSCRIPTION_ID_META_KEY: plan.subscription_id},
                },
            }
            await self.send_event(final)
        await super().end_stream()

    async def stream_closed(self) -> None:
        plan = self.plan
        if plan is not None and (plan.stream_id is not None or (plan.end_session_on_close and plan.session_id)):
            await in_pool(upkeep.stream_ended)(plan.stream_id, plan.session_id, end_session=plan.end_session_on_close)

    # --- events from the channel layer and the client ----------------------------------------------

    async def mcp_message(self, event: dict[str, Any]) -> None:
        message = json.loads(event["json"])
        for item in message if isinstance(message, list) else [message]:
            await self.send_event(item)

    async def mcp_tools_changed(self, event: dict[str, Any]) -> None:
        method = "notifications/tools/list_changed"
        if self.plan is None or method not in self.plan.notifications:
            return
        notification: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if self.plan.subscription_id is not None:
            notification["params"] = {"_meta": {SUBSCRIPTION_ID_META_KEY: self.plan.subscription_id}}
        await self.send_event(notification)

    async def mcp_resources_changed(self, event: dict[str, Any]) -> None:
        """A project's accepted file (and so everything read from it) or only its draft changed: a listen stream
        following one of its resources hears `notifications/resources/updated` for each address it follows."""
        plan = self.plan
        if plan is None:
            return
        for uri, (project_id, is_draft) in plan.resources.items():
            if project_id == event.get("project") and (is_draft or not event.get("draft_only")):
                params = {"uri": uri, "_meta": {SUBSCRIPTION_ID_META_KEY: plan.subscription_id}}
                await self.send_event({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params})

    async def mcp_task_status(self, event: dict[str, Any]) -> None:
        """A task this listen stream named in its `taskIds` changed status (only such streams join the task's
        group): `notifications/tasks`, with the stream's subscription id."""
        plan = self.plan
        if plan is None or plan.subscription_id is None:
            return
        notification = json.loads(event["json"])
        params = notification.setdefault("params", {})
        params["_meta"] = {**params.get("_meta", {}), SUBSCRIPTION_ID_META_KEY: plan.subscription_id}
        await self.send_event(notification)

    async def mcp_revoked(self, event: dict[str, Any]) -> None:
        await self.end_stream()

    async def mcp_session_ended(self, event: dict[str, Any]) -> None:
        await self.end_stream()

    async def mcp_trust_changed(self, event: dict[str, Any]) -> None:
        """The roster, its CRL or the trust store changed: a peer's stream checks its certificate again at once
        and ends if it no longer passes (a bearer token's stream has nothing to check)."""
        if self.plan is not None and self.plan.certificate and not await self.may_stay_open():
            await self.end_stream()


class StreamableHttpConsumer(McpHttpConsumer):
    """`/mcp`: POST messages, GET a stream for server messages, DELETE to end the session."""

    handlers = {"POST": streamable.handle_post, "GET": streamable.handle_get, "DELETE": streamable.handle_delete}


class LegacySseConsumer(McpHttpConsumer):
    """`/sse` (2024-11-05): the stream; its first event names the endpoint to POST messages to."""

    handlers = {"GET": legacy_sse.handle_open}


class LegacyMessagesConsumer(McpHttpConsumer):
    """`/messages/?session_id=`: accepts a message (202); its answer travels on the session's stream."""

    handlers = {"POST": legacy_sse.handle_message}
