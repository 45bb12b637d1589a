"""The PostgreSQL backend (forge_core.postgresql): a connection taken from the pool, which is in autocommit already,
is not set to autocommit again (psycopg's setter waits on a generator to change nothing), and transactions still
switch autocommit off and back on; the driver's cursors of `forge_core.fastsql` read `timestamptz` with psycopg's C
loader only where it gives the values, and the very `tzinfo`, that Django's cursor gives."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC

import psycopg
import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from psycopg.pq import Format

from forge_core import fastsql, workers
from forge_core.postgresql.base import PSYCOPGS_TIMESTAMPTZ_LOADER, TIMESTAMPTZ

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's backend"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def autocommit_sets(monkeypatch) -> Iterator[list[bool]]:
    """The values psycopg's autocommit setter is given from now on."""
    made: list[bool] = []
    real = psycopg.Connection.set_autocommit

    def set_autocommit(self, value: bool) -> None:
        made.append(value)
        real(self, value)

    monkeypatch.setattr(psycopg.Connection, "set_autocommit", set_autocommit)
    yield made


def test_a_connection_taken_from_the_pool_in_autocommit_is_not_set_to_it_again(autocommit_sets):
    connection.ensure_connection()
    connection.close()  # back to the pool

    connection.ensure_connection()

    assert connection.get_autocommit() and connection.connection.autocommit
    assert autocommit_sets == []


def test_a_transaction_still_switches_autocommit_off_and_back_on(autocommit_sets):
    connection.ensure_connection()

    with transaction.atomic():
        assert connection.connection.autocommit is False
        Group.objects.create(name="in-a-transaction")

    assert connection.connection.autocommit is True
    assert autocommit_sets == [False, True]
    assert Group.objects.filter(name="in-a-transaction").exists()


TIMES = """SELECT now(), '2026-03-29 01:30:00.5+00'::timestamptz, '2026-10-25 00:59:59.999999+00'::timestamptz,
    '1999-12-31 23:59:59.000001-07:30'::timestamptz, '0001-01-01 00:00:00+00'::timestamptz, NULL::timestamptz"""


def _read_both_ways() -> tuple[tuple[object, ...], tuple[object, ...]]:
    """The times of `TIMES` as Django's cursor reads them and as `forge_core.fastsql`'s driver cursor does, in one
    transaction (one `now()`)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(TIMES)
        djangos = cursor.fetchone()
        fast = fastsql.fetchone(TIMES, [])
    assert fast is not None
    return djangos, fast


def _same(djangos: tuple[object, ...], fast: tuple[object, ...]) -> bool:
    return djangos == fast and all(
        getattr(mine, "tzinfo", None) is getattr(theirs, "tzinfo", None)
        for mine, theirs in zip(djangos, fast, strict=True)
    )


def test_the_driver_cursor_reads_timestamptz_with_psycopgs_c_loader():
    connection.ensure_connection()

    cursor = connection.driver_cursor()

    loader = cursor.adapters.get_loader(TIMESTAMPTZ, Format.TEXT)
    assert loader is PSYCOPGS_TIMESTAMPTZ_LOADER and loader.__module__.startswith("psycopg_binary")


def test_the_driver_cursor_reads_the_times_djangos_cursor_reads_in_its_time_zone():
    djangos, fast = _read_both_ways()

    assert _same(djangos, fast)
    assert all(value is None or value.tzinfo is UTC for value in fast)


def test_on_a_connection_in_another_time_zone_the_driver_cursor_keeps_djangos_loader():
    connection.ensure_connection()
    connection.connection.execute("SET TIME ZONE 'Europe/Paris'")
    try:
        loader = connection.driver_cursor().adapters.get_loader(TIMESTAMPTZ, Format.TEXT)
        djangos, fast = _read_both_ways()
    finally:
        connection.connection.execute("SET TIME ZONE 'UTC'")

    assert loader is not PSYCOPGS_TIMESTAMPTZ_LOADER
    assert _same(djangos, fast)


def test_without_use_tz_the_driver_cursor_reads_the_naive_times_djangos_does(settings):
    settings.USE_TZ = False  # Django closes the pool: connections open again in settings.TIME_ZONE
    try:
        djangos, fast = _read_both_ways()
    finally:
        connection.close()

    assert _same(djangos, fast)
    assert all(value is None or value.tzinfo is None for value in fast)


def test_a_kept_connection_goes_back_to_the_pool_once_past_the_pools_lifetime(monkeypatch):
    connection.ensure_connection()
    assert connection.kept_idle()
    pool = connection.pool
    taken_at = connection.taken_at

    monkeypatch.setattr(time, "monotonic", lambda: taken_at + pool.max_lifetime)

    assert not connection.kept_idle()
    workers._upkeep()
    assert connection.connection is None  # handed back, for the pool to close as past its lifetime
