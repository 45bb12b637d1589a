"""Per-token caps (access.limits): a token at a cap is refused with FORGE_ERR_LIMIT_REACHED naming the cap and
its setting, nothing is created, the attempt is audited, and the count is the token's own."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection

from access import limits
from access.grants import do_decide_access, raise_request
from access.models import AccessRequest, AccessState, McpSession, OpenStream, Transport
from access.services import do_end_session, do_open_session, mint_handle
from audit.models import AuditEvent, EventKind
from projects.models import Project

pytestmark = pytest.mark.django_db

REVISION = "2025-11-25"


def open_session(token) -> McpSession:
    return do_open_session(token, transport=Transport.STREAMABLE_HTTP, protocol_version=REVISION)


def project(slug: str) -> Project:
    return Project.objects.create(slug=slug, name=slug, path=f"{slug}.xml", fingerprint="0" * 64)


def test_a_token_at_its_session_cap_is_refused_naming_the_cap(cast, settings):
    settings.FORGE_MAX_SESSIONS_PER_TOKEN = 2
    token = cast.caretaker.token
    open_session(token), open_session(token)

    with pytest.raises(limits.LimitReached) as refused:
        open_session(token)

    assert refused.value.code == "FORGE_ERR_LIMIT_REACHED" and refused.value.status == 429
    assert "2 open sessions (FORGE_MAX_SESSIONS_PER_TOKEN is 2)" in refused.value.message
    assert "DELETE /mcp" in refused.value.message
    assert McpSession.objects.filter(token=token).count() == 2
    row = AuditEvent.objects.get(kind=EventKind.REQUEST_REFUSED)
    assert (row.outcome, row.called_by) == ("limit_reached", "carla")
    assert row.arguments["setting"] == "FORGE_MAX_SESSIONS_PER_TOKEN" and row.arguments["limit"] == 2


def test_an_ended_session_makes_room_under_the_cap_and_other_tokens_count_apart(cast, settings):
    settings.FORGE_MAX_SESSIONS_PER_TOKEN = 1
    first = open_session(cast.caretaker.token)
    open_session(cast.operator.token)  # another token's session is not the caretaker's

    do_end_session(first, reason="tests")

    assert open_session(cast.caretaker.token).ended_at is None


def test_a_token_at_its_handle_cap_is_refused_naming_the_cap(cast, settings):
    settings.FORGE_MAX_HANDLES_PER_TOKEN = 1
    settings.FORGE_MAX_SESSIONS_PER_TOKEN = 1
    token = cast.caretaker.token
    mint_handle(token, REVISION, {})
    open_session(token)  # sessions and handles are counted apart

    with pytest.raises(limits.LimitReached) as refused:
        mint_handle(token, REVISION, {})

    assert "FORGE_MAX_HANDLES_PER_TOKEN" in refused.value.message
    assert McpSession.objects.filter(token=token, transport=Transport.HANDLE).count() == 1


def test_a_token_at_its_access_request_cap_is_refused_naming_the_cap(cast, settings):
    settings.FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN = 1
    token = cast.caretaker.token
    session = open_session(token)
    first = raise_request(token, session, project("line-1"))

    with pytest.raises(limits.LimitReached) as refused:
        raise_request(token, session, project("line-2"))

    assert "1 access requests waiting for an operator (FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN is 1)" in (
        refused.value.message
    )
    assert list(AccessRequest.objects.filter(token=token)) == [first]
    assert AuditEvent.objects.filter(kind=EventKind.ACCESS_REQUEST).count() == 1


def test_asking_again_for_a_waiting_request_is_not_a_new_one_and_a_decided_one_makes_room(cast, settings):
    settings.FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN = 1
    token = cast.caretaker.token
    session = open_session(token)
    first = raise_request(token, session, project("line-1"))

    assert raise_request(token, session, first.project) == first
    do_decide_access(first.pk, allow=True, user=cast.operator.user)
    assert raise_request(token, session, project("line-2")).state == AccessState.PENDING


def test_a_stream_left_unseen_by_a_process_that_died_stops_counting(cast, settings):
    settings.FORGE_MAX_STREAMS_PER_TOKEN = 1
    token = cast.caretaker.token
    lost = limits.do_open_stream(token)
    with pytest.raises(limits.LimitReached, match="FORGE_MAX_STREAMS_PER_TOKEN"):
        limits.do_open_stream(token)

    OpenStream.objects.filter(pk=lost).update(seen_at=limits.counted_since() - timedelta(seconds=1))

    assert limits.do_open_stream(token) != lost


@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL: set DATABASE_URL")
@pytest.mark.django_db(transaction=True)
def test_concurrent_opens_by_a_token_one_short_of_its_cap_admit_exactly_one(cast, settings):
    settings.FORGE_MAX_SESSIONS_PER_TOKEN = 1
    token = cast.caretaker.token
    start = threading.Barrier(4)

    def attempt(_: int) -> str:
        try:
            start.wait(timeout=10)
            open_session(token)
            return "opened"
        except limits.LimitReached:
            return "refused"
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        outcomes = sorted(pool.map(attempt, range(4)))

    assert outcomes == ["opened", "refused", "refused", "refused"]
    assert McpSession.objects.filter(token=token).count() == 1
