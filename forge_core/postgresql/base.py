"""Django's PostgreSQL backend, running the transaction's `forge_core.before_commit` hooks as it commits."""

from __future__ import annotations

from django.db.backends.postgresql import base

from forge_core.before_commit import RunsBeforeCommit


class DatabaseWrapper(RunsBeforeCommit, base.DatabaseWrapper):
    def _commit(self) -> None:
        self.run_before_commit()
        super()._commit()  # type: ignore[misc]  # private in django-stubs
