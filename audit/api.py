"""The audit log over HTTP: its events for operators, its signed checkpoints and Merkle proofs for any client.

`events` lists the canonical rows (the exact JSON each Merkle leaf hashes, so a client can recompute
the leaf), filtered, in sequence order and paged by `seq_after`. `checkpoint` gives the latest signed
checkpoint with the public key that checks it. The two proofs are served only against sizes a
checkpoint was signed at, because a root nobody signed proves nothing. Each view parses, authorizes,
reads the stored tree through `audit.merkle` and serializes; a bad parameter is a 400 that says what to
send. Who is asking is settled by the authentication classes in settings (a console login, or a client
token through `mcp_api.rest`), so this app never imports mcp_api.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import APIException, NotFound
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from audit import merkle
from audit.models import AuditCheckpoint, AuditEvent, EventKind
from audit.services import DatabaseNodeStore, checkpoint_public_key, event_line
from forge_site.console import is_operator

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
EVENT_FILTERS = ("kind", "tool", "called_by", "session", "project")
EVENT_PARAMETERS = frozenset({*EVENT_FILTERS, "since", "until", "seq_after", "limit"})
MAX_SEQ = 2**63 - 1  # the BigIntegerField's range
_WHOLE_NUMBER = re.compile(r"[0-9]{1,19}")
LATEST = "GET /api/audit/checkpoint gives the latest signed size"


class BadParameter(APIException):
    status_code = 400
    default_code = "bad_parameter"
    default_detail = "A query parameter is not valid."


class TreeIncomplete(APIException):
    # Only a damaged store gets here: a checkpoint is signed over nodes that were read to sign it.
    status_code = 503
    default_code = "audit_tree_incomplete"
    default_detail = "The audit tree lacks nodes this proof needs; an operator should run 'manage.py audit_verify'."


class IsOperator(BasePermission):
    message = "Only console operators may read audit events; checkpoints and proofs are open to every client."

    def has_permission(self, request: Request, view: object) -> bool:
        return is_operator(request.user)


# --- views -----------------------------------------------------------------------------------------


@api_view(["GET"])
@permission_classes([IsOperator])
def events(request: Request) -> Response:
    """Events in sequence order, filtered; `next` is the URL of the following page, or null."""
    params = _parameters(request, EVENT_PARAMETERS)
    kind = params.get("kind")
    if kind is not None and kind not in EventKind.values:
        raise BadParameter(f"kind must be one of {', '.join(EventKind.values)}; got {kind!r}.")
    since, until = _instant(params, "since"), _instant(params, "until")
    seq_after = _whole_number(params, "seq_after", "the seq of the last event already read", minimum=0, default=0)
    limit = _whole_number(params, "limit", "the page size", minimum=1, maximum=MAX_PAGE_SIZE, default=PAGE_SIZE)

    found = AuditEvent.objects.filter(
        seq__gt=seq_after, **{name: params[name] for name in EVENT_FILTERS if name in params}
    )
    if since is not None:
        found = found.filter(ts__gte=since)
    if until is not None:
        found = found.filter(ts__lt=until)
    page = list(found.order_by("seq")[: limit + 1])

    following = None
    if len(page) > limit:
        page = page[:limit]
        query = request.query_params.copy()
        query["seq_after"] = str(page[-1].seq)
        following = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    return Response({"events": [json.loads(event_line(event)) for event in page], "next": following})


@api_view(["GET"])
def checkpoint(request: Request) -> Response:
    """The latest signed checkpoint and the key that checks it."""
    _parameters(request, frozenset())
    latest = AuditCheckpoint.objects.order_by("-size").first()
    if latest is None:
        raise NotFound(
            "No checkpoint has been signed yet. One is signed as events accumulate; an operator can sign one "
            "now with 'manage.py audit_checkpoint'.",
            code="no_checkpoint",
        )
    return Response(
        {"size": latest.size, "root": _b64(latest.root), "note": latest.note, "public_key": checkpoint_public_key()}
    )


@api_view(["GET"])
def inclusion_proof(request: Request) -> Response:
    """RFC 9162 inclusion proof of event `seq` in the tree of a signed checkpoint's `size`."""
    params = _parameters(request, frozenset({"seq", "size"}))
    seq = _whole_number(params, "seq", "the seq of an event", minimum=1)
    size = _whole_number(params, "size", f"the size of a signed checkpoint ({LATEST})", minimum=1)
    if seq > size:
        raise BadParameter(
            f"Event {seq} is not in a tree of {size} events; ask with a checkpoint size of at least {seq} ({LATEST})."
        )
    signed = _signed_checkpoints(size)[size]
    leaf = (0, seq - 1)
    with _stored_tree() as store:
        leaf_hash = store.get_many([leaf]).get(leaf)
        if leaf_hash is None:
            raise merkle.MissingNodeError(f"leaf {leaf} is not stored")
        proof = merkle.inclusion_proof(seq - 1, size, store)
    return Response(
        {
            "seq": seq,
            "leaf_index": seq - 1,
            "size": size,
            "leaf_hash": _b64(leaf_hash),
            "proof": [_b64(node) for node in proof],
            "root": _b64(signed.root),
            "note": signed.note,
        }
    )


