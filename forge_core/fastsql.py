"""The few statements every MCP call runs, sent to the database driver's own cursor.

Django's cursor wrapper costs more than the small SELECTs of a call's hot path (`access.hotpath`): a
thread-sharing check, the execute-wrapper chain, and on SQLite a regular expression that rewrites each `%s`
placeholder as `?`. Here the statement is written in the driver's placeholder style once (`driver_sql`), run
on the connection Django already holds for this thread, and any driver error is still raised as Django's
(`DatabaseError` and its kin), so callers catch what they always caught. Only reads go this way: writes keep
Django's cursor, where tests and execute wrappers can see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Model
from django.db.models.base import ModelState


def driver_sql(sql: str) -> str:
    """`sql`, written with Django's `%s` placeholders, in the driver's own style (SQLite's `?`)."""
    return sql.replace("%s", "?") if connection.vendor == "sqlite" else sql


def fetchone(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The first row of `sql` (in the driver's style, `driver_sql`), on this thread's connection."""
    if connection.connection is None:
        connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = connection.connection.cursor()
        try:
            cursor.execute(sql, params)
            return cursor.fetchone()
        finally:
            cursor.close()


def loaded(model: type[Model], attnames: list[str], values: list[Any]) -> Model:
    """An instance of `model` as the ORM loads one from a row (`Model.from_db`), without running `__init__`
    over every field: the hot path's models have no `pre_init`/`post_init` receivers to skip."""
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = instance._state = ModelState()
    state.adding = False
    state.db = connection.alias
    return instance
