"""Client tokens as a Django REST framework authentication, for the HTTP APIs beside /mcp.

The bearer token that opens MCP sessions also authenticates `/api/...` requests: the token's owner
becomes the request's user and the token its `auth`, so an API's permissions see the same person the
console does. A runtime connector token (`frt_`) is refused here, audited: it only posts snapshots
(`access.runtime_api`, which names its own authentication). It reads `Authorization: Bearer` and leaves an operator token (`fop_`, authenticated by
`console.rest`) to the next class, so either order works, and settings put this class first (its
WWW-Authenticate makes a request without credentials a 401). Settings name it by dotted path
(REST_FRAMEWORK), which lets apps below the edges (audit, confirmations) be reached with a token without
importing it. An unknown, expired or revoked token is refused and audited as the MCP endpoint does, and so is a client
token the operator API refuses (`record_operator_api_refusal`, connected in `access.apps`).

The OpenAPI extension beside it describes the scheme to drf-spectacular.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from access.models import ClientToken
from access.services import authenticate_bearer, record_refused_token
from forge_core.tokens import CLIENT_TOKEN_PREFIX, OPERATOR_TOKEN_PREFIX, RUNTIME_TOKEN_PREFIX

REALM = "forge-mcp"


def bearer_credential(request: Request) -> str | None:
    """The value after `Authorization: Bearer`, stripped; None when the request uses another scheme."""
    scheme, _, credential = get_authorization_header(request).decode("latin-1").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credential.strip()


class BearerAuthentication(BaseAuthentication):
    """What every bearer token class of these APIs shares: the scheme it names to a caller without credentials."""

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to a request without credentials, with the scheme to use.
        return f'Bearer realm="{REALM}"'


def bearer_scheme(prefix: str, description: str) -> dict[str, str]:
    """The OpenAPI security scheme of a bearer token kind, named by its prefix."""
    return {
        **build_bearer_security_scheme_object("Authorization", "Bearer", bearer_format=f"{prefix}..."),
        "description": description,
    }


class BearerTokenAuthentication(BearerAuthentication):
    """`Authorization: Bearer <client token>`; other schemes and operator tokens are left to the next class."""

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, ClientToken] | None:
        raw = bearer_credential(request)
        if raw is None or raw.startswith(OPERATOR_TOKEN_PREFIX):
            return None
        if not raw:
            raise AuthenticationFailed("Send 'Authorization: Bearer <token>' with a client token after the scheme.")
        if raw.startswith(RUNTIME_TOKEN_PREFIX):
            # A runtime connector's token posts its project's snapshots (access.runtime_api) and nothing else.
            record_refused_token(request.path, outcome="runtime token refused outside runtime-snapshots")
            raise AuthenticationFailed(
                "A runtime connector token only posts runtime snapshots to /api/projects/<slug>/runtime-snapshots; "
                "use a client or operator token here."
            )
        token = authenticate_bearer(raw, request.path)
        if token is None:
            raise AuthenticationFailed("This token is unknown, expired or revoked; ask an operator for a new one.")
        return token.owner, token


def record_operator_api_refusal(*, path: str, username: str, credential: str, **_: object) -> None:
    """The audit row of a signed-in caller the operator API refused (`forge_core.rest.operator_api_refused`):
    a client token, whoever owns it, or the login of someone who is no operator."""
    record_refused_token(path, outcome=f"operator API refused a {credential}", called_by=username)


class ClientTokenScheme(OpenApiAuthenticationExtension):
    target_class = BearerTokenAuthentication
    name = "clientToken"

    def get_security_definition(self, auto_schema) -> dict[str, str]:
        return bearer_scheme(CLIENT_TOKEN_PREFIX, "A client token from the Forge console or 'manage.py create_token'.")
