"""The audit log over HTTP: its events for operators, its signed checkpoints and Merkle proofs for any client.

`events` lists the canonical rows (the exact JSON each Merkle leaf hashes, so a client can recompute
the leaf), filtered, in sequence order and paged by `seq_after`. `checkpoint` gives the latest signed
checkpoint with the public key that checks it. The two proofs are served only against sizes a
checkpoint was signed at, because a root nobody signed proves nothing. Each view parses, authorizes,
reads the stored tree through `audit.merkle` and serializes; a bad parameter is a 400 that says what to
send. Who is asking is settled by the authentication classes in settings (a console login, a client
token through `access.rest`, or an operator token through `console.rest`), so this app imports neither edge;
the events are the operator API's (`forge_core.rest.operator_view`: a console login or an operator token,
never a client token, whoever owns it), the checkpoint and proofs any authenticated caller's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit import merkle
from audit.models import AuditCheckpoint, AuditEvent, EventKind
from audit.services import DatabaseNodeStore, checkpoint_public_key, event_line
from forge_core.rest import BadParameter, next_page_url, operator_view, query_parameters, refusal, whole_number

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
EVENT_FILTERS = ("kind", "tool", "called_by", "session", "project")
EVENT_PARAMETERS = frozenset({*EVENT_FILTERS, "since", "until", "seq_after", "limit"})
LATEST = "GET /api/audit/checkpoint gives the latest signed size"


class TreeIncomplete(APIException):
    # Only a damaged store gets here: a checkpoint is signed over nodes that were read to sign it.
    status_code = 503
    default_code = "audit_tree_incomplete"
    default_detail = "The audit tree lacks nodes this proof needs; an operator should run 'manage.py audit_verify'."


# --- documented shapes: the views build these bodies, the serializers describe them in the schema --


class EventRow(serializers.Serializer):
    seq = serializers.IntegerField(help_text="The event's position in the log, from 1; leaf seq - 1 of the tree.")
    ts = serializers.CharField(help_text="When it was recorded, UTC, ISO 8601.")
    kind = serializers.ChoiceField(choices=EventKind.choices)
    tool = serializers.CharField()
    arguments = serializers.DictField(help_text="The call's arguments, secrets masked.")
    outcome = serializers.CharField()
    called_by = serializers.CharField()
    session = serializers.CharField()
    client_label = serializers.CharField()
    project = serializers.CharField()
    prev_mac = serializers.CharField(help_text="The MAC of the event before it (the hash chain).")
    mac = serializers.CharField()


class EventPage(serializers.Serializer):
    events = EventRow(many=True, help_text="The canonical rows: each one's canonical JSON is its Merkle leaf.")
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page, or null on the last one.")


class PublicKey(serializers.Serializer):
    key_name = serializers.CharField()
    origin = serializers.CharField()
    ed25519_public_key = serializers.CharField(help_text="Base64.")
    verifier_key = serializers.CharField(help_text="The signed-note verifier key string.")


class Checkpoint(serializers.Serializer):
    size = serializers.IntegerField()
    # A field named root: the stubs see it replace Field.root, but the serializer metaclass takes declared
    # fields off the class, so Field.root stays as it is at run time; the name is the API's.
    root = serializers.CharField(help_text="Base64 of the tree's root hash at this size.")  # type: ignore[assignment]
    note = serializers.CharField(help_text="The signed checkpoint note.")
    public_key = PublicKey()


class InclusionProof(serializers.Serializer):
    seq = serializers.IntegerField()
    leaf_index = serializers.IntegerField()
    size = serializers.IntegerField()
    leaf_hash = serializers.CharField(help_text="Base64.")
    proof = serializers.ListField(child=serializers.CharField(), help_text="Base64 hashes, leaf to root.")
    root = serializers.CharField(help_text="Base64.")  # type: ignore[assignment]  # as Checkpoint.root
    note = serializers.CharField(help_text="The checkpoint note that signs the root.")


class ConsistencyProof(serializers.Serializer):
    # "from" is a Python keyword: declared as from_ and renamed on the wire below.
    from_ = serializers.IntegerField()
    to = serializers.IntegerField()
    proof = serializers.ListField(child=serializers.CharField(), help_text="Base64 hashes.")
    root_from = serializers.CharField(help_text="Base64.")
    root_to = serializers.CharField(help_text="Base64.")
    note_from = serializers.CharField()
    note_to = serializers.CharField()

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        return {"from": fields.pop("from_"), **fields}


REFUSED = {
    400: refusal("A query parameter is unknown, repeated or not valid."),
    401: refusal("No credentials, or a token that is unknown, expired or revoked."),
}
NOT_SIGNED = {404: refusal("No checkpoint was signed at a size asked for.")}
TREE_INCOMPLETE = {503: refusal("The stored tree lacks nodes the proof needs.")}


def _sizes(*names_and_descriptions: tuple[str, str]) -> list[OpenApiParameter]:
    return [
        OpenApiParameter(name, OpenApiTypes.INT, required=True, description=description)
        for name, description in names_and_descriptions
    ]


# --- views -----------------------------------------------------------------------------------------


@extend_schema(
    summary="Audit events",
    parameters=[
        OpenApiParameter("kind", OpenApiTypes.STR, enum=EventKind.values),
        *(OpenApiParameter(name, OpenApiTypes.STR) for name in EVENT_FILTERS if name != "kind"),
        OpenApiParameter("since", OpenApiTypes.DATETIME, description="From this instant on (ISO 8601)."),
        OpenApiParameter("until", OpenApiTypes.DATETIME, description="Before this instant (ISO 8601)."),
        OpenApiParameter("seq_after", OpenApiTypes.INT, description="The seq of the last event already read."),
        OpenApiParameter("limit", OpenApiTypes.INT, description=f"The page size, 1 to {MAX_PAGE_SIZE}."),
    ],
    responses={200: EventPage, **REFUSED, 403: refusal("Not a console operator.")},
)
@operator_view("GET")
def events(request: Request) -> Response:
    """Events in sequence order, filtered; `next` is the URL of the following page, or null."""
    params = query_parameters(request, EVENT_PARAMETERS)
    kind = params.get("kind")
    if kind is not None and kind not in EventKind.values:
        raise BadParameter(f"kind must be one of {', '.join(EventKind.values)}; got {kind!r}.")
    since, until = _instant(params, "since"), _instant(params, "until")
    seq_after = whole_number(params, "seq_after", "the seq of the last event already read", minimum=0, default=0)
    limit = whole_number(params, "limit", "the page size", minimum=1, maximum=MAX_PAGE_SIZE, default=PAGE_SIZE)

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
        following = next_page_url(request, "seq_after", str(page[-1].seq))
    return Response({"events": [json.loads(event_line(event)) for event in page], "next": following})


@extend_schema(
    summary="The latest signed checkpoint",
    responses={200: Checkpoint, **REFUSED, 404: refusal("No checkpoint has been signed yet.")},
)
@api_view(["GET"])
def checkpoint(request: Request) -> Response:
    """The latest signed checkpoint and the key that checks it."""
    query_parameters(request, frozenset())
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


@extend_schema(
    summary="Inclusion proof of an event",
    parameters=_sizes(("seq", "The seq of the event."), ("size", "The size of a signed checkpoint.")),
    responses={200: InclusionProof, **REFUSED, **NOT_SIGNED, **TREE_INCOMPLETE},
)
@api_view(["GET"])
def inclusion_proof(request: Request) -> Response:
    """RFC 9162 inclusion proof of event `seq` in the tree of a signed checkpoint's `size`."""
    params = query_parameters(request, frozenset({"seq", "size"}))
    seq = whole_number(params, "seq", "the seq of an event", minimum=1)
    size = whole_number(params, "size", f"the size of a signed checkpoint ({LATEST})", minimum=1)
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


@extend_schema(
    summary="Consistency proof between two checkpoints",
    parameters=_sizes(
        ("from", "The size of the older signed checkpoint."), ("to", "The size of the newer signed checkpoint.")
    ),
    responses={200: ConsistencyProof, **REFUSED, **NOT_SIGNED, **TREE_INCOMPLETE},
)
@api_view(["GET"])
def consistency_proof(request: Request) -> Response:
    """RFC 9162 consistency proof that the tree at checkpoint size `to` extends the one at `from`."""
    params = query_parameters(request, frozenset({"from", "to"}))
    old = whole_number(params, "from", f"the size of the older signed checkpoint ({LATEST})", minimum=1)
    new = whole_number(params, "to", f"the size of the newer signed checkpoint ({LATEST})", minimum=1)
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
