"""The one place REST framework errors become wire bodies: `{"code": "FORGE_ERR_...", "detail": sentence}`.

Views raise REST framework exceptions with a sentence that says what to send instead; this handler
(settings: REST_FRAMEWORK["EXCEPTION_HANDLER"]) gives each a machine code beside it, and replaces the
framework's own wording where it would not tell a client what to do.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import APIException, ErrorDetail, NotAuthenticated
from rest_framework.response import Response
from rest_framework.views import exception_handler as rest_framework_exception_handler

NOT_AUTHENTICATED = (
    "Send 'Authorization: Bearer <token>' with a client token from the Forge console, or log in to the console."
)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = rest_framework_exception_handler(exc, context)
    if response is None or not isinstance(exc, APIException) or not isinstance(exc.detail, ErrorDetail):
        return response
    detail = NOT_AUTHENTICATED if isinstance(exc, NotAuthenticated) else str(exc.detail)
    response.data = {"code": f"FORGE_ERR_{exc.detail.code}".upper(), "detail": detail}
    return response
