"""The operator REST API: open MCP sessions, access requests and their decisions, and the MCP switch.

What the console's screens do, for an operator's scripts: list the open sessions and the access
requests (keyset pages, as the audit events are paged), allow, deny or revoke a request through
`access.grants`, and read or turn the switch through `do_switch_mcp`. Each view parses, authorizes,
calls and serializes; every decision is audited by the function it calls, with the deciding operator.

Only operators get in: a console login (REST framework enforces CSRF on its unsafe methods) or an
operator token (`console.operator_tokens`). A client token authenticates, but is refused with a 403:
it stands for an MCP client, which must never decide its own access. A decision the consent functions
refuse (`access.grants.AccessDecisionRefused`, a refusal the REST edge renders as problem details) is 404
(no such request), 403 (no `grant_access` on its project, audited there) or 409 (already decided), each
with its FORGE_ERR code and a sentence.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser, User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.grants import do_decide_access, do_revoke_access
from access.models import AccessRequest, AccessState, McpSession
from access.services import do_switch_mcp
from console.site import switch_position
from forge_core.rest import (
    BAD_QUERY,
    OPERATOR_REFUSED,
    PAGE_QUERY,
    in_state,
    next_page_url,
    operator_view,
    page_in_creation_order,
    page_size,
    parsed_body,
    query_parameters,
    refusal,
    state_parameter,
    whole_number,
)

PAGE_PARAMETERS = frozenset({"after", "limit"})


DECISION_REFUSED = {
    **OPERATOR_REFUSED,
    403: refusal(
        "Not an operator, a client token, a missing or forged CSRF token, or no grant_access permission on "
        "the request's project (that attempt is audited)."
    ),
    404: refusal("There is no access request with this id."),
    409: refusal("The request is not in a state this decision applies to; nothing was changed."),
    503: refusal("The audit log cannot be written, so nothing was done."),
}


# --- serialized shapes -----------------------------------------------------------------------------


class SessionRow(serializers.ModelSerializer):
    revision = serializers.CharField(source="protocol_version", help_text="The MCP protocol revision it speaks.")
    client_label = serializers.CharField(source="token.label", help_text="The label of the token that opened it.")
    principal = serializers.CharField(source="token.owner.get_username", help_text="The token's owner.")

    class Meta:
        model = McpSession
        fields = ["id", "transport", "revision", "client_label", "principal", "created_at"]


class SessionPage(serializers.Serializer):
    sessions = SessionRow(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page, or null on the last one.")


class AccessRequestRow(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", help_text="The project's slug.")
    principal = serializers.CharField(source="token.owner.get_username", help_text="Who asks: the token's owner.")
    client_label = serializers.CharField(source="token.label", help_text="The label of the token that asks.")
    session = serializers.CharField(source="session_id", help_text="The session (or stateless handle) it is for.")

    class Meta:
        model = AccessRequest
        fields = [
            "id",
            "state",
            "project",
            "principal",
            "client_label",
            "session",
            "created_at",
            "decided_at",
            "decided_by",
        ]


class AccessRequestPage(serializers.Serializer):
    access_requests = AccessRequestRow(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page, or null on the last one.")


class SwitchPosition(serializers.Serializer):
    enabled = serializers.BooleanField(
        help_text="Whether MCP clients can use their tools (read as every call reads it)."
    )
    changed_by = serializers.CharField(help_text="Who turned it last; empty if nobody has.")
    changed_at = serializers.DateTimeField(allow_null=True, help_text="When it was turned last, or null.")


class SwitchTurned(SwitchPosition):
    changed = serializers.BooleanField(help_text="False when it already was in the position asked for.")


class SwitchOrder(BaseModel):
    """The body of PUT /api/mcp."""

    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool = Field(description="true switches MCP on; false switches it off and ends every grant.")


# --- views -----------------------------------------------------------------------------------------


@extend_schema(
    summary="Open MCP sessions",
    description="Sessions not ended yet, oldest first; `next` is the URL of the following page, or null.",
    parameters=[
        OpenApiParameter("after", OpenApiTypes.STR, description="The id of the last session already read."),
        *PAGE_QUERY,
    ],
    responses={200: SessionPage, **BAD_QUERY, **OPERATOR_REFUSED},
)
@operator_view("GET")
def sessions(request: Request) -> Response:
    params = query_parameters(request, PAGE_PARAMETERS)
    found = McpSession.objects.filter(ended_at__isnull=True).select_related("token__owner")
    page, following = page_in_creation_order(request, found, params, what="a session")
    return Response({"sessions": SessionRow(page, many=True).data, "next": following})


@extend_schema(
    summary="Access requests",
    description="Access requests in the order they were raised, optionally in one state; `next` is the URL "
    "of the following page, or null.",
    parameters=[
        state_parameter(AccessState.values, "requests"),
        OpenApiParameter("after", OpenApiTypes.INT, description="The id of the last request already read."),
        *PAGE_QUERY,
    ],
    responses={200: AccessRequestPage, **BAD_QUERY, **OPERATOR_REFUSED},
)
@operator_view("GET")
def access_requests(request: Request) -> Response:
    params = query_parameters(request, PAGE_PARAMETERS | {"state"})
    limit = page_size(params)
    after = whole_number(params, "after", "the id of the last request already read", minimum=0, default=0)
    found = AccessRequest.objects.filter(pk__gt=after, **in_state(params, AccessState.values))
    page = list(found.select_related("token__owner", "project").order_by("pk")[: limit + 1])
    following = None
    if len(page) > limit:
        page = page[:limit]
        following = next_page_url(request, "after", str(page[-1].pk))
    return Response({"access_requests": AccessRequestRow(page, many=True).data, "next": following})


def _decision_view(
    summary: str, description: str, decide: Callable[[int, User | AnonymousUser], AccessRequest]
) -> Callable[..., Response]:
    """POST /api/access-requests/<id>/<decision>: `decide` as the operator, the request as it is after."""

    @extend_schema(
        summary=summary, description=description, request=None, responses={200: AccessRequestRow, **DECISION_REFUSED}
    )
    @operator_view("POST")
    def decision(request: Request, request_id: int) -> Response:
        return Response(AccessRequestRow(decide(request_id, request.user)).data)

    return decision


allow = _decision_view(
    "Allow an access request",
    "Allow a pending request: the session may work on the project.",
    lambda pk, user: do_decide_access(pk, allow=True, user=user),
)
deny = _decision_view(
    "Deny an access request",
    "Deny a pending request: the session's project calls are refused.",
    lambda pk, user: do_decide_access(pk, allow=False, user=user),
)
revoke = _decision_view(
    "Revoke a grant",
    "End an allowed grant: the session's next project call is refused.",
    lambda pk, user: do_revoke_access(pk, user=user),
)


@extend_schema(
    methods=["GET"],
    summary="Read the MCP switch",
    description="Whether MCP is on, as every call reads it, and who turned it last.",
    responses={200: SwitchPosition, **BAD_QUERY, **OPERATOR_REFUSED},
)
@extend_schema(
    methods=["PUT"],
    summary="Turn the MCP switch",
    description="Switch MCP on or off for every client; off ends every grant and tells open streams that "
    "their tool list changed. Audited with the operator.",
    request=SwitchOrder,
    responses={
        200: SwitchTurned,
        **OPERATOR_REFUSED,
        400: refusal('The body is not {"enabled": true} or {"enabled": false}.'),
        415: refusal("The body is not sent as application/json."),
        503: refusal("The audit log cannot be written, so nothing was done."),
    },
)
@operator_view("GET", "PUT", json_body=True)
def mcp_switch(request: Request) -> Response:
    query_parameters(request, frozenset())
    if request.method == "GET":
        return Response(SwitchPosition(switch_position()).data)
    order = parsed_body(SwitchOrder, request.data, send='a JSON object {"enabled": true} or {"enabled": false}')
    changed = do_switch_mcp(order.enabled, acting_user=request.user.get_username())
    return Response({**SwitchPosition(switch_position()).data, "changed": changed})
