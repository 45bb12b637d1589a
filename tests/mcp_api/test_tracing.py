"""A W3C trace context in a request's `params._meta` (SEP-414): validated by the W3C format, recorded on the
call's audit row (tool calls and the other methods, at every revision), and ignored, never refused, when it
is malformed."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async

from audit.models import AuditEvent, EventKind
from mcp_api.tracing import trace_context, traceparent, tracestate
from tests.mcp_api.helpers import envelope, open_session, post, rpc, send, stateless_headers, stateless_rpc

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


@pytest.mark.parametrize(
    "value",
    [
        PARENT,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        # A later version may add fields after the four this one defines.
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next",
    ],
)
def test_a_valid_traceparent_is_kept_as_its_four_fields(value):
    assert traceparent(value) == value[:55]


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # the forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has exactly four fields
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.extra",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
    ],
)
def test_a_malformed_traceparent_is_ignored(value):
    assert traceparent(value) is None


def test_a_tracestate_keeps_its_members_without_the_optional_spaces():
    assert tracestate(" rojo=00f067aa0ba902b7 ,, congo=t61rcWkgMzE\t") == STATE
    assert tracestate("fw529a3039@dt=ZmFzdA,vendor=a value") == "fw529a3039@dt=ZmFzdA,vendor=a value"


@pytest.mark.parametrize(
    "value",
    [
        "Rojo=1",  # keys are lower case
        "rojo=1,rojo=2",  # a key given twice
        "rojo",  # no value
        "rojo=a,b",  # a member without '='
        "rojo=x=y",
        ",".join(f"k{n}=v" for n in range(33)),  # more than 32 members
        "rojo=" + "x" * 600,  # longer than 512 characters
        7,
    ],
)
def test_a_malformed_tracestate_is_ignored(value):
    assert tracestate(value) is None


def test_a_tracestate_is_read_only_beside_a_valid_traceparent():
    assert trace_context({"_meta": {"traceparent": PARENT, "tracestate": STATE}}) == {
        "traceparent": PARENT,
        "tracestate": STATE,
    }
    assert trace_context({"_meta": {"traceparent": PARENT, "tracestate": "Bad=1"}}) == {"traceparent": PARENT}
    assert trace_context({"_meta": {"traceparent": "bad", "tracestate": STATE}}) == {}
    assert trace_context({"_meta": "not an object"}) == {}
    assert trace_context(None) == {}


# --- on the wire, onto the audit row -----------------------------------------------------------------------


@database_sync_to_async
def last_row(tool: str) -> AuditEvent:
    return AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool=tool).latest("seq")


def _meta(**trace: Any) -> dict[str, Any]:
    return {"_meta": trace}


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("mcp_on")
async def test_a_tool_calls_trace_context_is_on_its_audit_row(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    response = await post(
        token,
        rpc("tools/call", {"name": "server_info", "arguments": {}, **_meta(traceparent=PARENT, tracestate=STATE)}),
        session_id=session_id,
    )

    assert "result" in response.json()
    row = await last_row("server_info")
    assert row.arguments["_meta"] == {"traceparent": PARENT, "tracestate": STATE}


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("mcp_on")
async def test_a_malformed_trace_context_is_answered_as_if_absent_and_not_recorded(cast):
    token = cast.operator.raw_token
    session_id = await open_session(token)

    response = await post(
        token,
        rpc("tools/call", {"name": "server_info", "arguments": {}, **_meta(traceparent="00-nope", tracestate=STATE)}),
        session_id=session_id,
    )

    assert response.json()["result"]["isError"] is False
    assert "_meta" not in (await last_row("server_info")).arguments


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("mcp_on")
async def test_a_stateless_request_beside_its_envelope_records_its_trace_context_too(cast):
    token = cast.operator.raw_token
    meta = {**envelope(), "traceparent": PARENT}

    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, "resources/read", name="forge://guidelines"),
        body=stateless_rpc("resources/read", {"uri": "forge://guidelines"}, meta=meta),
    )

    assert response.status == 200, response.body
    assert (await last_row("resources/read")).arguments["_meta"] == {"traceparent": PARENT}
