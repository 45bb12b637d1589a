"""The reads every MCP call makes, with their SQL built once per process.

Every POST looks up its bearer token (with the owner, and the MCP switch) and, on session revisions, its session. Through
the ORM these cost about 0.4 and 0.35 ms of CPU on this machine, most of it spent compiling the same
queryset again; that was half of a call's server CPU (docs/PERFORMANCE.md). Here the SELECT and the
column converters are prepared on first use, the statement goes to the database driver's own cursor
(`forge_core.fastsql`: Django's cursor wrapper and its placeholder rewriting cost more than the SELECT), and
rows become model instances holding exactly what the ORM would give. Nothing is cached across calls: every
call still reads the current token and session, so revocation takes effect on the next request.
"""

from __future__ import annotations

import json.scanner
import time
from datetime import UTC, datetime, tzinfo
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.models import JSONField, Model
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from access.models import ClientToken, McpSession, ServerState
from forge_core import fastsql


class PreparedSelect:
    """A SELECT of whole rows of one or more models, joined; each fetched row becomes model instances.

    On SQLite each column is selected as `+column`, its value with no declared type. Given a declared type, the
    driver looks up a converter for every column on every execute (Django registers one for `datetime` and `bool`
    columns) and calls it on every value; a third of the statement's cost on a call's 33 columns. Without one, the
    values come as SQLite keeps them, which Django's own converters of these fields take as they are (they were
    written for raw SQL); the common ones are done here in place (`_convert_row`)."""

    def __init__(self, models: list[type[Model]], where: str, also: tuple[str, ...] = ()) -> None:
        """`also`: SQL expressions selected after the models' columns, whose values `fetch` gives as they come."""
        self.parts: list[tuple[type[Model], list[str], int, int]] = []  # model, attribute names, its columns' span
        self.conversions: list[tuple[int, Any, list[Any]]] = []  # the columns whose value needs converting
        self.datetimes: list[int] = []  # the columns converted by SQLite's datetime converter alone
        self.booleans: list[int] = []  # the columns converted by SQLite's boolean converter alone
        self.jsons: list[tuple[int, Any, list[Any]]] = []  # the JSON columns, decoded by `_json_value`
        selected: list[str] = []
        sqlite = connection.vendor == "sqlite"
        datetime_converter, boolean_converter = _sqlite_converters() if sqlite else (None, None)
        for model in models:
            table = model._meta.db_table
            fields = model._meta.concrete_fields
            start = len(selected)
            for position, field in enumerate(fields, start=start):
                column = field.get_col(table)
                converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
                functions = [getattr(convert, "__func__", None) for convert in converters]
                if sqlite and functions == [datetime_converter]:
                    self.datetimes.append(position)
                elif sqlite and functions == [boolean_converter]:
                    self.booleans.append(position)
                elif functions == [JSONField.from_db_value] and isinstance(field, JSONField) and field.decoder is None:
                    self.jsons.append((position, column, converters))
                elif converters:
                    self.conversions.append((position, column, converters))
                selected.append(f"{'+' if sqlite else ''}{quote(table)}.{quote(field.column)}")
            self.parts.append((model, [field.attname for field in fields], start, len(selected)))
        self.also_from = len(selected)
        self.sql = fastsql.driver_sql(f"SELECT {', '.join([*selected, *also])} FROM {where} LIMIT 1")

    def fetch(self, params: list[Any]) -> list[Any] | None:
        """The row's model instances, in the order given, then the values of `also`; None for no row."""
        db = connections[DEFAULT_DB_ALIAS]  # looked up once: each lookup goes through asgiref's `Local`
        row = fastsql.fetchone(self.sql, params, db)
        if row is None:
            return None
        values = list(row)
        for position, column, converters in self.conversions:
            for convert in converters:
                values[position] = convert(values[position], column, db)
        for position, column, converters in self.jsons:
            values[position] = _json_value(values[position], column, converters, db)
        for position in self.booleans:
            if values[position] in (1, 0):  # as Django's SQLite `convert_booleanfield_value`
                values[position] = bool(values[position])
        if self.datetimes:
            _convert_datetimes(values, self.datetimes, db.timezone if settings.USE_TZ else None)
        loaded = [fastsql.loaded(model, attnames, values[start:end]) for model, attnames, start, end in self.parts]
        return [*loaded, *values[self.also_from :]]


def _sqlite_converters() -> tuple[Any, Any]:
    """Django's SQLite datetime and boolean converters, whose work `fetch` does: imported when a select is prepared on
    SQLite, whose backend is loaded by then (imported with this module, or on another backend, its module started a
    circular import of the SQLite backend)."""
    from django.db.backends.sqlite3.operations import DatabaseOperations

    return DatabaseOperations.convert_datetimefield_value, DatabaseOperations.convert_booleanfield_value


# The C scanner where there is one (typeshed types `make_scanner` as a class taking itself).
_SCAN_JSON = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _json_value(value: Any, column: Any, converters: list[Any], db: Any) -> Any:
    """What `JSONField.from_db_value` makes of a JSON column's value (a call's session holds two): a text as Django
    writes it (`json.dumps`, nothing around the value) decoded by json's scanner alone, the same value as
    `json.loads`, which spends three times as long in its Python layers (2.7 against 0.8 us for a session's
    `client_info`); anything else (whitespace around, not JSON, not a text) goes through Django's converter."""
    if type(value) is str:
        try:
            decoded, end = _SCAN_JSON(value, 0)
        except (StopIteration, ValueError):
            pass  # not JSON as Django writes it: Django's converter decides, as for any other column
        else:
            if end == len(value):
                return decoded
    for convert in converters:
        value = convert(value, column, db)
    return value


