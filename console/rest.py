"""Operator tokens as a Django REST framework authentication, for the operator APIs.

An operator token (`fop_`, `console.operator_tokens`) authenticates its operator: the operator becomes
the request's user and the `OperatorToken` its `auth`. It reads `Authorization: Bearer` and leaves any
other value to the other classes (`access.rest` takes client tokens). Its class derives from
`forge_core.console.OperatorAuthentication`, so the operator APIs of apps below the console
(confirmations) tell it from a client token without importing it; settings name it by dotted path
(REST_FRAMEWORK). An unknown or revoked token, or one whose user is no longer an operator, is refused and
audited.

The OpenAPI extension beside it describes the scheme to drf-spectacular.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from access.rest import REALM, bearer_credential
from console.models import OperatorToken
from console.operator_tokens import authenticate_operator_token
from forge_core.console import OperatorAuthentication
from forge_core.tokens import OPERATOR_TOKEN_PREFIX


class OperatorTokenAuthentication(OperatorAuthentication):
    """`Authorization: Bearer fop_...`, an operator token; any other value is left to the other classes."""

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, OperatorToken] | None:
        raw = bearer_credential(request)
        if raw is None or not raw.startswith(OPERATOR_TOKEN_PREFIX):
            return None
        token = authenticate_operator_token(raw, request.path)
        if token is None:
            raise AuthenticationFailed(
                "This operator token is unknown or revoked, or its user is no longer an operator; make a new "
                "one with 'manage.py create_operator_token'."
            )
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return f'Bearer realm="{REALM}"'


class OperatorTokenScheme(OpenApiAuthenticationExtension):
    target_class = OperatorTokenAuthentication
    name = "operatorToken"

    def get_security_definition(self, auto_schema) -> dict[str, str]:
        return {
            **build_bearer_security_scheme_object(
                "Authorization", "Bearer", bearer_format=f"{OPERATOR_TOKEN_PREFIX}..."
            ),
            "description": "An operator token from 'manage.py create_operator_token'.",
        }
