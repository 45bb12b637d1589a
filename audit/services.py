"""Appending to the audit log: the one call site every app uses, and the checkpoints over it.

`record()` sanitizes the arguments (secrets redacted, large values replaced by their digest), takes the
chain lock, and appends the row with its MAC, its Merkle tree nodes and its mirror line, in the caller's
transaction when there is one: a state change and its audit row commit together or not at all. The mirror's
lines are fsynced once per transaction, just before it commits (`forge_core.before_commit`), whatever the number
of rows it appends. Rows appended outside a transaction are group-committed: those that arrive together share
one transaction of the append's own (not Django's atomic()) and one mirror fsync, synced before that transaction
commits, and each caller returns once its own row is committed. When the row
cannot be written (database error, mirror unwritable) the caller gets `AuditUnavailable` and the action
it was about to record must not happen (fail closed).

Appends are serialized so the chain never forks or gaps: on SQLite every transaction begins IMMEDIATE
(settings), which takes the database's write lock; on PostgreSQL a transaction-scoped advisory lock.
The append path uses prepared SQL: it runs on every tool call.
"""

from __future__ import annotations

import _hashlib
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import math
import operator
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, Unpack

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, models, transaction
from django.utils import timezone
from psycopg.adapt import Transformer

from audit import kept, keys, merkle
from audit.checkpoint import Checkpoint, CheckpointError, parse_and_verify, sign, verifier_key_string
from audit.mirror import Mirror, MirrorError, Past
from audit.models import AuditCheckpoint, AuditEvent, AuditTreeNode, EventKind
from forge_core import fastsql
from forge_core.before_commit import before_commit
from forge_core.canonical import canonical_json, canonical_json_of_tree
from forge_core.errors import AuditUnavailable

MAX_VALUE_CHARS = 1024
MAX_KEY_CHARS = 100
MAX_CONTAINER_CHARS = 16 * 1024
SECRET_KEYS = frozenset(
    {"token", "password", "secret", "private_key", "authorization", "api_key", "enrollment_code", "key"}
)
REDACTED = "[redacted]"
GENESIS_MAC = "0" * 64
EVENT_KINDS = frozenset(EventKind.values)
CHAIN_LOCK_ID = 0x466F726765  # "Forge": the PostgreSQL advisory lock that serializes appends
# At most this many events another process appended since this one's last append are read with the chain head
# (`_caught_up`); more, and the batch reads the head alone, as a process that knows nothing of the chain does.
CATCH_UP_EVENTS = 64
NODE_LEVEL_BITS = 6  # a tree node's key keeps its level (< 64) in its low bits: see node_key

logger = logging.getLogger(__name__)


# --- what goes into a row --------------------------------------------------------------------------


def sanitize(value: Any, *, secret_keys: Iterable[str] = ()) -> Any:
    """Return `value` fit for the audit log: secrets redacted, anything large replaced by its digest.

    A string over MAX_VALUE_CHARS, a key over MAX_KEY_CHARS, and a list or object whose JSON is over
    MAX_CONTAINER_CHARS become `{"sha256": ..., "length": ...}`, so one call can never write a large row.
    """
    extra = {key.lower() for key in secret_keys} if secret_keys else None
    return _sanitize(value, SECRET_KEYS | extra if extra else SECRET_KEYS)[0]


def _sanitize(value: Any, secrets: frozenset[str]) -> tuple[Any, int]:
    """The sanitized value and the length of its canonical JSON, computed bottom-up in one pass."""
    kind = type(value)
    # The usual values by their exact type first, before the isinstance checks against abstract classes (each a
    # call into the ABC machinery); none of these types is a Mapping, a list or another's subclass.
    if kind in _SCALAR_JSON_LENGTH:
        return value, _SCALAR_JSON_LENGTH[kind](value)
    if kind is str:
        return _bounded_text(value)
    if kind is dict or isinstance(value, Mapping):
        items, size = {}, 2
        for key, item in value.items():
            text = key if type(key) is str else str(key)
            name = text if len(text) <= MAX_KEY_CHARS else _key(text)
            # A text or a whole number, the usual members, taken here as `_sanitize` takes them: a call less for each.
            item_kind = type(item)
            if text.lower() in secrets:
                child, child_size = REDACTED, 12
            elif item_kind is str and len(item) <= MAX_VALUE_CHARS:
                child, child_size = item, len(item) + 2
            elif item_kind is int:
                child, child_size = item, len(repr(item))
            else:
                child, child_size = _sanitize(item, secrets)
            items[name] = child
            size += len(_text(name)) + 2 + child_size
        return _bounded(items, size)
    if isinstance(value, list | tuple):
        children = [_sanitize(item, secrets) for item in value]
        return _bounded([child for child, _ in children], 2 + sum(size + 1 for _, size in children))
    if isinstance(value, str):
        return _bounded_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value), 12
    if isinstance(value, bool | int | float) or value is None:
        return value, len(json.dumps(value))
    text = json.dumps(value, default=str)
    return (_digest(text) if len(text) > MAX_VALUE_CHARS else text), min(len(text), MAX_VALUE_CHARS) + 2


def _bounded_text(value: str) -> tuple[Any, int]:
    return (_digest(value), 100) if len(value) > MAX_VALUE_CHARS else (value, len(value) + 2)


# The length of `json.dumps(value)` for a value of exactly these types (a subclass may print otherwise), with no
# json.dumps to measure them: a bool's and None's are fixed, an int's is its repr's.
_SCALAR_JSON_LENGTH: dict[type, Callable[[Any], int]] = {
    bool: lambda value: 4 if value else 5,
    type(None): lambda value: 4,
    int: lambda value: len(repr(value)),
}


def _digest(text: str) -> dict[str, Any]:
    data = text.encode()
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


def _key(key: str) -> str:
    if len(key) <= MAX_KEY_CHARS:
        return key
    digest = _digest(key)
    return f"[key sha256 {digest['sha256']} length {digest['length']}]"


def _bounded(container: dict[str, Any] | list[Any], size: int) -> tuple[Any, int]:
    if size <= MAX_CONTAINER_CHARS:
        return container, size
    return _digest(canonical_json(container)), 100