@api_view(["GET"])
def consistency_proof(request: Request) -> Response:
    """RFC 9162 consistency proof that the tree at checkpoint size `to` extends the one at `from`."""
    params = _parameters(request, frozenset({"from", "to"}))
    old = _whole_number(params, "from", f"the size of the older signed checkpoint ({LATEST})", minimum=1)
    new = _whole_number(params, "to", f"the size of the newer signed checkpoint ({LATEST})", minimum=1)
    if old >= new:
        raise BadParameter(f"from must be smaller than to; got from={old} and to={new}.")
    signed = _signed_checkpoints(old, new)
    with _stored_tree() as store:
        proof = merkle.consistency_proof(old, new, store)
    return Response(
        {
            "from": old,
            "to": new,
            "proof": [_b64(node) for node in proof],
            "root_from": _b64(signed[old].root),
            "root_to": _b64(signed[new].root),
            "note_from": signed[old].note,
            "note_to": signed[new].note,
        }
    )


# --- parsing and fetching --------------------------------------------------------------------------


def _parameters(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    """The query parameters, each given once; an unknown one is refused rather than silently ignored."""
    query = request.query_params
    for name in query:
        if name not in allowed:
            takes = f"takes {', '.join(sorted(allowed))}" if allowed else "takes no parameters"
            raise BadParameter(f"Unknown parameter {name!r}: this endpoint {takes}.")
        if len(query.getlist(name)) > 1:
            raise BadParameter(f"Send {name} once.")
    return {name: query[name] for name in query}


def _whole_number(
    params: dict[str, str], name: str, what: str, *, minimum: int, maximum: int = MAX_SEQ, default: int | None = None
) -> int:
    text = params.get(name)
    if text is None:
        if default is None:
            raise BadParameter(f"Send {name}: {what}, a whole number from {minimum}.")
        return default
    if not _WHOLE_NUMBER.fullmatch(text) or not minimum <= int(text) <= maximum:
        bound = f"from {minimum} to {maximum}" if maximum < MAX_SEQ else f"from {minimum}"
        raise BadParameter(f"{name} must be {what}, a whole number {bound}; got {text[:40]!r}.")
    return int(text)


def _instant(params: dict[str, str], name: str) -> datetime | None:
    text = params.get(name)
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadParameter(
            f"{name} must be an ISO 8601 date and time such as 2026-01-31T09:30:00Z (a '+' in an offset is "
            f"sent as %2B); got {text[:40]!r}."
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _signed_checkpoints(*sizes: int) -> dict[int, AuditCheckpoint]:
    """The checkpoints signed at these sizes; a size none was signed at is 404, since it proves nothing."""
    found = {signed.size: signed for signed in AuditCheckpoint.objects.filter(size__in=sizes)}
    for size in sizes:
        if size not in found:
            raise NotFound(
                f"No checkpoint was signed at size {size}; proofs are given only against signed sizes ({LATEST}).",
                code="unknown_checkpoint",
            )
    return found


@contextmanager
def _stored_tree() -> Iterator[DatabaseNodeStore]:
    try:
        yield DatabaseNodeStore()
    except merkle.MissingNodeError as exc:
        raise TreeIncomplete() from exc


def _b64(value: bytes | memoryview) -> str:
    return base64.b64encode(bytes(value)).decode("ascii")
