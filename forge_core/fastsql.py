"""The few statements every MCP call runs, sent to the database driver's own cursor.

Django's cursor wrapper costs more than the small SELECTs of a call's hot path (`access.hotpath`): a
thread-sharing check, the execute-wrapper chain, and on SQLite a regular expression that rewrites each `%s`
placeholder as `?`. Here the statement is written in the driver's placeholder style once (`driver_sql`), run
on the connection Django already holds for this thread, and any driver error is still raised as Django's
(`DatabaseError` and its kin), so callers catch what they always caught. Only reads go this way: writes keep
Django's cursor, where tests and execute wrappers can see them (the one exception, a group-committed audit
batch's INSERTs on SQLite, takes the driver's cursor only while no execute wrapper or query log watches:
`audit.services._insert_alone`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.base import ModelState

M = TypeVar("M", bound=Model)


def driver_sql(sql: str) -> str:
    """`sql`, written with Django's `%s` placeholders, in the driver's own style (SQLite's `?`)."""
    return sql.replace("%s", "?") if connection.vendor == "sqlite" else sql


def fetchone(sql: str, params: Sequence[Any], db: BaseDatabaseWrapper | None = None) -> tuple[Any, ...] | None:
    """The first row of `sql` (in the driver's style, `driver_sql`), on this thread's connection (`db`, when the
    caller has looked it up already)."""
    return _run(sql, params, _first_row, db)


def fetchall(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Every row of `sql` (in the driver's style, `driver_sql`), on this thread's connection."""
    return _run(sql, params, lambda cursor: cursor.fetchall())


def fetchone_of_script(script: str) -> tuple[Any, ...] | None:
    """The first row of the last statement of `script` (statements separated by `;`, no parameters), sent in one
    round trip on this thread's connection. PostgreSQL only: SQLite's driver runs one statement at a time."""

    def last_first_row(cursor: Any) -> Any:
        while cursor.nextset():
            pass
        return cursor.fetchone()

    return _run(script, None, last_first_row)


def _first_row(cursor: Any) -> Any:
    return cursor.fetchone()


def _run(
    sql: str, params: Sequence[Any] | None, fetch: Callable[[Any], Any], db: BaseDatabaseWrapper | None = None
) -> Any:
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]  # looked up once: each `connection.x` goes through a thread-local proxy
    if db.connection is None:
        db.ensure_connection()
    if db.needs_rollback:
        db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            cursor.execute(sql, params)
            return fetch(cursor)
        finally:
            cursor.close()


def loaded(model: type[M], attnames: list[str], values: list[Any]) -> M:
    """An instance of `model` as the ORM loads one from a row (`Model.from_db`), without running `__init__`
    over every field: the hot path's models have no `pre_init`/`post_init` receivers to skip."""
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = instance._state = ModelState()
    state.adding = False
    state.db = DEFAULT_DB_ALIAS
    return instance


def built(model: type[M], **values: Any) -> M:
    """A new, unsaved instance of `model` (plain fields only, given by attribute name), as `model(**values)`
    makes it, without `__init__`'s work per field; fields not given hold their defaults."""
    instance = model.__new__(model)
    instance.__dict__.update(_defaults(model))
    instance.__dict__.update(values)
    instance._state = ModelState()
    return instance


@cache
def _defaults(model: type[Model]) -> dict[str, Any]:
    fields = model._meta.concrete_fields
    if any(field.has_default() and callable(field.default) for field in fields):
        raise TypeError(f"{model.__name__} has a callable default; build it with {model.__name__}(...)")
    return {field.attname: field.get_default() for field in fields}
