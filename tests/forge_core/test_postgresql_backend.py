"""The PostgreSQL backend (forge_core.postgresql): a connection taken from the pool, which is in autocommit already,
is not set to autocommit again (psycopg's setter waits on a generator to change nothing), and transactions still
switch autocommit off and back on."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction

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