def format_ts(ts: datetime) -> str:
    if ts.tzinfo is UTC and ts.year >= 1000:  # every append's `timezone.now()`: isoformat is twice as fast, same text
        return ts.isoformat(timespec="microseconds")[:-6] + "Z"
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def row_body(event: AuditEvent) -> dict[str, Any]:
    """The row as the MAC covers it: every field but the MAC itself."""
    return {
        "seq": event.seq,
        "ts": format_ts(event.ts),
        "kind": event.kind,
        "tool": event.tool,
        "arguments": json.loads(event.arguments_json),
        "outcome": event.outcome,
        "called_by": event.called_by,
        "session": event.session,
        "client_label": event.client_label,
        "project": event.project,
        "prev_mac": event.prev_mac,
    }


def compute_mac(prev_mac: str, body: Mapping[str, Any]) -> str:
    message = prev_mac.encode() + canonical_json(body).encode()
    return hmac.digest(keys.hmac_key(), message, "sha256").hex()


def event_line(event: AuditEvent) -> str:
    """The event as a mirror line and as the data of its Merkle leaf: the row with its MAC."""
    return canonical_json({**row_body(event), "mac": event.mac})


def _sealed_texts(event: AuditEvent, ts_text: str | None = None) -> tuple[str, str]:
    """What `compute_mac` and `event_line` compute, for the append path: the canonical JSON of the row's body and
    its line, assembled from each field's own canonical JSON (the arguments are stored canonical already) rather
    than by loading the arguments back and encoding the whole row twice. Verification recomputes both the
    general way (`audit.verify`), so the two cannot drift unnoticed. `ts_text` is `format_ts(event.ts)` when the
    caller has it already."""
    head, tail = _line_parts(event, ts_text)
    body = f"{{{head},{tail}}}"
    mac = _keyed_mac()
    mac.update(f"{event.prev_mac}{body}".encode())
    event.mac = mac.hexdigest()
    return body, _line(head, event.mac, tail)


def _keyed_mac() -> _hashlib.HMAC:
    """A fresh HMAC-SHA256 under the audit key, nothing fed to it yet: a copy of one keyed once per key.

    `hmac.digest(key, message, "sha256")` keys a new MAC on every call (in OpenSSL 3 it also looks the algorithm up
    each time), about 30 K instructions a row; a copy of a keyed context and an update take about half that.
    The context is OpenSSL's own, the one `hmac.new(key, digestmod="sha256")` wraps: the wrapper's `copy`, `update`
    and `hexdigest` are Python functions around it, about 4 K instructions a row. The context kept is for the key
    `keys.hmac_key()` gives now (cached: the same object until its cache is cleared), and is never fed itself, so
    the threads that copy it at once share nothing that changes."""
    global _KEYED
    key = keys.hmac_key()
    keyed = _KEYED
    if keyed is None or keyed[0] is not key:
        keyed = _KEYED = (key, _hashlib.hmac_new(key, digestmod="sha256"))
    return keyed[1].copy()


_KEYED: tuple[bytes, _hashlib.HMAC] | None = None


def _line_parts(event: AuditEvent, ts_text: str | None = None) -> tuple[str, str]:
    """The row's canonical JSON members before its "mac" and after it (the keys in canonical, sorted, order);
    `ts_text`, when given, is `format_ts(event.ts)`."""
    head = (
        f'"arguments":{event.arguments_json},"called_by":{_text(event.called_by)},'
        f'"client_label":{_text(event.client_label)},"kind":{_text(event.kind)}'
    )
    tail = (
        f'"outcome":{_text(event.outcome)},"prev_mac":{_text(event.prev_mac)},"project":{_text(event.project)},'
        f'"seq":{event.seq:d},"session":{_text(event.session)},"tool":{_text(event.tool)},'
        f'"ts":{_text(format_ts(event.ts) if ts_text is None else ts_text)}'
    )
    return head, tail


def _stored_line(event: AuditEvent) -> str:
    """`event_line` of a row read back with its MAC, assembled as the append path assembles a new row's line."""
    head, tail = _line_parts(event)
    return _line(head, event.mac, tail)


def _line(head: str, mac: str, tail: str) -> str:
    return f'{{{head},"mac":{_text(mac)},{tail}}}'


# `value` as canonical JSON text: what `json.dumps(value, ensure_ascii=False)` gives, without its overhead. The C
# encoder itself, called directly: a Python function around it was ten calls more on every row's line.
_text: Callable[[str], str] = json.encoder.encode_basestring


# --- the tree's node store -------------------------------------------------------------------------


def node_key(level: int, index: int) -> int:
    """A tree node's row key: the position of the last leaf it covers, the leaf whose append completes it, then its
    level. An append adds its leaf and every node it completes on consecutive keys past all stored ones, so a
    batch's nodes land together at the end of the table's b-tree. (Keyed `level << 48 | index`, each level was an
    insertion point of its own: a commit of eight rows on SQLite wrote ten pages of nodes; docs/PERFORMANCE.md,
    section 14.) Migration 0006 computes the same key in SQL."""
    return ((((index + 1) << level) - 1) << NODE_LEVEL_BITS) | level


