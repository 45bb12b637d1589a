"""The W3C Trace Context a client sends in a request's `params._meta` (SEP-414), kept for the call's audit row.

A client already inside a trace names it with `traceparent` (and, optionally, the vendors' `tracestate`) under
`_meta`, un-prefixed as SEP-414 allows. Forge joins no tracing system; it records the context on the audit row
of the call it arrived with, so an operator can find a client's trace from the log and the other way round.
A value that does not follow the W3C Trace Context format is ignored, never refused: the request is answered
as if it carried none (a `tracestate` is read only beside a valid `traceparent`, as the W3C text asks).
"""

from __future__ import annotations

import re
from typing import Any

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex (W3C Trace Context, section 3.2).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_KEY = re.compile(r"[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}")
# Printable ASCII but ',' and '=', spaces allowed inside, never last; at most 256 characters (section 3.3.1.3).
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
MAX_TRACESTATE_CHARS = 512  # what a vendor must propagate at least; a longer one is not kept
MAX_TRACESTATE_MEMBERS = 32


def trace_context(params: Any) -> dict[str, str]:
    """The valid trace context in a request's `params._meta`: `traceparent` and, when it is valid too,
    `tracestate`; empty when there is none or it is malformed."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    parent = traceparent(meta.get(TRACEPARENT))
    if parent is None:
        return {}
    context = {TRACEPARENT: parent}
    state = tracestate(meta.get(TRACESTATE))
    if state:
        context[TRACESTATE] = state
    return context


def traceparent(value: Any) -> str | None:
    """The traceparent as its four fields, or None when malformed. A version above 00 may carry more fields
    after them (section 3.2.4: read what this version defines, ignore the rest); version ff is invalid, and so
    are an all-zero trace or parent id."""
    if not isinstance(value, str) or len(value) < 55:
        return None
    head = value[:55]
    found = _TRACEPARENT.fullmatch(head)
    if found is None:
        return None
    version, trace_id, parent_id, _flags = found.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if version == "00" and len(value) != 55:
        return None
    if len(value) > 55 and (value[55] != "-" or len(value) > 512):
        return None
    return head


def tracestate(value: Any) -> str | None:
    """The tracestate's list members joined with commas, or None when absent or malformed (a bad member, a
    duplicated key, more than 32 members or 512 characters)."""
    if not isinstance(value, str) or not value or len(value) > MAX_TRACESTATE_CHARS:
        return None
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    keys = set()
    for member in members:
        key, equals, item = member.partition("=")
        if not equals or not _KEY.fullmatch(key) or not _VALUE.fullmatch(item) or key in keys:
            return None
        keys.add(key)
    return ",".join(members)
