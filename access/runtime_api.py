"""The runtime connectors' REST endpoint: `POST /api/projects/{slug}/runtime-snapshots` (`access.runtime`).

Only a runtime token (`Authorization: Bearer frt_...`) is let in, and only for the project it is bound to;
a client token, an operator token or a console login is refused here (403, audited), as a runtime token is
everywhere else (`access.rest` and the MCP edge). The body is strict: `taken_at` (an ISO 8601 instant with
its offset) and `values`, 1 to 500 of `{"variable", "value", "forced"}` with each variable named once; a
value is a boolean, a whole number, a finite number or a text of at most 1000 characters. Refusals are RFC
9457 problem details, like every API of this server.
"""

from __future__ import annotations

from typing import Annotated

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, field_validator
from rest_framework import serializers
from rest_framework.decorators import api_view, authentication_classes, parser_classes, permission_classes
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from access import runtime
from access.models import RuntimeToken
from access.rest import BearerAuthentication, bearer_credential, bearer_scheme
from access.services import record_refused_token
from forge_core.rest import BadParameter, parsed_body, query_parameters, refusal
from forge_core.tokens import RUNTIME_TOKEN_PREFIX

WRONG_CREDENTIAL = (
    "This endpoint takes only a runtime connector token (frt_...), bound to the project; client and operator "
    "credentials never post runtime values. An operator makes one in the console (Runtime connector tokens) or with "
    "'manage.py runtime_token create'."
)


class RuntimeTokenAuthentication(BearerAuthentication):
    """`Authorization: Bearer frt_...`: the token's maker becomes the request's user and the token its `auth`.
    Any other bearer value is refused (403, audited): it is a credential of another kind."""

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, RuntimeToken] | None:
        raw = bearer_credential(request)
        if raw is None:
            return None
        if not raw.startswith(RUNTIME_TOKEN_PREFIX):
            record_refused_token(request.path, outcome="runtime endpoint refused another kind of token")
            raise PermissionDenied(WRONG_CREDENTIAL)
        token = runtime.authenticate_runtime_token(raw, request.path)
        if token is None:
            raise AuthenticationFailed("This runtime token is unknown or revoked; ask an operator for a new one.")
        return token.created_by, token


class RuntimeTokenScheme(OpenApiAuthenticationExtension):
    target_class = RuntimeTokenAuthentication
    name = "runtimeToken"

    def get_security_definition(self, auto_schema) -> dict[str, str]:
        return bearer_scheme(
            RUNTIME_TOKEN_PREFIX,
            "A runtime connector token from 'manage.py runtime_token create', bound to one project.",
        )


class RuntimeTokenOnly(BasePermission):
    message = WRONG_CREDENTIAL

    def has_permission(self, request: Request, view: object) -> bool:
        return isinstance(request.auth, RuntimeToken)


WholeNumber = Annotated[StrictInt, Field(ge=-(2**63), le=2**64 - 1)]
Number = Annotated[StrictFloat, Field(allow_inf_nan=False)]
# No NUL: PostgreSQL's JSON cannot hold one (and no connector has a reason to send it).
Text = Annotated[str, Field(max_length=runtime.MAX_TEXT_VALUE_CHARS, pattern=r"^[^\x00]*$")]


class ReportedValueBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variable: str = Field(
        min_length=1,
        max_length=runtime.MAX_VARIABLE_CHARS,
        pattern=r"^[^\s\x00-\x1f\x7f]+$",
        description="The variable's name as the project names it (e.g. Main.MotorSpeed), without spaces.",
    )
    value: StrictBool | WholeNumber | Number | Text
    forced: StrictBool = Field(description="Whether the runtime forces this variable now.")


class SnapshotBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    taken_at: AwareDatetime = Field(description="When the connector read the values, with its UTC offset.")
    values: list[ReportedValueBody] = Field(min_length=1, max_length=runtime.MAX_VALUES_PER_SNAPSHOT)

    @field_validator("values")
    @classmethod
    def each_variable_once(cls, values: list[ReportedValueBody]) -> list[ReportedValueBody]:
        names = [v.variable for v in values]
        if len(set(names)) != len(names):
            raise ValueError("each variable may appear once in a snapshot")
        return values


class ReportedValueDocument(serializers.Serializer):
    """The OpenAPI description of one reported value (`ReportedValueBody` validates it)."""

    variable = serializers.CharField(max_length=runtime.MAX_VARIABLE_CHARS, help_text="The name, without spaces.")
    value = serializers.JSONField(help_text="A boolean, a number, or a text of at most 1000 characters.")
    forced = serializers.BooleanField(help_text="Whether the runtime forces this variable now.")


class SnapshotDocument(serializers.Serializer):
    """The OpenAPI description of a snapshot's body (`SnapshotBody` validates it)."""

    taken_at = serializers.DateTimeField(help_text="When the connector read the values, with its UTC offset.")
    values = ReportedValueDocument(many=True, help_text=f"1 to {runtime.MAX_VALUES_PER_SNAPSHOT}, each variable once.")


class SnapshotStored(serializers.Serializer):
    project = serializers.CharField()
    taken_at = serializers.CharField()
    stored = serializers.IntegerField(help_text="Values stored as their variable's latest.")
    older_than_stored = serializers.IntegerField(help_text="Values left alone: a newer snapshot already reported them.")


SEND = (
    f'{{"taken_at": "<ISO 8601 instant with offset>", "values": [1 to {runtime.MAX_VALUES_PER_SNAPSHOT} of '
    '{"variable": "<name>", "value": <boolean, number or text>, "forced": <boolean>}, each variable once]}'
)


@extend_schema(
    operation_id="runtime_snapshot_post",
    summary="Post a runtime snapshot",
    description="Store the values a runtime connector read at `taken_at`, with `forced` per variable, as the latest "
    "value of each variable unless a newer snapshot already reported it. Audited as one row with the values' digest.",
    request=SnapshotDocument,
    responses={
        201: SnapshotStored,
        400: refusal("The body is not a snapshot, or taken_at is more than 5 minutes ahead of the server's clock."),
        401: refusal("No credentials, or a runtime token that is unknown or revoked."),
        403: refusal("A client or operator token, or a console login: only a runtime token posts here (audited)."),
        404: refusal("The slug is not the project this runtime token is bound to (audited)."),
        409: refusal("The project would hold more than 10,000 monitored variables (audited)."),
        415: refusal("The body is not sent as application/json."),
    },
)
@api_view(["POST"])
@authentication_classes([RuntimeTokenAuthentication])
@permission_classes([RuntimeTokenOnly])
@parser_classes([JSONParser])
def runtime_snapshots(request: Request, slug: str) -> Response:
    token = request.auth
    assert isinstance(token, RuntimeToken)  # RuntimeTokenOnly let nothing else through
    query_parameters(request, frozenset())
    project = runtime.project_of(token, slug)
    try:
        body = parsed_body(SnapshotBody, request.data, send=SEND)
    except BadParameter:
        runtime.record_snapshot_refusal(token, "FORGE_ERR_BAD_PARAMETER")
        raise
    values = [runtime.ReportedValue(v.variable, v.value, v.forced) for v in body.values]
    return Response(runtime.do_record_snapshot(token, project, body.taken_at, values), status=201)
