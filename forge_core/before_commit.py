"""Work a transaction's commit waits for: run just before the database commits, dropped if it rolls back.

Django runs hooks after a commit (`transaction.on_commit`), never before one. The audit mirror needs the other
kind: its lines are written as their rows are appended, but they only have to reach the disk (an fsync) before
the transaction that holds the rows commits, so a transaction that appends several rows (an approval appends
seven) syncs the file once, not once per row, and still never commits a row whose line could be lost. The
database backends Forge runs on (`forge_core.sqlite`, `forge_core.postgresql`) mix in `RunsBeforeCommit`.

A hook that fails fails the commit: the transaction is rolled back, as for any error at commit, and the caller
gets a `DatabaseError`. Outside a transaction (autocommit) there is nothing to wait for, and a hook runs at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

_PENDING = "_forge_before_commit"


def before_commit(key: Hashable, hook: Callable[[], None], using: str = DEFAULT_DB_ALIAS) -> None:
    """Run `hook` once just before this thread's transaction on database `using` commits; a hook already waiting
    under `key` is not added again (the mirror is synced once whatever the rows)."""
    connection = connections[using]
    if connection.get_autocommit():
        hook()
        return
    pending: dict[Hashable, Callable[[], None]] = connection.__dict__.setdefault(_PENDING, {})
    pending.setdefault(key, hook)


class RunsBeforeCommit:
    """Mixed into a database backend's wrapper, whose `_commit` calls `run_before_commit()` first."""

    def run_before_commit(self) -> None:
        """Run the transaction's hooks, in the order they were added. One that fails raises a `DatabaseError`, on
        which Django's atomic() rolls the transaction back (on anything else it would leave it open)."""
        pending: dict[Hashable, Callable[[], None]] = self.__dict__.pop(_PENDING, {})
        try:
            for hook in pending.values():
                hook()
        except DatabaseError:
            raise
        except Exception as exc:  # the boundary between the hooks and atomic(), which only knows DatabaseError
            raise DatabaseError(f"the transaction was not committed: {exc}") from exc

    def _rollback(self) -> None:
        self.__dict__.pop(_PENDING, None)
        super()._rollback()  # type: ignore[misc]  # the backend's own

    def _close(self) -> None:
        self.__dict__.pop(_PENDING, None)
        super()._close()  # type: ignore[misc]  # the backend's own
