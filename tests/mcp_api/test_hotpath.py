"""The prepared per-call reads give exactly what the ORM gives."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from access import hotpath
from access.models import ClientToken, McpSession, Transport
from access.services import do_end_session, do_open_session

pytestmark = pytest.mark.django_db


def concrete_values(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields}


def test_token_by_digest_matches_the_orm_row_and_its_owner(cast):
    ClientToken.objects.filter(pk=cast.operator.token.pk).update(expires_at=timezone.now() + timedelta(days=3))
    expected = ClientToken.objects.select_related("owner").get(pk=cast.operator.token.pk)

    found = hotpath.token_by_digest(expected.digest)

    assert concrete_values(found) == concrete_values(expected)
    assert concrete_values(found.owner) == concrete_values(expected.owner)
    assert found.expires_at.tzinfo is not None


def test_token_by_digest_of_an_unknown_digest_is_none(cast):
    assert hotpath.token_by_digest("0" * 64) is None


def test_open_session_of_matches_the_orm_row(cast):
    session = do_open_session(
        cast.operator.token,
        transport=Transport.STREAMABLE_HTTP,
        protocol_version="2025-11-25",
        client_info={"name": "probe", "version": "1"},
    )

    found = hotpath.open_session_of(cast.operator.token, session.id)

    assert concrete_values(found) == concrete_values(McpSession.objects.get(pk=session.id))
    assert found.token is cast.operator.token


def test_open_session_of_another_token_or_an_ended_session_is_none(cast):
    session = do_open_session(cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")

    assert hotpath.open_session_of(cast.other_operator.token, session.id) is None
    do_end_session(session, reason="test")
    assert hotpath.open_session_of(cast.operator.token, session.id) is None
