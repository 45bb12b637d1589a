"""What every REST API of this server shares: its error bodies and its strict query parameters.

Errors: the one place REST framework errors become wire bodies, `{"code": "FORGE_ERR_...", "detail":
sentence}`. Views raise REST framework exceptions with a sentence that says what to send instead; this
handler (settings: REST_FRAMEWORK["EXCEPTION_HANDLER"]) gives each a machine code beside it, replaces the
framework's own wording where it would not tell a client what to do, and answers an action whose audit
row could not be written (so nothing was done) with a 503 rather than a traceback.

Parameters: an endpoint names the query parameters it takes, each given once; an unknown one is refused
rather than silently ignored, and a number out of range is a 400 that says what to send. Pages are
keyset pages: a `next` URL that repeats the filters and names the last item read.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import APIException, ErrorDetail, NotAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as rest_framework_exception_handler

from audit.services import AuditUnavailable

log = logging.getLogger("forge.api")

NOT_AUTHENTICATED = (
    "Log in to the console, or send 'Authorization: Bearer <token>' with a client token from the Forge console "
    "(on the operator API, an operator token from 'manage.py create_operator_token')."
)
MAX_WHOLE_NUMBER = 2**63 - 1  # a BigIntegerField's range
_WHOLE_NUMBER = re.compile(r"[0-9]{1,19}")


class BadParameter(APIException):
    status_code = 400
    default_code = "bad_parameter"
    default_detail = "A query parameter is not valid."


class AuditLogUnavailable(APIException):
    status_code = 503
    default_code = "audit_unavailable"
    default_detail = (
        "The audit log cannot be written, so nothing was done. Try again later; if it persists, check the "
        "server's database and audit mirror."
    )


class ErrorBody(serializers.Serializer):
    """What every refusal carries (documented in the OpenAPI schema)."""

    code = serializers.CharField(help_text="A machine code, FORGE_ERR_ followed by the reason.")
    detail = serializers.CharField(help_text="A sentence that says what happened and what to send instead.")


def refusal(description: str) -> OpenApiResponse:
    """A documented refusal: an error body, and when it is given."""
    return OpenApiResponse(ErrorBody, description=description)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, AuditUnavailable):
        log.error("an API action was refused: its audit row could not be written (%s)", exc)
        exc = AuditLogUnavailable()
    response = rest_framework_exception_handler(exc, context)
    if response is None or not isinstance(exc, APIException) or not isinstance(exc.detail, ErrorDetail):
        return response
    detail = NOT_AUTHENTICATED if isinstance(exc, NotAuthenticated) else str(exc.detail)
    response.data = {"code": f"FORGE_ERR_{exc.detail.code}".upper(), "detail": detail}
    return response


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


def next_page_url(request: Request, cursor: str, last: str) -> str:
    """The URL of the page after the one that ended with `last`: the same query, with `cursor` moved on."""
    query = request.query_params.copy()
    query[cursor] = last
    return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
