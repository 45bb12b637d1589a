"""Django's SQLite backend, with the database's one write lock also taken inside the process, fairly.

Every transaction begins IMMEDIATE (settings), taking SQLite's write lock at BEGIN. When two threads of one
process want it at once, SQLite makes the loser sleep in its busy handler, in steps of up to 100 ms, however
soon the lock is free again: with the MCP requests of a process working side by side (`forge_core.workers`),
that put tens of milliseconds, and under load seconds, on a write that should have waited a millisecond. So a
transaction first takes a process-wide lock, which wakes the next waiter the moment the last one commits or
rolls back; SQLite's own lock and busy timeout still order this process against others.

A transaction that cannot get the process lock within the busy timeout goes on to SQLite's lock anyway (and its
busy timeout): a thread that held it for that long is stuck elsewhere, and waiting for it forever would stop
every writer.

A commit also runs the transaction's `forge_core.before_commit` hooks first (the audit mirror's one fsync).
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from django.db.backends.sqlite3 import base

from forge_core.before_commit import RunsBeforeCommit

WRITE_LOCK = threading.Lock()
WAIT_SECONDS = 10.0  # the busy timeout of settings' init_command
logger = logging.getLogger("forge.db")


class DatabaseWrapper(RunsBeforeCommit, base.DatabaseWrapper):
    _holds_write_lock = False

    def driver_cursor(self) -> sqlite3.Cursor:
        """A cursor of the driver's on this thread's connection, for `forge_core.fastsql`'s reads."""
        return self.connection.cursor()

    def _start_transaction_under_autocommit(self) -> None:
        if not WRITE_LOCK.acquire(timeout=WAIT_SECONDS):
            logger.warning("a transaction waited %.0f s for the process's SQLite write lock; going on", WAIT_SECONDS)
        else:
            self._holds_write_lock = True
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # private in django-stubs
        except BaseException:
            self._release_write_lock()
            raise

    def _commit(self) -> None:
        self.run_before_commit()  # outside the try: a hook that fails leaves the lock to the rollback that follows
        try:
            super()._commit()  # type: ignore[misc]  # private in django-stubs
        finally:
            self._release_write_lock()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._release_write_lock()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._release_write_lock()

    def _release_write_lock(self) -> None:
        if self._holds_write_lock:
            self._holds_write_lock = False
            WRITE_LOCK.release()
