"""Client tokens as a Django REST framework authentication, for the HTTP APIs beside /mcp.

The bearer token that opens MCP sessions also authenticates `/api/...` requests: the token's owner
becomes the request's user and the token its `auth`, so an API's permissions see the same person the
console does. Settings name this class by dotted path (REST_FRAMEWORK), which lets apps that must not
import mcp_api (audit) still be reached with a token. An unknown, expired or revoked token is refused
and audited as the MCP endpoint does.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from mcp_api.models import ClientToken
from mcp_api.services import authenticate_bearer

REALM = "forge-mcp"


class BearerTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <client token>`; other schemes are left to the next authentication class."""

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, ClientToken] | None:
        scheme, _, credential = get_authorization_header(request).decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return None
        raw = credential.strip()
        if not raw:
            raise AuthenticationFailed("Send 'Authorization: Bearer <token>' with a client token after the scheme.")
        token = authenticate_bearer(raw, request.path)
        if token is None:
            raise AuthenticationFailed("This token is unknown, expired or revoked; ask an operator for a new one.")
        return token.owner, token

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to a request without credentials, with the scheme to use.
        return f'Bearer realm="{REALM}"'
