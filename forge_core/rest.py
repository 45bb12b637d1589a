"""What every REST API of this server shares: its error bodies, strict parameters and bodies, keyset pages,
and who may use the operator API.

Errors: the one place errors become REST bodies, RFC 9457 problem details (`application/problem+json`):
`type` (about:blank: the `code` member says what kind of problem it is), `title` (the HTTP status phrase),
`status`, `detail` (a sentence that says what happened and what to send instead), and the extension members
`code` ("FORGE_ERR_...") and the refusal's details. A service's refusal (`forge_core.errors.Refusal`, the
audit row that could not be written among them: 503) carries all of that itself, so views let it through;
REST framework's own exceptions, which views raise for what they parse, get a code from theirs, and the
framework's wording is replaced where it would not tell a client what to do. The handler is named in
settings (REST_FRAMEWORK["EXCEPTION_HANDLER"]).

Parameters: an endpoint names the query parameters it takes, each given once; an unknown one is refused
rather than silently ignored, and a number out of range is a 400 that says what to send. Pages are
keyset pages: a `next` URL that repeats the filters and names the last item read. A JSON body is read
into a strict argument model (unknown fields refused) and a bad one is a 400 that names the fields.

Operators: the operator APIs (the console's, confirmations') let in a console login or an operator token and
refuse every other credential, above all a client token, which stands for an MCP client that must never
decide for itself. The token classes live in access (client tokens) and console (operator tokens) and are
named in settings; an operator token's class derives from `forge_core.console.OperatorAuthentication`, so
apps that must not import the console can still tell the two apart. Every operator API view is declared
with `operator_view`, which puts that rule, its OpenAPI description and the JSON body parser on it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, Q, QuerySet
from django.dispatch import Signal
from django.http import Http404
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from rest_framework import serializers
from rest_framework.decorators import api_view, parser_classes, permission_classes, schema
from rest_framework.exceptions import APIException, ErrorDetail, NotAuthenticated, NotFound, PermissionDenied
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as rest_framework_exception_handler

from forge_core.console import OperatorAuthentication, is_operator
from forge_core.errors import AuditUnavailable, Refusal

log = logging.getLogger("forge.api")

NOT_AUTHENTICATED = (
    "Log in to the console, or send 'Authorization: Bearer <token>' with a client token from the Forge console "
    "(on the operator API, an operator token from 'manage.py create_operator_token')."
)
MAX_WHOLE_NUMBER = 2**63 - 1  # a BigIntegerField's range
_WHOLE_NUMBER = re.compile(r"[0-9]{1,19}")
PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
PAGE_QUERY = [
    OpenApiParameter(
        "limit", OpenApiTypes.INT, description=f"The page size, 1 to {MAX_PAGE_SIZE}; {PAGE_SIZE} unless given."
    ),
]
Row = TypeVar("Row", bound=Model)
Body = TypeVar("Body", bound=BaseModel)


class BadParameter(APIException):
    status_code = 400
    default_code = "bad_parameter"
    default_detail = "A query parameter is not valid."


PROBLEM_JSON = "application/problem+json"


class ProblemDetails(serializers.Serializer):
    """What every refusal carries: RFC 9457 problem details (documented in the OpenAPI schema)."""

    type = serializers.CharField(help_text="about:blank: the code member says what kind of problem this is.")
    title = serializers.CharField(help_text="The HTTP status phrase, e.g. Conflict.")
    status = serializers.IntegerField(help_text="The HTTP status code of the response.")
    detail = serializers.CharField(help_text="A sentence that says what happened and what to send instead.")
    code = serializers.CharField(help_text="A machine code, FORGE_ERR_ followed by the reason.")


def refusal(description: str) -> OpenApiResponse:
    """A documented refusal: a problem details body, and when it is given."""
    return OpenApiResponse(ProblemDetails, description=description)


OPERATOR_REFUSED = {
    401: refusal("No credentials, or a token that is unknown or revoked."),
    403: refusal("Not an operator, a client token, or (on a console login) a missing or forged CSRF token."),
}
BAD_QUERY = {400: refusal("A query parameter is unknown, repeated or out of range.")}


def problem(status: int, code: str, detail: str, **details: Any) -> dict[str, Any]:
    """An RFC 9457 problem details body: the standard members, then `code` and the details as extensions."""
    return {
        **details,
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
    }


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error of the REST APIs as problem details: a refusal as it is, a REST framework error (or
    Django's 404 and 403, which REST framework answers too) with a code made from its own."""
    if isinstance(exc, Refusal):
        if isinstance(exc, AuditUnavailable):
            log.error("an API action was refused: its audit row could not be written (%s)", exc)
        response = Response(problem(exc.status, exc.code, exc.message, **exc.details), status=exc.status)
    else:
        if isinstance(exc, Http404):
            exc = NotFound(*exc.args)
        elif isinstance(exc, DjangoPermissionDenied):
            exc = PermissionDenied(*exc.args)
        framework = rest_framework_exception_handler(exc, context)
        if framework is None or not isinstance(exc, APIException):
            return framework
        response = framework
        if isinstance(exc.detail, ErrorDetail):
            detail = NOT_AUTHENTICATED if isinstance(exc, NotAuthenticated) else str(exc.detail)
            code = f"FORGE_ERR_{exc.detail.code}".upper()
            response.data = problem(response.status_code, code, detail)
        else:  # a list or mapping of errors (none of ours raises one): kept whole beside a sentence
            detail = "The request is not valid; errors names what to change."
            response.data = problem(response.status_code, "FORGE_ERR_INVALID", detail, errors=response.data)
    renderer = getattr(context.get("request"), "accepted_renderer", None)
    if renderer is None or isinstance(renderer, JSONRenderer):
        response.content_type = PROBLEM_JSON
    return response