def _convert_datetimes(values: list[Any], positions: list[int], zone: tzinfo | None) -> None:
    """What SQLite's `convert_datetimefield_value` makes of each of these columns (a naive value read as in the
    connection's time zone when `USE_TZ`), with the setting and the zone read once per row rather than once per
    column: a call's token, owner and session hold nine such columns."""
    for position in positions:
        value = values[position]
        if value is None:
            continue
        if zone is UTC and type(value) is str:
            # Django keeps a time on SQLite as its UTC wall time: read as UTC in one step, the same value as a parse
            # then `replace(tzinfo=...)`, whose keyword arguments cost four times the parse.
            try:
                values[position] = datetime.fromisoformat(value + "+00:00")
                continue
            except ValueError:
                pass  # not as Django writes it (an offset of its own, another form): read below, as Django reads it
        if not isinstance(value, datetime):
            value = parse_datetime(value)
        if zone is not None and not timezone.is_aware(value):
            value = value.replace(tzinfo=zone)
        values[position] = value


def quote(name: str) -> str:
    return connection.ops.quote_name(name)


@cache
def _token_select(with_session: bool) -> PreparedSelect:
    """The token by digest with its owner, and (`with_session`) the open session of a given id that it opened,
    whose columns are all NULL when there is none: a call on a session reads both in one statement."""
    user = get_user_model()
    token_table, user_table = ClientToken._meta.db_table, user._meta.db_table
    owner = ClientToken._meta.get_field("owner")
    joined = (
        f"{quote(token_table)} INNER JOIN {quote(user_table)} ON {quote(user_table)}.{quote(user._meta.pk.column)}"
        f" = {quote(token_table)}.{quote(owner.column)}"
    )
    if with_session:
        table = McpSession._meta.db_table
        token = McpSession._meta.get_field("token")
        joined += (
            f" LEFT JOIN {quote(table)} ON {quote(table)}.{quote('id')} = %s"
            f" AND {quote(table)}.{quote(token.column)} = {quote(token_table)}.{quote('id')}"
            f" AND {quote(table)}.{quote('ended_at')} IS NULL"
        )
    models: list[type[Model]] = [ClientToken, user, McpSession] if with_session else [ClientToken, user]
    return PreparedSelect(models, f"{joined} WHERE {quote(token_table)}.{quote('digest')} = %s", (f"({_switch()})",))


@cache
def _session_select() -> PreparedSelect:
    table = McpSession._meta.db_table
    token = McpSession._meta.get_field("token")
    return PreparedSelect(
        [McpSession],
        f"{quote(table)} WHERE {quote(table)}.{quote('id')} = %s AND {quote(table)}.{quote(token.column)} = %s"
        f" AND {quote(table)}.{quote('ended_at')} IS NULL",
    )


PREFETCHED = "_forge_prefetched_session"  # on a token read with a session id: (that id, the session or None)
SWITCH_READ = "_forge_switch_read"  # on a token: (when, the MCP switch as read in the statement that read it)
# A token object serves one request; one kept longer than this does not carry its reading of the switch on.
SWITCH_READ_SECONDS = 1.0


def token_by_digest(digest: str, session_id: str | None = None) -> ClientToken | None:
    """The token with this digest, its owner loaded, or None. Given the id of the session the request names,
    that session is read in the same statement and kept on the token for `open_session_of`."""
    found = _token_select(session_id is not None).fetch([session_id, digest] if session_id is not None else [digest])
    if found is None:
        return None
    token, owner, switch = found[0], found[1], found[-1]
    assert isinstance(token, ClientToken)  # the select's first model
    ClientToken._meta.get_field("owner").set_cached_value(token, owner)
    token.__dict__[SWITCH_READ] = (time.monotonic(), bool(switch))
    if session_id is not None:
        session = found[2] if found[2].pk is not None else None
        token.__dict__[PREFETCHED] = (session_id, session)
    return token


def open_session_of(token: ClientToken, session_id: str) -> McpSession | None:
    """The session with this id opened by this token and not ended, or None (read with the token when it was)."""
    prefetched = token.__dict__.pop(PREFETCHED, None)
    if prefetched is not None and prefetched[0] == session_id:
        session = prefetched[1]
    else:
        found = _session_select().fetch([session_id, token.pk])
        session = found[0] if found is not None else None
    if session is None:
        return None
    assert isinstance(session, McpSession)  # the select's model
    McpSession._meta.get_field("token").set_cached_value(session, token)
    return session


def _switch() -> str:
    table = quote(ServerState._meta.db_table)
    return f"SELECT {quote('mcp_enabled')} FROM {table} WHERE {quote('id')} = 1"


@cache
def _switch_sql() -> str:
    return fastsql.driver_sql(_switch())


def mcp_enabled(token: ClientToken | None = None) -> bool:
    """The master switch. No row (a fresh install) or any database failure reads as off (fail closed). Given
    the request's token, the switch as read in the statement that read the token: a call makes no second
    round trip for it."""
    read = token.__dict__.get(SWITCH_READ) if token is not None else None
    if read is not None and time.monotonic() - read[0] < SWITCH_READ_SECONDS:
        return bool(read[1])
    try:
        row = fastsql.fetchone(_switch_sql(), [])
    except DatabaseError:
        return False
    return bool(row and row[0])
