"""Django's PostgreSQL backend, running the transaction's `forge_core.before_commit` hooks as it commits, and telling a
worker thread whether it may keep its pooled connection between hops."""

from __future__ import annotations

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus

from forge_core.before_commit import RunsBeforeCommit


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

    def kept_idle(self) -> bool:
        """Whether this thread's connection is open with no transaction on the server, nothing a return to the pool
        would roll back: a worker thread then keeps it for its next hop (`forge_core.workers`)."""
        connection = self.connection
        return connection is not None and connection.pgconn.transaction_status == TransactionStatus.IDLE