def problem_media_type(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing: every documented 4xx and 5xx answer is application/problem+json (the
    schema generator names each renderer's media type; the exception handler sends this one)."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content")
                if str(status)[:1] in "45" and content:
                    response["content"] = {PROBLEM_JSON: next(iter(content.values()))}
    return result


def query_parameters(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    """The query parameters, each given once; an unknown one is refused rather than silently ignored."""
    query = request.query_params
    for name in query:
        if name not in allowed:
            takes = f"takes {', '.join(sorted(allowed))}" if allowed else "takes no parameters"
            raise BadParameter(f"Unknown parameter {name!r}: this endpoint {takes}.")
        if len(query.getlist(name)) > 1:
            raise BadParameter(f"Send {name} once.")
    return {name: query[name] for name in query}


def whole_number(
    params: dict[str, str],
    name: str,
    what: str,
    *,
    minimum: int,
    maximum: int = MAX_WHOLE_NUMBER,
    default: int | None = None,
) -> int:
    text = params.get(name)
    if text is None:
        if default is None:
            raise BadParameter(f"Send {name}: {what}, a whole number from {minimum}.")
        return default
    if not _WHOLE_NUMBER.fullmatch(text) or not minimum <= int(text) <= maximum:
        bound = f"from {minimum} to {maximum}" if maximum < MAX_WHOLE_NUMBER else f"from {minimum}"
        raise BadParameter(f"{name} must be {what}, a whole number {bound}; got {text[:40]!r}.")
    return int(text)


def state_parameter(states: list[str], what: str) -> OpenApiParameter:
    """The documented `state` filter of a list of `what` (read with `in_state`)."""
    return OpenApiParameter("state", OpenApiTypes.STR, enum=states, description=f"Only {what} in this state.")


def in_state(params: dict[str, str], states: list[str]) -> dict[str, str]:
    """The filter the `state` parameter asks for (none when it is not given); a 400 for a state not in `states`."""
    state = params.get("state")
    if state is None:
        return {}
    if state not in states:
        raise BadParameter(f"state must be one of {', '.join(states)}; got {state[:40]!r}.")
    return {"state": state}


def next_page_url(request: Request, cursor: str, last: str) -> str:
    """The URL of the page after the one that ended with `last`: the same query, with `cursor` moved on."""
    query = request.query_params.copy()
    query[cursor] = last
    return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")


def page_size(params: dict[str, str]) -> int:
    return whole_number(params, "limit", "the page size", minimum=1, maximum=MAX_PAGE_SIZE, default=PAGE_SIZE)


def page_in_creation_order(
    request: Request, found: QuerySet[Row], params: dict[str, str], *, what: str
) -> tuple[list[Row], str | None]:
    """One keyset page of `found`, oldest first (created_at, then id), after the row whose id is the
    `after` parameter (`what` names such a row in the refusal); with the URL of the next page, or None."""
    limit = page_size(params)
    after = params.get("after")
    if after is not None:
        try:
            last_read = found.model._default_manager.filter(pk=after).values_list("created_at", flat=True).first()
        except DjangoValidationError:  # not even the shape of an id (a UUID)
            last_read = None
        if last_read is None:
            raise BadParameter(f"after must be the id of {what} already listed; got {after[:40]!r}.")
        found = found.filter(Q(created_at__gt=last_read) | Q(created_at=last_read, pk__gt=after))
    page = list(found.order_by("created_at", "pk")[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, next_page_url(request, "after", str(page[-1].pk))


def parsed_body(model: type[Body], body: object, *, send: str) -> Body:
    """The request's JSON body read into a strict argument model; a 400 saying what to `send` otherwise."""
    try:
        return model.model_validate(body)
    except PydanticValidationError as exc:
        fields = sorted({".".join(str(part) for part in error["loc"]) or "the body" for error in exc.errors()})
        raise BadParameter(f"Send {send} and nothing else; check {', '.join(fields)}.") from None


# --- the operator API's door -----------------------------------------------------------------------


operator_api_refused = Signal()
"""Sent when a signed-in caller is refused by the operator API, with `path`, `username` and `credential`
("client token" or "console login"); `access` records it (this package may not import the audit app)."""


class OperatorsOnly(BasePermission):
    message = (
        "Only console operators use this API: log in to the console, or send an operator token made with "
        "'manage.py create_operator_token'. Client tokens are for MCP clients."
    )

    def has_permission(self, request: Request, view: object) -> bool:
        # A session login has no `auth`, and its user is checked here; an operator credential's authentication has
        # checked its user already, in this request; any other token (a client token) is refused.
        if isinstance(request.successful_authenticator, OperatorAuthentication):
            allowed = True
        else:
            allowed = request.auth is None and is_operator(request.user)
        if not allowed and request.user.is_authenticated:
            # An attempt, not a stray request: a client token (even an operator's) or a non-operator's login.
            operator_api_refused.send(
                sender=OperatorsOnly,
                path=request.path,
                username=request.user.get_username(),
                credential="console login" if request.auth is None else "client token",
            )
        return allowed


class OperatorSchema(AutoSchema):
    """Documents only the credentials these endpoints accept: the client token authenticates but is refused."""

    def get_auth(self) -> list[dict[str, list[str]]]:
        return [requirement for requirement in super().get_auth() if "clientToken" not in requirement]


def operator_view(*methods: str, json_body: bool = False) -> Callable[[Callable[..., Response]], Any]:
    """A view of the operator API answering `methods`: operators only (`OperatorsOnly`), documented with the
    credentials it accepts (`OperatorSchema`), and, with `json_body`, reading only a JSON body (another media
    type is a 415)."""

    def view(function: Callable[..., Response]) -> Any:
        if json_body:
            function = parser_classes([JSONParser])(function)
        return api_view(list(methods))(permission_classes([OperatorsOnly])(schema(OperatorSchema())(function)))

    return view
