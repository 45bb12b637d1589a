"""The operator REST API for the team caretaker, mounted at /api/caretaker/ (DESIGN section 10).

What the caretaker screen does with peers, for a caretaker's scripts: list the team's peers with their
certificate and key art, register a peer, and mint a one-time enrollment code for one (the raw code is in that
one answer and never again; the server keeps its digest). Approving a member's certificate request is a
pending confirmation like any other: POST /api/confirmations/<id>/approve with the key's memorable ID as
`typed_id`.

Who may call is the operator API's rule (`forge_core.rest.OperatorsOnly`: a console login with CSRF, or an
operator token; a client token is refused) and, beside it, the caretaker's permission
(`caretaker.activation.may_act`): 403 FORGE_ERR_PERMISSION_DENIED without it. Each view parses, calls one
function of `caretaker.services` (which audits) and serializes; its refusals go out as problem details.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from caretaker import activation, services
from caretaker.models import Role
from forge_core.console import signed_in
from forge_core.errors import Refusal
from forge_core.rest import BAD_QUERY, OPERATOR_REFUSED, operator_view, parsed_body, query_parameters, refusal

CARETAKER_REFUSED = {
    **OPERATOR_REFUSED,
    403: refusal(
        "Not an operator, a client token, a missing or forged CSRF token, or no 'Can run the team certificate "
        "authority' permission."
    ),
}
BODY_REFUSED = {
    400: refusal("The body is not the JSON object documented here, or a value is not valid."),
    415: refusal("The body is not sent as application/json."),
    503: refusal("The audit log cannot be written, so nothing was done."),
}


class PeerRow(serializers.Serializer):
    name = serializers.CharField()
    role = serializers.CharField()
    endpoint = serializers.CharField(help_text="Where the peer serves, or empty.")
    state = serializers.CharField(help_text="enrolling, active or revoked.")
    serial = serializers.CharField(help_text="The current certificate's serial (hex), or empty.")
    fingerprint_sha256 = serializers.CharField(help_text="SHA-256 of the current certificate, or empty.")
    expires = serializers.CharField(allow_null=True, help_text="When the certificate expires (ISO 8601), or null.")
    revoked = serializers.BooleanField()
    key_fingerprint = serializers.CharField(required=False, help_text="SHA256:... of the certified key.")
    memorable_id = serializers.CharField(required=False, help_text="The certified key's memorable ID.")
    randomart = serializers.CharField(required=False, help_text="The certified key's randomart (ssh-keygen's).")


class PeerList(serializers.Serializer):
    peers = PeerRow(many=True)


class NewPeer(BaseModel):
    """The body of POST /api/caretaker/peers."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(max_length=100, description="The member's name, its certificate's subject (alice@team).")
    role: str = Field(default=Role.AUTHOR, description=f"One of {', '.join(Role.values)}.")
    endpoint: str = Field(default="", max_length=300, description="Where the peer serves (https://...), or empty.")


class MintedCode(serializers.Serializer):
    peer = serializers.CharField()
    code = serializers.CharField(help_text="The one-time enrollment code: shown in this answer only.")
    expires_at = serializers.DateTimeField()


def _require_caretaker_permission(request: Request) -> None:
    if not activation.may_act(request.user):
        raise Refusal(
            "FORGE_ERR_PERMISSION_DENIED",
            "Only a caretaker may do this: ask an administrator for the 'Can run the team certificate authority' "
            "permission.",
            status=403,
        )


def _peer_row(name: str) -> dict[str, Any]:
    return next(peer for peer in services.list_peers() if peer["name"] == name)


@extend_schema(
    methods=["GET"],
    summary="The team's peers",
    description="Every peer with its state, certificate and the certified key's memorable ID and randomart.",
    responses={200: PeerList, **BAD_QUERY, **CARETAKER_REFUSED},
)
@extend_schema(
    methods=["POST"],
    summary="Register a peer",
    description="A member the caretaker approves; its certificate's subject and SAN will come from here. Audited.",
    request=NewPeer,
    responses={201: PeerRow, **CARETAKER_REFUSED, **BODY_REFUSED, 409: refusal("There is a peer of that name.")},
)
@operator_view("GET", "POST", json_body=True)
def peers(request: Request) -> Response:
    query_parameters(request, frozenset())
    _require_caretaker_permission(request)
    if request.method == "GET":
        return Response({"peers": PeerRow(services.list_peers(), many=True).data})
    order = parsed_body(NewPeer, request.data, send='a JSON object {"name": ..., "role": ..., "endpoint": ...}')
    peer = services.do_create_peer(
        order.name, role=order.role, endpoint=order.endpoint, actor=signed_in(request.user).get_username()
    )
    return Response(PeerRow(_peer_row(peer.name)).data, status=201)


@extend_schema(
    summary="Mint an enrollment code",
    description="A one-time code for the peer's client to present with its CSR (team.request_cert). The raw code "
    "is in this answer only; the server keeps its digest. Audited.",
    request=None,
    responses={
        201: MintedCode,
        **CARETAKER_REFUSED,
        400: refusal("The peer is revoked: register the member again under a new name."),
        404: refusal("There is no peer of that name."),
        503: refusal("The audit log cannot be written, so nothing was done."),
    },
)
@operator_view("POST")
def codes(request: Request, name: str) -> Response:
    query_parameters(request, frozenset())
    _require_caretaker_permission(request)
    minted = services.do_mint_code(name, actor=signed_in(request.user).get_username())
    body = {"peer": minted.code.peer.name, "code": minted.raw, "expires_at": minted.code.expires_at}
    response = Response(MintedCode(body).data, status=201)
    response["Cache-Control"] = "no-store"
    return response
