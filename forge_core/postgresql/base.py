"""Django's PostgreSQL backend, running the transaction's `forge_core.before_commit` hooks as it commits, telling a
worker thread whether it may keep its pooled connection between hops, and making the driver's cursors of
`forge_core.fastsql`'s reads."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]  # no stubs
from psycopg import adapters
from psycopg._tz import get_tzinfo  # what psycopg's loader makes of the connection's TimeZone
from psycopg.postgres import types
from psycopg.pq import Format, TransactionStatus

from forge_core.before_commit import RunsBeforeCommit

TIMESTAMPTZ = types["timestamptz"].oid
# psycopg's own loader of `timestamptz` text, psycopg_binary's C one where it is installed. Django's backend
# registers a subclass of psycopg's Python loader instead (it sets the time zone it wants on every value), which
# psycopg cannot swap for the C one: a call's reads through `forge_core.fastsql` (the token read's five times,
# the audit head's) cost about 175 K instructions more that way, 8% of the call (docs/PERFORMANCE.md).
PSYCOPGS_TIMESTAMPTZ_LOADER = adapters.get_loader(TIMESTAMPTZ, Format.TEXT)


class DatabaseWrapper(RunsBeforeCommit, base.DatabaseWrapper):
    def _commit(self) -> None:
        self.run_before_commit()
        super()._commit()  # type: ignore[misc]  # private in django-stubs

    def _set_autocommit(self, autocommit: bool) -> None:
        # Django sets autocommit on every connection it takes from the pool (each hop of a call), which opens them in
        # autocommit already; psycopg's setter then checks the transaction status inside a wait on a generator (its
        # lock, the socket, the wait's machinery) to change nothing. Skipped only when there is nothing to change and
        # no transaction that psycopg would refuse the change in.
        connection = self.connection
        if connection.autocommit == autocommit and connection.pgconn.transaction_status == TransactionStatus.IDLE:
            return
        super()._set_autocommit(autocommit)  # type: ignore[misc]  # private in django-stubs

    def get_new_connection(self, conn_params: dict[str, Any]) -> psycopg.Connection[Any]:
        connection = super().get_new_connection(conn_params)
        self.taken_at = time.monotonic()
        return connection

    def kept_idle(self) -> bool:
        """Whether this thread's connection is open with no transaction on the server, nothing a return to the pool
        would roll back, and was taken from the pool less than the pool's `max_lifetime` ago: a worker thread then
        keeps it for its next hop (`forge_core.workers`). Past that it goes back, and the pool closes it and opens
        another as it does any connection past its lifetime, so a kept connection lives at most twice as long as
        the pool's own (it may have been lent already that old)."""
        connection = self.connection
        return (
            connection is not None
            and connection.pgconn.transaction_status == TransactionStatus.IDLE
            and time.monotonic() - self.taken_at < self.pool.max_lifetime  # type: ignore[attr-defined]  # Django 5.1's
        )

    def driver_cursor(self) -> psycopg.Cursor[Any]:
        """A cursor of the driver's on this thread's connection, for `forge_core.fastsql`'s reads. Its `timestamptz`
        values come from psycopg's own loader when that gives what Django's would: Django's is psycopg's Python one
        with the value then set in Django's time zone (None, naive, without `USE_TZ`), psycopg's gives the value in
        the connection's TimeZone, which Django sets to its own zone as it opens the connection. Only while that
        TimeZone is Django's zone, the same `tzinfo` object, are the two the same values; else the cursor gets
        Django's loader in Django's zone where the connection's is in another, as Django's `create_cursor` does."""
        connection = self.connection
        cursor = connection.cursor()
        zone = self.timezone
        if zone is not None and get_tzinfo(connection.pgconn) is zone:
            cursor.adapters.register_loader(TIMESTAMPTZ, PSYCOPGS_TIMESTAMPTZ_LOADER)
        elif connection.adapters.get_loader(TIMESTAMPTZ, Format.TEXT).timezone != zone:
            register_tzloader(zone, cursor)
        return cursor