class DatabaseNodeStore:
    """The tree's perfect-subtree hashes as rows; a proof reads all it needs in one query."""

    def get_many(self, positions: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if not positions:
            return {}
        wanted = {node_key(level, index): (level, index) for level, index in positions}
        rows = fastsql.fetchall(_nodes_sql(len(wanted)), list(wanted))
        return {wanted[key]: bytes(value) for key, value in rows}


# --- appending -------------------------------------------------------------------------------------


class EventFields(TypedDict, total=False):
    """What an audit event says besides its kind (`record()`'s keyword arguments)."""

    tool: str
    arguments: Mapping[str, Any] | None
    secret_keys: Iterable[str]
    outcome: str
    called_by: str
    session: str
    client_label: str
    project: str
    trace: Mapping[str, str] | None


def record(kind: EventKind | str, **fields: Unpack[EventFields]) -> AuditEvent:
    """Append one audit event; raises `AuditUnavailable` when it cannot, and returns only once it is committed.

    `arguments` are sanitized (`secret_keys` redacted, large values kept as their digest). `trace` is the W3C
    trace context the request carried (`mcp_api.tracing`, already validated and bounded): kept as the arguments'
    `_meta` member after they are sanitized, so arguments large enough to be kept as their digest do not lose it.

    Inside a transaction the row is appended in it, so it commits with what the caller changed or not at
    all. Outside one (a read-only tool call, a refusal) it is group-committed: rows that arrive together
    share one chain lock, one transaction and one mirror fsync (`_GroupCommit`)."""
    event = _event(kind, fields)
    db = _thread_connection()  # the batch it leads goes on it
    if not db.in_atomic_block:
        return _GROUP.append(event, db)
    _append_in_transaction([event])
    return event


def _thread_connection() -> Any:
    """This thread's default connection, looked up through Django's `connections` once per thread, as
    `forge_core.workers` keeps a pool thread's: each lookup goes through asgiref's thread-local storage, which asks
    asyncio for a running loop and catches the error (about 11 K instructions, some 4% of a row at eight writers).
    Django's connections are thread-critical: in a thread with no event loop, where anything that appends runs
    (Django refuses database work in one that has), the storage is a plain thread-local, one wrapper per thread
    for the thread's life."""
    db = getattr(_THREAD, "db", None)
    if db is None:
        db = _THREAD.db = connections[DEFAULT_DB_ALIAS]
    return db


_THREAD = threading.local()


def record_together(entries: Iterable[Mapping[str, Any]]) -> list[AuditEvent]:
    """Append several events of the caller's transaction as one batch, in this order, each given as `record()`'s
    arguments (`kind` among them): the chain head read once under the lock, one INSERT of the rows and one of their
    tree nodes, where each row alone takes all three (on PostgreSQL, round trips). Fail closed as `record()`:
    `AuditUnavailable`, and the transaction must not commit. Outside a transaction each is recorded as `record()`
    records it."""
    entries = list(entries)
    if not connection.in_atomic_block:
        return [record(**entry) for entry in entries]
    events = [_event(entry["kind"], entry) for entry in entries]
    if events:
        _append_in_transaction(events)
    return events


def _event(kind: EventKind | str, fields: Mapping[str, Any]) -> AuditEvent:
    """The event of `kind` that `fields` (`EventFields`) describe, sanitized and bounded, not appended yet."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"{kind!r} is not an audit event kind; add it to EventKind")
    given = fields.get("arguments") or {}
    # `sanitize` builds a dict of its own, so a dict goes as it is; another mapping is copied into one, as before.
    arguments = sanitize(given if type(given) is dict else dict(given), secret_keys=fields.get("secret_keys", ()))
    return fastsql.built(
        AuditEvent,
        kind=str(kind),
        tool=fields.get("tool", "")[:100],
        arguments_json=canonical_json_of_tree(_with_trace(arguments, fields.get("trace"))),
        outcome=fields.get("outcome", "")[:200],
        called_by=fields.get("called_by", "")[:200],
        session=fields.get("session", "")[:100],
        client_label=fields.get("client_label", "")[:200],
        project=fields.get("project", "")[:100],
    )


def _with_trace(sanitized: dict[str, Any], trace: Mapping[str, str] | None) -> dict[str, Any]:
    return {**sanitized, "_meta": dict(trace)} if trace else sanitized


def _append_in_transaction(events: list[AuditEvent]) -> None:
    # No savepoint: a row that cannot be appended dooms the caller's whole transaction (fail closed), so
    # there is nothing to roll back to; and a savepoint costs two statements (round trips on PostgreSQL).
    try:
        with transaction.atomic(savepoint=False):
            _append(events, locked_chain_head(), connections[DEFAULT_DB_ALIAS])
    except (DatabaseError, MirrorError) as exc:
        raise AuditUnavailable(str(exc)) from exc


def _append_alone(take: Callable[[], list[AuditEvent]], db: Any) -> None:
    """Append the events `take()` gives, once the chain lock is held, in a transaction of their own on `db` (this
    thread's connection) and commit it (the group commit's batch: rows that arrive while it waits for the lock join
    it rather than wait for the next batch's).

    The transaction is the append's own, not Django's atomic(), whose bookkeeping (autocommit switched off and on,
    the commit's checks and hooks, each through Django's thread-safety wrappers) cost a lone row more CPU than its
    statements on SQLite. Django's connection stays in autocommit meanwhile; the batch begins it (`_begin_alone`),
    `_append` commits it once the mirror's lines are synced, and anything that stops the append rolls it back here.
    On PostgreSQL that is two round trips where atomic() took four: BEGIN goes in the script that takes the chain
    lock and reads the head, and the INSERTs and COMMIT go as one script."""
    if not db.get_autocommit() or (db.vendor == "postgresql" and _binds_on_the_server(db)):
        _append_in_transaction(take())
        return
    try:
        try:
            head, missing = _begin_alone(db)
            _append(take(), head, db, missing)
        except BaseException:
            _roll_back(db)
            raise
    except (DatabaseError, MirrorError) as exc:
        raise AuditUnavailable(str(exc)) from exc


def _begin_alone(db: Any) -> tuple[tuple[int, str], Callable[[int, int], list[str]]]:
    """Begin the batch's transaction on `db`, in autocommit, and read the chain head under its lock; returns the
    head and where the mirror's lines of committed events come from (`Mirror.append`'s `missing`).

    On PostgreSQL that is one round trip: BEGIN, the lock and the read go as one script. When this process knows
    where its own last append left the chain, the script reads every event from there on (`_caught_up`): those
    another process appended since give this process's mirror their lines and the tree's frontier its nodes, which
    would otherwise take a round trip each. On SQLite the transaction begins as every one does (the process's write
    lock, then BEGIN IMMEDIATE: `forge_core.sqlite`), which is the chain lock. The head is read on `db`'s own driver
    connection, as `fastsql` reads, without looking `db` up again (`get_autocommit()` opened it, and a connection in
    autocommit has no broken transaction to check for)."""
    known = _FRONTIER.state[0] if db.vendor == "postgresql" else 0
    if db.vendor != "postgresql":
        db._start_transaction_under_autocommit()
        script = _last_row_sql()
    else:
        script = _begun_catch_up_sql().format(known=known) if known else _begun_locked_head_sql()
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            cursor.execute(script)
            if db.vendor != "postgresql":
                last = cursor.fetchone()  # SQLite's cursor runs one statement
            elif known:
                caught_up = _caught_up(fastsql.at_last_statement(cursor).fetchall())
                if caught_up is not None:
                    return caught_up
                cursor.execute(_last_row_sql())  # too far behind, or not as this process left it: the head alone
                last = cursor.fetchone()
            else:
                last = fastsql.last_statement_first_row(cursor)
        finally:
            cursor.close()
    return ((last[0], last[1]) if last else (0, GENESIS_MAC)), committed_lines


def _caught_up(rows: list[tuple[Any, ...]]) -> tuple[tuple[int, str], Callable[[int, int], list[str]]] | None:
    """The chain head from `rows` (every event from the one this process's last append ended with, in seq order, read
    under the chain lock: `_begun_catch_up_sql`), and the mirror's lines of those after it; None when they do not
    start with that very event (seq and MAC) and follow it without a gap, or are more than `CATCH_UP_EVENTS`.

    The tree's frontier is carried from this process's last append over those events, each leaf hashed from its
    line as every append hashes it, so the batch reads no stored node (`_KnownFrontier`)."""
    known_size, known_mac, known_nodes = _FRONTIER.state
    attnames = _rows_select()[0]
    seq_at, mac_at = attnames.index("seq"), attnames.index("mac")
    if not rows or len(rows) > CATCH_UP_EVENTS + 1 or (rows[0][seq_at], rows[0][mac_at]) != (known_size, known_mac):
        return None
    lines: dict[int, str] = {}
    size, mac = known_size, known_mac
    for row in rows[1:]:
        event, line = _row_line(attnames, row)
        if event.seq != size + 1:
            return None
        lines[event.seq] = line
        size, mac = event.seq, event.mac
    if lines:
        store = _BatchNodeStore(DatabaseNodeStore(), known_size, known_nodes)
        leaves = [merkle.leaf_hash(line.encode()) for line in lines.values()]
        store.put_many(merkle.nodes_for_appends(known_size, leaves, store))
        _FRONTIER.keep(size, mac, store.known)

    def missing(first: int, last: int) -> list[str]:
        wanted = range(first, last + 1)
        return [lines[seq] for seq in wanted] if all(seq in lines for seq in wanted) else committed_lines(first, last)

    return (size, mac), missing


def _commit_alone(db: Any) -> None:
    """Commit the transaction `_begin_alone` began (on SQLite the backend's commit, which lets go of the process's
    write lock as well)."""
    if db.vendor == "postgresql":
        with db.wrap_database_errors:
            db.connection.execute("COMMIT")
    else:
        db._commit()


def _binds_on_the_server(db: Any) -> bool:
    """Whether Django's psycopg cursors bind parameters on the server (OPTIONS `server_side_binding`): then a
    statement with parameters is a prepared one, and a script of several cannot be sent with them."""
    return db.settings_dict["OPTIONS"].get("server_side_binding") is True


def _roll_back(db: Any) -> None:
    """Roll back the transaction the append began on `db`'s connection; a connection that cannot is closed, so
    that no request after this one runs inside what is left of it."""
    try:
        db._rollback()  # the backend's own: on SQLite it lets go of the process's write lock too
    except Exception:
        logger.warning("could not roll back a failed audit append; closing its database connection")
        with contextlib.suppress(Exception):
            db.close()


class _Waiting:
    """One row waiting in the group commit, and what its caller is told."""

    __slots__ = ("db", "error", "event", "lead", "next", "ready")

    def __init__(self, event: AuditEvent, db: Any) -> None:
        self.event = event
        self.db = db  # the caller's connection, on which it appends the batch it leads, if it leads one
        # Held until the caller may go on, then released once: by the caller woken before it in its batch, or by
        # the leader that hands it the lead (a leader also waits on it while it gathers its batch). A bare lock,
        # not a threading.Event: its Python-level condition cost each row microseconds that a batch's callers
        # spend one after another, while the next leader gathers them.
        self.ready = threading.Lock()
        self.ready.acquire()
        self.lead = False
        self.next: _Waiting | None = None  # the caller of the batch this one wakes once it is woken
        self.error: AuditUnavailable | None = None


class _GroupCommit:
    """Leader/follower group commit of rows appended outside a transaction, per process.

    The first caller to find no leader leads: once it holds the chain lock it takes every row waiting (its own
    among them, and any that arrived while it waited for the lock: on PostgreSQL another process's batch may hold
    it), appends them in one transaction with one mirror fsync, commits, and wakes the batch's callers with their
    outcome. Rows that arrive after that wait for the next leader, which is the oldest of them: leadership
    is handed over, so no caller appends more than one batch for others. Every caller waits for its own row's
    commit, so the audit stays fail closed, and the chain order is the commit order. Each caller's thread
    does the work (no thread of its own): a call still makes one thread hop.

    The callers a batch wakes come back at slightly different moments; a leader that took only those already
    back would write a batch of one and leave the rest for the next (batches of 1, 8, 1, 8 at eight writers).
    So a leader waits, at most `GATHER_SECONDS`, for as many rows as the last batch held, and is woken once, by
    the caller that brings that many; with one caller at a time the last batch held one, and nobody waits.

    Each wake-up is a thread switch that the GIL serializes, so a batch makes as few as it can: callers joining
    a batch do not wake its leader (only the one that completes it does), and the leader wakes only the first
    of its callers, each of which wakes the next as it goes (a chain): the leader, still holding the GIL, no
    longer wakes seven threads that each must then wait for it to let go (py-spy --gil at eight writers found
    the leader holding the GIL in that loop for 27% of the GIL's time; 3.0 -> 2.1 voluntary context switches
    per row)."""

    GATHER_SECONDS = 0.001

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.waiting: list[_Waiting] = []
        self.leading = False
        self.last_batch = 1
        self.gathering: _Waiting | None = None  # a leader waiting for its batch to fill, woken by who fills it

    def append(self, event: AuditEvent, db: Any) -> AuditEvent:
        me = _Waiting(event, db)
        with self.mutex:
            self.waiting.append(me)
            first = not self.leading
            if first:
                self.leading = me.lead = True
            elif self.gathering is not None and len(self.waiting) >= self.last_batch:
                self.gathering.ready.release()
                self.gathering = None
        if not first:  # woken by the caller before it in its batch, or handed the lead
            me.ready.acquire()
            if me.next is not None:
                me.next.ready.release()
        if me.lead:
            self._lead(me)
        if me.error is not None:
            raise me.error
        return me.event

    def _lead(self, me: _Waiting) -> None:
        with self.mutex:
            gather = len(self.waiting) < self.last_batch
            if gather:
                self.gathering = me
        if gather:
            me.ready.acquire(timeout=self.GATHER_SECONDS)  # released by the caller that fills the batch
        with self.mutex:
            self.gathering = None
        batch: list[_Waiting] = []

        def take() -> list[AuditEvent]:
            with self.mutex:
                batch[:], self.waiting = self.waiting, []
                self.last_batch = len(batch)
            return [waiting.event for waiting in batch]

        failure: AuditUnavailable | None = AuditUnavailable("the audit batch was interrupted")
        try:
            _append_alone(take, me.db)
            failure = None
        except AuditUnavailable as exc:
            failure = exc
        except Exception as exc:  # whatever stopped the batch, none of its callers may go on as if recorded
            logger.exception("an audit batch failed; its %d callers are told the audit is unavailable", len(batch))
            failure = AuditUnavailable(f"{type(exc).__name__}: {exc}")
        finally:
            if not batch:  # stopped before it took its rows: only the leader's own is failed, the rest wait on
                with self.mutex:
                    self.waiting.remove(me)
                batch.append(me)
            followers = [waiting for waiting in batch if waiting is not me]
            for position, waiting in enumerate(followers, start=1):
                waiting.error = failure
                waiting.next = followers[position] if position < len(followers) else None
            me.error = failure
            with self.mutex:
                if self.waiting:
                    self.waiting[0].lead = True
                    self.waiting[0].ready.release()
                else:
                    self.leading = False
            if followers:
                followers[0].ready.release()


_GROUP = _GroupCommit()


def lock_chain() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_ID])


def chain_head() -> tuple[int, str]:
    """The last event's seq and MAC (0 and the genesis MAC for an empty log)."""
    last = fastsql.fetchone(_last_row_sql(), ())
    return (last[0], last[1]) if last else (0, GENESIS_MAC)


def locked_chain_head() -> tuple[int, str]:
    """`lock_chain()` then `chain_head()`, in one round trip on PostgreSQL: the two statements go as one script,
    and each statement of a script takes its own snapshot (READ COMMITTED), so the head is read once the lock is
    held and sees every append committed before it (one statement holding both would read the head as of before
    waiting for the lock)."""
    if connection.vendor != "postgresql":
        return chain_head()
    last = fastsql.fetchone_of_script(_locked_head_sql())
    return (last[0], last[1]) if last else (0, GENESIS_MAC)


def _append(
    events: list[AuditEvent],
    head: tuple[int, str],
    db: Any,
    missing: Callable[[int, int], list[str]] | None = None,
) -> None:
    """Append `events` at the chain's `head` (its last seq and MAC, read under the chain lock), in this order, inside
    the caller's transaction and chain lock on `db` (this thread's connection, looked up once by the caller): their rows and tree nodes (one INSERT of each kind for the batch),
    then their mirror lines with one fsync, then any checkpoint that falls due. `missing` gives the mirror the
    lines of committed events it lacks (another process's: `Mirror.append`).

    On a connection Django keeps in autocommit (PostgreSQL only: `_append_alone`, which began the transaction),
    the append commits the transaction itself: the mirror's lines are written and synced first, then the INSERTs
    and COMMIT go as one script, one round trip. A commit that fails then leaves lines past the database's end,
    as one that fails after the sync always could; the next append sets them aside (`Mirror.append`)."""
    commits = db.get_autocommit()  # the batch's own transaction (`_append_alone`), committed here
    missing = missing or committed_lines
    size, prev_mac = head
    first, first_prev_mac = size + 1, prev_mac
    # Prepared INSERTs instead of Model.save / bulk_create: the ORM spent ~0.2 ms per call compiling them.
    event_insert, node_insert = _insert_sql(AuditEvent), _insert_sql(AuditTreeNode)
    # The batch's tree nodes depend on the frontier's, kept from this process's last append or read.
    store = _BatchNodeStore(DatabaseNodeStore(), size, _FRONTIER.at(size, prev_mac))
    # SQLite's driver binds a `bytearray` as the BLOB it binds `bytes` as, but looks `bytes` up among its adapters
    # first (two failed attribute lookups, each an exception made and dropped: about 4 K instructions a node).
    blob: Callable[[bytes], bytes | bytearray] = bytearray if db.vendor == "sqlite" else bytes
    lines: list[str] = []
    leaves: list[bytes] = []
    event_rows: list[list[Any]] = []
    for event in events:
        now = datetime.now(UTC)  # timezone.now(), as USE_TZ has it
        event.ts, event.seq, event.prev_mac = now, size + 1, prev_mac
        ts_text, stored_text = _row_time(now, stored=event_insert.utc_text_at is not None)
        _, line = _sealed_texts(event, ts_text)  # sets event.mac
        leaves.append(merkle.leaf_hash(line.encode()))
        row = _db_values(event_insert, event_insert.values_of(event), db)
        if event_insert.utc_text_at is not None:  # SQLite's stored text of the time, from the line's text of it
            row[event_insert.utc_text_at] = stored_text
        event_rows.append(row)
        lines.append(line)
        size, prev_mac = event.seq, event.mac
    nodes = merkle.nodes_for_appends(first - 1, leaves, store)
    store.put_many(nodes)
    # A node's fields are whole numbers and bytes, none converted (`_insert_sql`): its values go as they are.
    node_rows = [(node_key(level, index), level, index, blob(digest)) for level, index, digest in nodes]
    every = settings.FORGE_AUDIT_CHECKPOINT_EVENTS
    due = range(-(-first // every) * every, size + 1, every) if every else range(0)
    mirror = Mirror(settings.FORGE_AUDIT_LOG)
    if not commits:
        with db.cursor() as cursor, _one_round_trip(db):
            event_insert.insert_rows(cursor, event_rows)
            node_insert.insert_rows(cursor, node_rows)
        # Synced once as the transaction commits, however many rows it appends (before_commit).
        mirror.append(first, lines, first_prev_mac, missing, kept_size, mac=prev_mac, sync=False)
        before_commit(("audit mirror", mirror.path), mirror.sync)
        _FRONTIER.keep(size, prev_mac, store.known)
        for checkpoint in due:
            _store_checkpoint(checkpoint)
        return
    kept: list[Callable[[], None]] = []
    if db.vendor == "postgresql":
        mirror.append(first, lines, first_prev_mac, missing, kept_size, mac=prev_mac, sync=False)
        mirror.sync()  # before the COMMIT is sent
        # One script, the rows bound into it on the client as Django's psycopg cursor binds every statement: one
        # Query message, one round trip, and none of a pipeline's work in psycopg. An error stops the script there.
        events_sql, event_params = event_insert.statement(event_rows)
        nodes_sql, node_params = node_insert.statement(node_rows)
        script = _script_sql(events_sql, nodes_sql, commit=not due)
        _send_alone(db, _bound_on_the_client(db, script, [*event_params, *node_params]))
    else:
        _insert_alone(db, [(event_insert, event_rows), (node_insert, node_rows)])
        mirror.append(first, lines, first_prev_mac, missing, kept_size, mac=prev_mac, sync=False)
        mirror.sync()  # before the commit
    if due:  # a checkpoint reads the batch's nodes back: its INSERTs go first, and the commit after it
        for checkpoint in due:
            _store_checkpoint(checkpoint, after_commit=kept.append)
    if due or db.vendor != "postgresql":
        _commit_alone(db)
    _FRONTIER.keep(size, prev_mac, store.known)
    for keep in kept:
        keep()


def _send_alone(db: Any, script: str) -> None:
    """A PostgreSQL batch's script, bound already, on the driver's own cursor (Django's errors still raised) unless
    something watches Django's, as SQLite's INSERTs go (`_insert_alone`): Django's cursor and its wrappers cost a
    batch about 20 K instructions of its Python."""
    if db.execute_wrappers or db.queries_logged:
        with db.cursor() as cursor:
            cursor.execute(script)
        return
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            cursor.execute(script)
        finally:
            cursor.close()


def _insert_alone(db: Any, inserts: list[tuple[_Insert, Sequence[Sequence[Any]]]]) -> None:
    """A SQLite batch's INSERTs, on the driver's own cursor (Django's errors still raised) unless something watches
    Django's: its cursor, execute wrappers and placeholder rewrite cost a batch of one row about 160 K instructions,
    more than any other step of it. With an execute wrapper installed or queries logged (tests, DEBUG) they go through
    Django's cursor as every other write does, so whatever watches sees them, and may refuse them."""
    if db.execute_wrappers or db.queries_logged:
        with db.cursor() as cursor:
            for insert, rows in inserts:
                insert.insert_rows(cursor, rows)
        return
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            for insert, rows in inserts:
                cursor.executemany(insert.driver_sql, rows)
        finally:
            cursor.close()


def _one_round_trip(db: Any) -> contextlib.AbstractContextManager[Any]:
    """On PostgreSQL, the statements sent inside go as one pipeline, one round trip (psycopg's own `executemany`
    makes one each); an error any of them meets is raised, as Django's, by the end of the block at the latest."""
    if db.vendor != "postgresql":
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(db.wrap_database_errors)
    stack.enter_context(db.connection.pipeline())
    return stack


class _BatchNodeStore:
    """The tree's stored nodes with those a batch adds, known before the batch's INSERT writes them.

    Every node an append reads is either one of the frontier of the tree the batch starts from (the perfect
    subtrees it decomposes into) or one the batch added before it. So the first read from the database takes
    every frontier node not known yet, and no later append of the batch reads the database again."""

    def __init__(self, stored: DatabaseNodeStore, size: int, known: dict[tuple[int, int], bytes]) -> None:
        self.stored = stored
        self.start = merkle.frontier(size)
        self.known = dict(known)

    def get_many(self, positions: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        known = self.known
        if any(position not in known for position in positions):
            wanted = dict.fromkeys(position for position in [*positions, *self.start] if position not in known)
            known.update(self.stored.get_many(list(wanted)))
        return {position: known[position] for position in positions if position in known}

    def put_many(self, nodes: Iterable[tuple[int, int, bytes]]) -> None:
        for level, index, digest in nodes:
            self.known[(level, index)] = digest


class _KnownFrontier:
    """The frontier nodes this process knows of the tree at the end of its last append, with that append's last seq
    and MAC. They serve the next append only if the chain head it reads under the lock is that very seq and MAC:
    the MAC chains every row before it, so the tree is then the same one (another process that appended since, or
    a transaction that rolled back, leaves another head). Appends are serialized by the chain lock; the three
    values are replaced together, in one assignment."""

    def __init__(self) -> None:
        self.state: tuple[int, str, dict[tuple[int, int], bytes]] = (0, GENESIS_MAC, {})

    def at(self, size: int, mac: str) -> dict[tuple[int, int], bytes]:
        known_size, known_mac, nodes = self.state
        return nodes if known_size == size and known_mac == mac else {}

    def keep(self, size: int, mac: str, known: Mapping[tuple[int, int], bytes]) -> None:
        self.state = (size, mac, {key: known[key] for key in merkle.frontier(size) if key in known})

    def forget(self) -> None:
        self.state = (0, GENESIS_MAC, {})


_FRONTIER = _KnownFrontier()


def _db_values(insert: _Insert, values: Iterable[Any], db: Any) -> list[Any]:
    """The values as the database takes them: text, whole numbers and bytes as they are (already what their columns
    hold), the others (the timestamp) through their conversion (`_conversion`)."""
    row = list(values)
    for index, convert in insert.converted:
        row[index] = convert(row[index], db)
    return row


def _conversion(field: models.Field) -> Callable[[Any, Any], Any]:
    """How a value of `field`, already what its `get_prep_value` gives (an aware datetime), goes to the database:
    the field's own conversion past that step, but for SQLite's times stored in UTC, which `_sqlite_utc_text`
    converts as Django does without its checks per value (about 9 us a row of Django's 10)."""
    if isinstance(field, models.DateTimeField) and connection.vendor == "sqlite" and connection.timezone_name == "UTC":
        return _sqlite_utc_text
    return functools.partial(field.get_db_prep_value, prepared=True)


def _sqlite_utc_text(value: datetime, db: Any) -> Any:
    """What Django's SQLite backend stores for an aware time (`adapt_datetimefield_value`: made naive in UTC, then
    `str()`): a time in UTC already, as the append's all are, only loses its zone."""
    if value.tzinfo is UTC:
        return str(value.replace(tzinfo=None))
    return db.ops.adapt_datetimefield_value(value)


def _row_time(now: datetime, *, stored: bool = True) -> tuple[str, str]:
    """`format_ts(now)` and SQLite's stored text of `now` (`_sqlite_utc_text`: 'YYYY-MM-DD HH:MM:SS.ffffff', with no
    fraction when it is zero, as `str()` writes it; "" unless `stored`), for a time in UTC of year 1000 or later
    (every append's).

    Formatting a time (`isoformat`, through C's printf) took about 19 K instructions a row; the rows of a batch fall
    in one second, so the texts of the second are kept (`_SECOND`, replaced whole, so threads share it safely) and a
    row formats only its microseconds. A time outside the kept second, later or earlier (the clock may step back),
    has its second's texts made again."""
    global _SECOND
    second = _SECOND
    if not second[0] <= now < second[1]:
        start = now.replace(microsecond=0)
        text = format_ts(start)
        # The last year a datetime holds may have no next second to end one: its times are not kept, but formatted.
        end = start + _ONE_SECOND if start.year < 9999 else start
        second = _SECOND = (start, end, text[:19], f"{text[:10]} {text[11:19]}")
    micro = now.microsecond
    if not stored:
        return f"{second[2]}.{micro:06d}Z", ""
    return f"{second[2]}.{micro:06d}Z", f"{second[3]}.{micro:06d}" if micro else second[3]


_ONE_SECOND = timedelta(seconds=1)
_SECOND = (datetime.min.replace(tzinfo=UTC), datetime.min.replace(tzinfo=UTC), "", "")


def kept_size() -> int:
    """The size the checkpoint kept beside the mirror saw: 0 when none is kept or it is not one we signed."""
    saved = kept.read_kept(settings.FORGE_AUDIT_LOG)
    return (signed_size(saved.note) or 0) if saved is not None else 0


def past_the_end(mirror_path: Path) -> tuple[int, Past, str | None]:
    """The database's last event, what the mirror holds past it, and what is wrong with that (None when
    nothing is, or it is what appends that rolled back leave). Hold the chain lock for a settled answer."""
    size, mac = chain_head()
    past = Mirror(mirror_path).past(size)
    return size, past, past.problem(size, mac, kept_size)


def committed_lines(first: int, last: int) -> list[str]:
    """The mirror lines of events first..last, from the database (read on the driver's cursor: another process's
    rows are copied into this one's mirror on the append path)."""
    attnames, sql = _rows_sql()
    return [_row_line(attnames, row)[1] for row in fastsql.fetchall(sql, (first, last))]


def _row_line(attnames: list[str], row: Sequence[Any]) -> tuple[AuditEvent, str]:
    """An event read as a row of `attnames` (`_rows_select`), and its mirror line."""
    event = fastsql.loaded(AuditEvent, attnames, list(row))
    event.ts = _stored_time(event.ts)
    return event, _stored_line(event)


def _stored_time(value: datetime | str) -> datetime:
    """A `ts` as the driver gives it, as the ORM loads it: SQLite's text (UTC, as Django stores it) made aware."""
    ts = datetime.fromisoformat(value) if isinstance(value, str) else value
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


class _Insert(NamedTuple):
    """The INSERT of whole rows of a model: its fields in column order, the positions of those whose values need
    converting with their conversion, and a getter of an instance's values in that order.

    On PostgreSQL a batch's rows go as one statement with a VALUES list of them all: the server parses, plans and
    runs one INSERT for the batch rather than one per row and per tree node (23 for a batch of eight rows, with
    psycopg's `executemany`), and its CPU is the machine's too. SQLite runs in the process: its `executemany`
    steps one prepared statement in C."""

    sql: str
    driver_sql: str  # `sql` in the driver's placeholder style (`fastsql.driver_sql`)
    fields: list[models.Field]
    converted: tuple[tuple[int, Callable[[Any, Any], Any]], ...]
    values_of: Callable[[Any], tuple[Any, ...]]
    one_statement: bool
    # The position of a time SQLite stores as UTC text, left out of `converted`: the append fills it from the time's
    # text kept for the row's second (`_row_time`), where converting took a formatting of the time of its own.
    utc_text_at: int | None

    def statement(self, rows: Sequence[Sequence[Any]]) -> tuple[str, list[Any]]:
        """The INSERT of `rows` as one statement, and its parameters."""
        return _rows_insert_sql(self.sql, len(rows)), [value for row in rows for value in row]

    def insert_rows(self, cursor: Any, rows: Sequence[Sequence[Any]]) -> None:
        if self.one_statement and len(rows) > 1:
            cursor.execute(_bound_on_the_client(cursor.db, *self.statement(rows)))
        else:
            cursor.executemany(self.sql, rows)


@cache
def _insert_sql(model: type[models.Model]) -> _Insert:
    fields = list(model._meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    # Bytes go to either driver as they are (a BLOB, a bytea), as the field's conversion (a `Binary` wrapper) sends
    # them.
    plain = (models.CharField, models.TextField, models.IntegerField, models.BinaryField)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})"
    converted = [(index, _conversion(field)) for index, field in enumerate(fields) if not isinstance(field, plain)]
    texts = [index for index, convert in converted if convert is _sqlite_utc_text]
    utc_text_at = texts[0] if len(texts) == 1 and model is AuditEvent else None  # the event's `ts`, on SQLite
    return _Insert(
        sql=sql,
        driver_sql=fastsql.driver_sql(sql),
        fields=fields,
        converted=tuple(item for item in converted if item[0] != utc_text_at),
        values_of=operator.attrgetter(*(field.attname for field in fields)),
        one_statement=connection.vendor == "postgresql",
        utc_text_at=utc_text_at,
    )


@cache
def _rows_insert_sql(sql: str, count: int) -> str:
    """`sql`, the INSERT of one row (`INSERT ... VALUES (%s, ...)`), made the INSERT of `count` rows."""
    row = sql[sql.rindex(" VALUES ") + len(" VALUES ") :]
    return f"{sql}{f', {row}' * (count - 1)}"


def _bound_on_the_client(db: Any, sql: str, params: list[Any]) -> str:
    """`sql` with `params` bound into it as psycopg's client-side cursor binds them (each value as its literal,
    `as_literal`), without its parse of the statement for placeholders: psycopg keeps that parse only for a statement
    of at most 50 parameters, so a batch of eight rows (about 160) was parsed with a regular expression every time,
    at a cost that grows with the rows. Sent with no parameters, the script goes as it is."""
    transformer = _TRANSFORMERS.get(db.connection)
    if transformer is None:  # one per connection: it keeps the dumper it found for each type
        transformer = _TRANSFORMERS[db.connection] = Transformer.from_context(db.connection)
    literals = tuple(b"NULL" if value is None else transformer.as_literal(value) for value in params)
    return (_client_template(sql) % literals).decode(db.connection.info.encoding)


_TRANSFORMERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


@cache
def _client_template(sql: str) -> bytes:
    """`sql` as a template for `bytes % literals` (its only `%` are its placeholders: `_insert_sql`)."""
    return sql.replace("%s", "%b").encode()


@cache
def _script_sql(*statements: str, commit: bool) -> str:
    """`statements` as one script, ending with COMMIT when `commit`."""
    return "; ".join([*statements, "COMMIT"] if commit else statements)


@cache
def _rows_select() -> tuple[list[str], str]:
    """The attribute names of an event's fields, and the SELECT of their columns from the events' table."""
    fields = AuditEvent._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    return [field.attname for field in fields], f"SELECT {columns} FROM {quote(AuditEvent._meta.db_table)}"


@cache
def _rows_sql() -> tuple[list[str], str]:
    """The attribute names of an event's fields, and the SELECT of the events in a range of seq, in seq order."""
    attnames, select = _rows_select()
    return attnames, fastsql.driver_sql(f"{select} WHERE seq >= %s AND seq <= %s ORDER BY seq")


@cache
def _locked_head_sql() -> str:
    """The chain lock and then the chain head, as one script (no parameters: a script goes whole)."""
    return f"{_locked_sql()} {_last_row_sql()}"


def _locked_sql() -> str:
    return f"SELECT pg_advisory_xact_lock({CHAIN_LOCK_ID:d});"


@cache
def _begun_catch_up_sql() -> str:
    """BEGIN, the chain lock, then every event from seq `{known}` on, `CATCH_UP_EVENTS` past it and one more (to
    tell that there are more), as `_rows_sql()` reads them: a template for `str.format`, the script has no
    parameters."""
    limit = CATCH_UP_EVENTS + 2
    return f"BEGIN; {_locked_sql()} {_rows_select()[1]} WHERE seq >= {{known:d}} ORDER BY seq LIMIT {limit:d}"


@cache
def _begun_locked_head_sql() -> str:
    """`_locked_head_sql()` in a transaction it begins (a script's statements after BEGIN run in its transaction,
    which stays open once the script ends)."""
    return f"BEGIN; {_locked_head_sql()}"


@cache
def _last_row_sql() -> str:
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    return f"SELECT seq, mac FROM {table} ORDER BY seq DESC LIMIT 1"


@cache
def _nodes_sql(count: int) -> str:
    table = connection.ops.quote_name(AuditTreeNode._meta.db_table)
    return fastsql.driver_sql(f"SELECT key, hash FROM {table} WHERE key IN ({', '.join(['%s'] * count)})")


# --- checkpoints -----------------------------------------------------------------------------------


def tree_size() -> int:
    last = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    return last or 0


def do_make_checkpoint() -> AuditCheckpoint | None:
    """Sign a checkpoint of the log as it is now; None when nothing was appended since the last one."""
    try:
        with transaction.atomic():
            lock_chain()
            size = tree_size()
            latest = AuditCheckpoint.objects.order_by("-size").first()
            if size == 0 or (latest is not None and latest.size >= size):
                return None
            return _store_checkpoint(size)
    except DatabaseError as exc:
        raise AuditUnavailable(str(exc)) from exc


def _store_checkpoint(
    size: int, after_commit: Callable[[Callable[[], None]], None] = transaction.on_commit
) -> AuditCheckpoint:
    store = DatabaseNodeStore()
    root = merkle.root(size, store)
    previous = AuditCheckpoint.objects.filter(size__lt=size).order_by("-size").first()
    if previous is not None:
        proof = merkle.consistency_proof(previous.size, size, store)
        if not merkle.verify_consistency(previous.size, size, bytes(previous.root), root, proof):
            # The stored tree no longer extends what was published: never sign over that.
            raise AuditUnavailable(f"the audit tree at {size} is inconsistent with checkpoint {previous.size}")
    note = sign(Checkpoint(origin=keys.origin(), size=size, root=root), keys.KEY_NAME, keys.signing_key())
    checkpoint = AuditCheckpoint(size=size, root=root, note=note, created_at=timezone.now())
    checkpoint.save(force_insert=True)
    after_commit(lambda: _keep_outside_the_database(note, size))
    return checkpoint


def _keep_outside_the_database(note: str, size: int) -> None:
    """Once the checkpoint is committed, keep it beside the mirror too (see `audit.kept`)."""
    try:
        kept.keep(settings.FORGE_AUDIT_LOG, note, size, signed_size)
    except OSError as exc:
        # The checkpoint is committed and served; the next one is kept again. Name the file, not a traceback.
        logger.error("could not keep audit checkpoint %s beside the mirror: %s", size, exc.strerror or exc)


def signed_checkpoint(note: bytes | str) -> Checkpoint:
    """The checkpoint a note commits to, once it checks out as signed by this server's audit key for this log."""
    return parse_and_verify(note, keys.KEY_NAME, keys.public_key(), origin=keys.origin())


def signed_size(note: bytes) -> int | None:
    try:
        return signed_checkpoint(note).size
    except CheckpointError:
        return None


def checkpoint_public_key() -> dict[str, str]:
    return {
        "key_name": keys.KEY_NAME,
        "origin": keys.origin(),
        "ed25519_public_key": base64.b64encode(keys.public_key_bytes()).decode(),
        "verifier_key": verifier_key_string(keys.KEY_NAME, keys.public_key()),
    }


def checkpoint_if_due(now: datetime | None = None) -> AuditCheckpoint | None:
    """Sign a checkpoint when the last one is older than FORGE_AUDIT_CHECKPOINT_EVERY's seconds."""
    seconds = settings.FORGE_AUDIT_CHECKPOINT_SECONDS
    if not seconds:
        return None
    now = now or timezone.now()
    latest = AuditCheckpoint.objects.order_by("-size").values_list("created_at", flat=True).first()
    if latest is not None and (now - latest).total_seconds() < seconds:
        return None
    return do_make_checkpoint()
