"""The few statements every MCP call runs, sent to the database driver's own cursor.

Django's cursor wrapper costs more than the small SELECTs of a call's hot path (`access.hotpath`): a
thread-sharing check, the execute-wrapper chain, and on SQLite a regular expression that rewrites each `%s`
placeholder as `?`. Here the statement is written in the driver's placeholder style once (`driver_sql`), run
on the connection Django already holds for this thread (in a cursor its backend makes, `driver_cursor`: on
PostgreSQL one that reads `timestamptz` with psycopg's own C loader), and any driver error is still raised as Django's
(`DatabaseError` and its kin), so callers catch what they always caught. Only reads go this way: writes keep
Django's cursor, where tests and execute wrappers can see them (the one exception, a group-committed audit
batch's INSERTs on SQLite, takes the driver's cursor only while no execute wrapper or query log watches:
`audit.services._insert_alone`).

`PreparedRead` is the other way to make a hot read cheaper: the ORM compiles it once, and it is then sent
through Django's cursor (query capture and execute wrappers see it) with only its id changing; `save_fields` does
the same for a record's `save(update_fields=...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model, QuerySet
from django.db.models.base import ModelState
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]  # not in django-stubs
from django.db.models.signals import post_save, pre_save

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
    return _run(script, None, last_statement_first_row)


def last_statement_first_row(cursor: Any) -> Any:
    """The first row of the last statement a driver cursor ran (psycopg keeps each statement's rows of a script)."""
    return at_last_statement(cursor).fetchone()


def at_last_statement(cursor: Any) -> Any:
    """A driver cursor that ran a script, moved on to its last statement's rows."""
    while cursor.nextset():
        pass
    return cursor


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
        cursor = db.driver_cursor()  # type: ignore[attr-defined]  # each of the project's backends has one
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


class PreparedRead:
    """A read of whole records by their id that every approval or move makes (a contract's record locked, its event
    chain, a confirmation locked or read again with who asked and who approved), compiled by the ORM once and then
    sent as that SQL with the id: compiling it again each time cost more than its round trip. The rows become
    records as the ORM makes them (its converters, `from_db`, the related records its `select_related` joined and its
    annotations),
    through Django's cursor, so query capture and execute wrappers see the read as any other."""

    def __init__(self, queryset_of: Callable[[Any], QuerySet[Any]], key: Field[Any, Any]) -> None:
        # `key`, the field the id is compared with (a contract's for its events), prepares the id as the ORM would.
        self._queryset_of, self._key = queryset_of, key
        self._compiled: tuple[type[Model], str, list[str], int, int, list[Any], list[Any], list[Any]] | None = None

    def __call__(self, key: Any) -> list[Any]:
        if self._compiled is None:
            # Compiled with the first id; only the SQL (its placeholder) is kept, never that id.
            queryset = self._queryset_of(key)
            compiler = queryset.query.get_compiler(DEFAULT_DB_ALIAS)
            sql, params = compiler.as_sql()
            if len(params) != 1:
                raise RuntimeError(f"a prepared read takes its id as its one parameter, not {len(params)}")
            start, end = compiler.klass_info["select_fields"][0], compiler.klass_info["select_fields"][-1] + 1
            attnames = [column.target.attname for column, _sql, _alias in compiler.select[start:end]]
            converters = list(compiler.get_converters([column for column, _sql, _alias in compiler.select]).items())
            related = get_related_populators(compiler.klass_info, compiler.select, DEFAULT_DB_ALIAS)
            annotations = list(compiler.annotation_col_map.items())
            self._compiled = queryset.model, sql, attnames, start, end, converters, related, annotations
        model, sql, attnames, start, end, converters, related, annotations = self._compiled
        with connection.cursor() as cursor:
            cursor.execute(sql, [self._key.get_db_prep_value(key, connection)])
            rows = cursor.fetchall()
        found = []
        for row in map(list, rows):
            for position, (convert, column) in converters:
                for converter in convert:
                    row[position] = converter(row[position], column, connection)
            record = model.from_db(DEFAULT_DB_ALIAS, attnames, row[start:end])
            for populator in related:
                populator.populate(row, record)
            for name, position in annotations:
                setattr(record, name, row[position])
            found.append(record)
        return found


def save_fields(instance: Model, names: tuple[str, ...]) -> None:
    """`instance.save(update_fields=names)`: its UPDATE written once per model and fields and sent through Django's
    cursor with the values `save()` sends (each field's `pre_save` and `get_db_prep_save`), between the `pre_save`
    and `post_save` signals `save()` sends; refused as `save()` refuses it when the row is gone. For a record saved
    at every approval, where compiling the UPDATE cost more than its round trip."""
    model = type(instance)
    sql, fields = _update_sql(model, names)
    update_fields = frozenset(names)
    pre_save.send(sender=model, instance=instance, raw=False, using=connection.alias, update_fields=update_fields)
    values = [field.get_db_prep_save(field.pre_save(instance, False), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, model._meta.pk.get_db_prep_value(instance.pk, connection)])
        if cursor.rowcount != 1:
            raise DatabaseError("Save with update_fields did not affect any rows.")
    instance._state.db = connection.alias
    post_save.send(
        sender=model, instance=instance, created=False, update_fields=update_fields, raw=False, using=connection.alias
    )


@cache
def _update_sql(model: type[Model], names: tuple[str, ...]) -> tuple[str, list[Field[Any, Any]]]:
    """The UPDATE of these fields of one record of `model`, by its id, with the fields in their placeholders' order."""
    fields = [model._meta.get_field(name) for name in names]
    concrete = [field for field in fields if isinstance(field, Field) and field.concrete and not field.primary_key]
    if len(concrete) != len(fields):
        raise ValueError(f"{model.__name__} cannot save {names} as fields of its own row")
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in concrete)
    table, key = quote(model._meta.db_table), quote(model._meta.pk.column)
    return f"UPDATE {table} SET {assignments} WHERE {key} = %s", concrete
