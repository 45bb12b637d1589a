"""The prepared per-call reads give exactly what the ORM gives."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from datetime import timezone as timezone_of

import pytest
from django.db import connection
from django.utils import timezone

from access import hotpath
from access.models import ClientToken, McpSession, Transport
from access.services import do_end_session, do_open_session, do_switch_mcp
from tests.live import ROOT

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


def _counting_driver_converters(monkeypatch) -> list[str]:
    """Count the calls of the converters Django registers with SQLite's driver (by declared column type)."""
    import sqlite3

    called: list[str] = []
    for name, convert in list(sqlite3.converters.items()):

        def counted(value, name=name, convert=convert):
            called.append(name)
            return convert(value)

        monkeypatch.setitem(sqlite3.converters, name, counted)
    return called


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's driver converters")
def test_the_token_session_and_owner_are_read_without_the_drivers_converters(cast, monkeypatch):
    session = do_open_session(
        cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25", client_info={"a": 1}
    )
    called = _counting_driver_converters(monkeypatch)

    token = hotpath.token_by_digest(cast.operator.token.digest, session.id)
    found = hotpath.open_session_of(token, session.id)

    assert called == []
    monkeypatch.undo()
    expected = ClientToken.objects.select_related("owner").get(pk=cast.operator.token.pk)
    assert concrete_values(token) == concrete_values(expected)
    assert concrete_values(token.owner) == concrete_values(expected.owner)
    assert concrete_values(found) == concrete_values(McpSession.objects.get(pk=session.id))
    assert isinstance(token.owner.is_active, bool) and isinstance(found.initialized, bool)
    assert token.created_at.tzinfo is UTC and found.created_at.tzinfo is UTC


@pytest.mark.skipif(connection.vendor != "sqlite", reason="a time kept on SQLite as text")
@pytest.mark.parametrize(
    ("kept", "read"),
    [
        ("2026-12-06 01:02:03.456789", datetime(2026, 12, 6, 1, 2, 3, 456789, tzinfo=UTC)),
        ("2026-12-06 01:02:03", datetime(2026, 12, 6, 1, 2, 3, tzinfo=UTC)),
        ("2026-12-06T01:02:03+02:00", datetime(2026, 12, 6, 1, 2, 3, tzinfo=timezone_of(timedelta(hours=2)))),
        ("2026-12-06T01:02:03.5Z", datetime(2026, 12, 6, 1, 2, 3, 500000, tzinfo=UTC)),
    ],
)
def test_a_time_kept_in_another_form_is_read_as_the_orm_reads_it(cast, kept, read):
    with connection.cursor() as cursor:
        cursor.execute("UPDATE mcp_api_clienttoken SET expires_at = %s WHERE id = %s", [kept, cast.operator.token.pk])

    found = hotpath.token_by_digest(cast.operator.token.digest)

    assert found.expires_at == read == ClientToken.objects.get(pk=cast.operator.token.pk).expires_at
    assert found.expires_at.utcoffset() == read.utcoffset()


@pytest.mark.parametrize(
    "kept",
    [
        '{"name":"probe","nested":{"list":[1,2.5,null,true]},"text":"caf\\u00e9"}',  # as Django writes it
        ' {"name": "probe"} ',  # whitespace around the value (the database keeps only valid JSON)
        "[1,2]",
        '"a text"',
        "null",
    ],
)
def test_a_json_column_kept_in_any_form_is_read_as_the_orm_reads_it(cast, kept):
    session = do_open_session(cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {McpSession._meta.db_table} SET client_info = %s WHERE id = %s", [kept, session.id])

    token = hotpath.token_by_digest(cast.operator.token.digest, session.id)
    found = hotpath.open_session_of(token, session.id)

    expected = McpSession.objects.get(pk=session.id).client_info
    assert found.client_info == expected
    assert type(found.client_info) is type(expected)


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


def test_a_token_read_with_its_session_id_brings_the_session_in_the_same_statement(cast, django_assert_num_queries):
    session = do_open_session(
        cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25", client_info={"a": 1}
    )
    token = hotpath.token_by_digest(cast.operator.token.digest, session.id)

    with django_assert_num_queries(0):
        found = hotpath.open_session_of(token, session.id)

    assert concrete_values(found) == concrete_values(McpSession.objects.get(pk=session.id))
    assert found.token is token


@pytest.mark.parametrize("whose", ["another token's", "an ended", "an unknown"])
def test_a_session_read_with_a_token_that_did_not_open_it_is_none(cast, whose):
    session = do_open_session(cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    digest, session_id = cast.operator.token.digest, session.id
    if whose == "another token's":
        digest = cast.other_operator.token.digest
    elif whose == "an ended":
        do_end_session(session, reason="test")
    else:
        session_id = "x" * 32

    token = hotpath.token_by_digest(digest, session_id)

    assert token is not None
    assert hotpath.open_session_of(token, session_id) is None


def test_a_session_read_with_the_token_answers_only_for_that_id_and_once(cast):
    first = do_open_session(cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    second = do_open_session(cast.operator.token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    token = hotpath.token_by_digest(cast.operator.token.digest, first.id)

    assert hotpath.open_session_of(token, second.id).pk == second.id  # read on its own
    do_end_session(first, reason="test")
    assert hotpath.open_session_of(token, first.id) is None  # read again: the kept one was used up


# --- the MCP switch, read with the token --------------------------------------------------------------


def _no_statement(monkeypatch) -> None:
    def refuse(sql, params):
        raise AssertionError(f"a statement was sent: {sql}")

    monkeypatch.setattr(hotpath.fastsql, "fetchone", refuse)


@pytest.mark.parametrize("on", [True, False])
def test_the_switch_is_read_in_the_statement_that_reads_the_token(cast, monkeypatch, on):
    do_switch_mcp(on, acting_user="tests")
    token = hotpath.token_by_digest(cast.operator.token.digest)
    _no_statement(monkeypatch)

    assert hotpath.mcp_enabled(token) is on


def test_a_switch_turned_off_is_off_for_the_next_request(cast, mcp_on):
    assert hotpath.mcp_enabled(hotpath.token_by_digest(cast.operator.token.digest))
    do_switch_mcp(False, acting_user="tests")

    assert not hotpath.mcp_enabled(hotpath.token_by_digest(cast.operator.token.digest))


def test_a_token_kept_past_its_request_does_not_carry_its_reading_of_the_switch_on(cast, mcp_on, monkeypatch):
    token = hotpath.token_by_digest(cast.operator.token.digest)
    do_switch_mcp(False, acting_user="tests")
    later = time.monotonic() + hotpath.SWITCH_READ_SECONDS
    monkeypatch.setattr(hotpath.time, "monotonic", lambda: later)

    assert not hotpath.mcp_enabled(token)
    assert not hotpath.mcp_enabled()  # and without a token, the switch as it is


def test_the_prepared_reads_are_made_on_postgresql_in_a_process_without_the_sqlite_backend(tmp_path):
    # Preparing a select looked for SQLite's datetime converter on every backend, and importing it where the SQLite
    # backend was not loaded yet began a circular import: every call on PostgreSQL failed (HTTP 500). Preparing
    # needs no connection, so the database named need not exist.
    env = {
        "PATH": "/usr/bin:/bin",
        "FORGE_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "forge_site.settings",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
    }
    code = (
        "import sys, django; django.setup(); from access import hotpath; "
        "hotpath._token_select(True); hotpath._token_select(False); "
        "print('django.db.backends.sqlite3.base' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]
