"""Group commit: rows appended outside a transaction by callers that arrive together share one transaction and
one mirror fsync, each caller returns only once its own row is committed, and a batch that cannot be written
fails every caller in it with nothing appended. Inside a transaction a row still commits with the caller's
changes, or not at all."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction
from psycopg import pq

from audit import services
from audit.models import AuditEvent, EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable
from forge_core.sqlite import base as sqlite_base
from tests.audit.helpers import audit_verify, mirror_lines

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 8
EACH = 25


def run_writers(target, threads: int = THREADS) -> list:
    """Start `threads` writers at once; each returns what its target gave (or raised)."""
    start = threading.Barrier(threads)
    results: list = [None] * threads

    def writer(index: int) -> None:
        start.wait()
        try:
            results[index] = target(index)
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers)
    return results


def led_then_joined(leading: threading.Event, others: int) -> tuple[list, list]:
    """A first caller records and, once `leading` is set (its batch under way), `others` callers record too: the
    first's seq and theirs, each caller's `called_by` being `w<index>`."""
    first: list = []
    leader = threading.Thread(target=lambda: first.append(record(EventKind.TOOL_CALL, called_by="first").seq))
    leader.start()
    assert leading.wait(10)
    results = run_writers(lambda index: record(EventKind.TOOL_CALL, called_by=f"w{index}").seq, threads=others)
    leader.join(timeout=10)
    return first, results


@pytest.fixture
def counted_fsyncs(monkeypatch) -> list[int]:
    """Every fsync of this process, counted (the mirror's are what a batch shares)."""
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_rows_from_many_threads_make_one_gapless_chain_and_each_caller_gets_its_committed_row(mirror_path):
    def append(index: int) -> list[int]:
        return [
            record(EventKind.TOOL_CALL, tool="test.group", arguments={"n": n}, called_by=f"w{index}").seq
            for n in range(EACH)
        ]

    results = run_writers(append)

    seqs = sorted(seq for result in results for seq in result)
    assert seqs == list(range(1, THREADS * EACH + 1))
    for index, result in enumerate(results):
        stored = AuditEvent.objects.filter(seq__in=result).values_list("called_by", flat=True)
        assert set(stored) == {f"w{index}"}
        assert result == sorted(result)  # a caller's rows keep its order
    assert audit_verify().startswith("ok")
    assert len(mirror_lines(mirror_path)) == THREADS * EACH


def test_callers_that_arrive_together_share_fsyncs(counted_fsyncs):
    run_writers(lambda index: [record(EventKind.TOOL_CALL, tool="test.group", called_by="w") for _ in range(EACH)])

    # One fsync per row without grouping; while a batch is written the others queue for the next one.
    assert AuditEvent.objects.count() == THREADS * EACH
    assert len(counted_fsyncs) < THREADS * EACH


def test_callers_queued_behind_a_batch_are_written_as_the_next_batch_and_each_is_woken_with_its_own_row(monkeypatch):
    """The rows that queue while a batch is written go as one batch; its leader wakes the first of its callers
    and each wakes the next, so all of them return, each with its own committed row."""
    group = services._GroupCommit()
    monkeypatch.setattr(services, "_GROUP", group)
    others = THREADS - 1
    queued, inside = threading.Event(), threading.Event()

    class WatchedMutex:
        """The group's mutex, telling once every other caller's row waits (checked while it is held)."""

        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            if len(group.waiting) == others:
                queued.set()
            self.lock.release()

    group.mutex = WatchedMutex()  # type: ignore[assignment]
    batches: list[int] = []
    real_append = services._append

    def append(events, *rest) -> None:
        if not batches:  # the first batch holds until every other caller queues behind it
            inside.set()
            assert queued.wait(10)
        batches.append(len(events))
        real_append(events, *rest)

    monkeypatch.setattr(services, "_append", append)
    first, results = led_then_joined(inside, others)

    assert batches == [1, others]
    assert first == [1]
    assert sorted(results) == list(range(2, THREADS + 1))
    for index, seq in enumerate(results):
        assert AuditEvent.objects.get(seq=seq).called_by == f"w{index}"
    assert audit_verify().startswith("ok")


def test_callers_that_arrive_while_a_leader_waits_for_the_chain_lock_join_its_batch(monkeypatch):
    """A leader takes its batch's rows once it holds the chain lock (on PostgreSQL another process's batch may hold
    it): rows that queued meanwhile go with its batch rather than wait for the next one."""
    group = services._GroupCommit()
    monkeypatch.setattr(services, "_GROUP", group)
    waiting_for_the_lock = threading.Event()
    real_begin = services._begin_alone

    def begin(db):
        waiting_for_the_lock.set()
        deadline = time.monotonic() + 10
        while len(group.waiting) < THREADS and time.monotonic() < deadline:  # the others queue behind it meanwhile
            time.sleep(0.001)
        return real_begin(db)

    monkeypatch.setattr(services, "_begin_alone", begin)
    batches: list[int] = []
    real_append = services._append

    def append(events, *rest) -> None:
        batches.append(len(events))
        real_append(events, *rest)

    monkeypatch.setattr(services, "_append", append)
    first, results = led_then_joined(waiting_for_the_lock, THREADS - 1)

    assert batches == [THREADS]
    assert first == [1]
    assert sorted(results) == list(range(2, THREADS + 1))
    assert audit_verify().startswith("ok")


def test_a_leader_stopped_before_it_took_its_rows_fails_only_its_own_and_the_next_caller_leads(monkeypatch):
    group = services._GroupCommit()
    monkeypatch.setattr(services, "_GROUP", group)
    real_begin = services._begin_alone
    begins: list[int] = []

    def begin(db):
        begins.append(len(group.waiting))
        if len(begins) == 1:
            deadline = time.monotonic() + 10
            while len(group.waiting) < 2 and time.monotonic() < deadline:  # another caller queues meanwhile
                time.sleep(0.001)
            raise DatabaseError("the connection was lost")
        return real_begin(db)

    monkeypatch.setattr(services, "_begin_alone", begin)
    outcome: list = []
    leader = threading.Thread(target=lambda: outcome.append(_recorded_or_refused("first")))
    leader.start()
    deadline = time.monotonic() + 10
    while not begins and time.monotonic() < deadline:
        time.sleep(0.001)

    [second] = run_writers(lambda index: record(EventKind.TOOL_CALL, called_by="second").seq, threads=1)
    leader.join(timeout=10)

    assert outcome == ["refused"]
    assert second == 1  # not failed with the batch it never joined: it led the next one
    assert audit_verify().startswith("ok")


def _recorded_or_refused(called_by: str) -> str:
    try:
        record(EventKind.TOOL_CALL, called_by=called_by)
    except AuditUnavailable:
        return "refused"
    finally:
        connection.close()
    return "recorded"


def test_a_batch_that_cannot_be_written_fails_every_caller_in_it_and_appends_nothing(settings, tmp_path):
    record(EventKind.TOOL_CALL, tool="test.before")
    blocked = tmp_path / "blocked" / "audit.jsonl"
    blocked.mkdir(parents=True)
    settings.FORGE_AUDIT_LOG = blocked

    results = run_writers(lambda index: record(EventKind.TOOL_CALL, tool="test.group"))

    assert all(isinstance(result, AuditUnavailable) for result in results)
    assert list(AuditEvent.objects.values_list("tool", flat=True)) == ["test.before"]


def test_a_database_refusal_fails_the_batch_and_the_next_caller_appends_again(mirror_path):
    def refuse(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT") and "audit_auditevent" in sql:
            raise DatabaseError("refused by the test")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse), pytest.raises(AuditUnavailable):
        record(EventKind.TOOL_CALL, tool="test.refused")

    assert record(EventKind.TOOL_CALL, tool="test.after").seq == 1
    assert audit_verify().startswith("ok")


def in_a_transaction(db) -> bool:
    """Whether the driver's connection under Django's `db` has a transaction open (Django's own state aside)."""
    if db.vendor == "postgresql":
        return db.connection.info.transaction_status != pq.TransactionStatus.IDLE
    return db.connection.in_transaction


def test_a_refused_batch_leaves_no_transaction_open_and_the_write_lock_free(mirror_path):
    """A batch begins and commits its own transaction, outside Django's atomic(): one that fails is rolled back
    there, so the next statement of the thread does not run inside what it left."""

    def refuse(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT") and "audit_audittreenode" in sql:
            raise DatabaseError("refused by the test")
        return execute(sql, params, many, context)

    record(EventKind.TOOL_CALL, tool="test.first")
    with connection.execute_wrapper(refuse), pytest.raises(AuditUnavailable):
        record(EventKind.TOOL_CALL, tool="test.refused")

    assert not in_a_transaction(connection)
    assert not sqlite_base.WRITE_LOCK.locked()
    assert list(AuditEvent.objects.values_list("tool", flat=True)) == ["test.first"]
    assert record(EventKind.TOOL_CALL, tool="test.after").seq == 2
    assert audit_verify().startswith("ok 2 events")


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's batches send their INSERTs on the driver's cursor")
def test_a_batch_refused_on_the_drivers_cursor_fails_closed_and_leaves_no_transaction_open(mirror_path):
    """With nothing watching Django's cursor, a SQLite batch's INSERTs go on the driver's: a refusal there (a trigger,
    since no execute wrapper sees them) still fails the batch, rolls it back and lets go of the write lock."""
    record(EventKind.TOOL_CALL, tool="test.first")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TRIGGER refuse_nodes BEFORE INSERT ON audit_audittreenode BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    try:
        assert not connection.execute_wrappers and not connection.queries_logged
        with pytest.raises(AuditUnavailable, match="refused"):
            record(EventKind.TOOL_CALL, tool="test.refused")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER refuse_nodes")

    assert not in_a_transaction(connection)
    assert not sqlite_base.WRITE_LOCK.locked()
    assert record(EventKind.TOOL_CALL, tool="test.after").seq == 2
    assert audit_verify().startswith("ok 2 events")


def test_a_checkpoint_due_in_a_batch_is_kept_beside_the_mirror_once_committed(settings, mirror_path):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 2

    record(EventKind.TOOL_CALL, tool="test.first")
    record(EventKind.TOOL_CALL, tool="test.second")

    assert services.kept_size() == 2
    assert not in_a_transaction(connection)


def test_inside_a_transaction_the_row_commits_with_the_callers_changes_or_not_at_all():
    with pytest.raises(RuntimeError), transaction.atomic():
        record(EventKind.TOOL_CALL, tool="test.rolled_back")
        raise RuntimeError("the caller's change fails")

    assert not AuditEvent.objects.exists()
    with transaction.atomic():
        row = record(EventKind.TOOL_CALL, tool="test.committed")
    assert AuditEvent.objects.get().seq == row.seq == 1


def test_a_checkpoint_that_falls_inside_a_batch_is_signed(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 10

    run_writers(lambda index: [record(EventKind.TOOL_CALL, tool="test.group") for _ in range(EACH)])

    from audit.models import AuditCheckpoint

    sizes = sorted(AuditCheckpoint.objects.values_list("size", flat=True))
    assert sizes == list(range(10, THREADS * EACH + 1, 10))
    assert services.tree_size() == THREADS * EACH


def test_a_batch_stopped_by_an_unexpected_error_fails_its_callers_rather_than_acknowledging_them(monkeypatch):
    def broken(events):
        raise TypeError("a bug in the append")

    monkeypatch.setattr(services, "_append", broken)

    results = run_writers(lambda index: record(EventKind.TOOL_CALL, tool="test.group"), threads=4)

    assert all(isinstance(result, AuditUnavailable) for result in results)
    assert not AuditEvent.objects.exists()


def mirror_fsyncs(fsyncs: list[int], mirror_path) -> int:
    """How many of the counted fsyncs were of the mirror file."""
    return sum(1 for fd in fsyncs if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(mirror_path))


def test_a_transaction_that_appends_several_rows_syncs_the_mirror_once_before_it_commits(counted_fsyncs, mirror_path):
    record(EventKind.TOOL_CALL, tool="test.first")  # the mirror exists and is open
    counted_fsyncs.clear()

    with transaction.atomic():
        for step in ("decided", "executing", "verified"):
            record(EventKind.TOOL_CALL, tool=f"test.{step}")
        assert mirror_fsyncs(counted_fsyncs, mirror_path) == 0  # written, not synced yet
        assert len(mirror_lines(mirror_path)) == 4

    assert mirror_fsyncs(counted_fsyncs, mirror_path) == 1
    assert AuditEvent.objects.count() == 4
    assert audit_verify().startswith("ok")


def test_rows_whose_mirror_lines_cannot_be_synced_are_not_committed(monkeypatch, mirror_path):
    record(EventKind.TOOL_CALL, tool="test.first")
    real = os.fsync

    def failing(fd: int) -> None:
        if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(mirror_path):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(DatabaseError, match="cannot sync the audit mirror"), transaction.atomic():
        record(EventKind.TOOL_CALL, tool="test.in_a_transaction")
    with pytest.raises(AuditUnavailable, match="cannot sync the audit mirror"):
        record(EventKind.TOOL_CALL, tool="test.group_committed")
    monkeypatch.setattr(os, "fsync", real)

    assert list(AuditEvent.objects.values_list("tool", flat=True)) == ["test.first"]
    assert record(EventKind.TOOL_CALL, tool="test.after").seq == 2  # the lines left behind are set aside
    assert audit_verify().startswith("ok")


def test_record_looks_its_threads_connection_up_through_django_once_and_each_thread_has_its_own(monkeypatch):
    lookups: list[int] = []
    handler = type(connections)
    real = handler.__getitem__

    def getitem(self, alias):
        if alias == DEFAULT_DB_ALIAS and sys._getframe(1).f_code.co_name in {"record", "_thread_connection"}:
            lookups.append(threading.get_ident())
        return real(self, alias)

    monkeypatch.setattr(handler, "__getitem__", getitem)

    def append(index: int):
        for n in range(5):
            record(EventKind.TOOL_CALL, tool="test.lookups", arguments={"n": n}, called_by=f"w{index}")
        return threading.get_ident(), services._thread_connection()

    results = run_writers(append, threads=3)

    assert [lookups.count(ident) for ident, _ in results] == [1, 1, 1]
    assert len({id(db) for _, db in results} | {id(real(connections, DEFAULT_DB_ALIAS))}) == 4
    assert AuditEvent.objects.count() == 15
