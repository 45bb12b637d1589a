"""The fixed cast every test shares, built once per test database.

An operator with rights, a second operator without rights on projects, a caretaker, and a client
token for each. Raw token values live only in these fixtures; the database holds their digests.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

from mcp_api.models import ClientToken
from mcp_api.services import do_create_operator, do_create_token
from mcp_api.tools import ensure_loaded

ensure_loaded()


@dataclass(frozen=True)
class Member:
    user: object
    token: ClientToken
    raw_token: str


def _member(name: str, *, operator: bool) -> Member:
    if operator:
        user, _ = do_create_operator(name, f"{name}-password-123", acting_user="tests")
    else:
        user = get_user_model().objects.create_user(username=name)
    new = do_create_token(owner=user, label=f"{name}-client", acting_user="tests")
    return Member(user=user, token=new.token, raw_token=new.raw)


@dataclass(frozen=True)
class Cast:
    operator: Member
    other_operator: Member
    caretaker: Member


@pytest.fixture
def cast(db) -> Cast:
    return Cast(
        operator=_member("olivia", operator=True),
        other_operator=_member("oscar", operator=True),
        caretaker=_member("carla", operator=False),
    )
