"""What the append path takes without asking the database the usual way gives what the usual way gives: the lines
of rows another process committed (read on the driver's cursor), the chain head read with the lock, and the tree
nodes a process keeps from its last append, which a head it did not leave must set aside."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import IntegrityError, connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import merkle, services
from audit.models import AuditEvent, AuditTreeNode, EventKind
from audit.services import committed_lines, event_line, record
from forge_core import fastsql
from tests.audit.helpers import append_events, audit_verify, mirror_lines


def stored_nodes() -> dict[tuple[int, int], bytes]:
    return {(node.level, node.index): bytes(node.hash) for node in AuditTreeNode.objects.all()}


def nodes_recomputed() -> dict[tuple[int, int], bytes]:
    """Every tree node, recomputed from the rows' lines the general way (`event_line`)."""
    store = _Store()
    for size, event in enumerate(AuditEvent.objects.order_by("seq")):
        store.put_many(merkle.nodes_for_append(size, merkle.leaf_hash(event_line(event).encode()), store))
    return dict(store.nodes)


class _Store:
    def __init__(self) -> None:
        self.nodes: dict[tuple[int, int], bytes] = {}

    def get_many(self, positions):
        return {position: self.nodes[position] for position in positions}

    def put_many(self, nodes):
        for level, index, digest in nodes:
            self.nodes[(level, index)] = digest


@pytest.mark.django_db
def test_committed_lines_are_the_rows_event_lines_whatever_the_fields_hold():
    record(EventKind.TOOL_CALL, tool='t\u00e9st "quoted"', arguments={"\u2603": ["x\n", 1.5, None]}, outcome="ok")
    record(EventKind.SESSION_OPENED, called_by="a\\b", session="s\t", client_label="\U0001f600", project="p")
    append_events(5)

    assert committed_lines(1, 7) == [event_line(event) for event in AuditEvent.objects.order_by("seq")]
    assert committed_lines(3, 4) == [event_line(event) for event in AuditEvent.objects.filter(seq__in=[3, 4])]


@pytest.mark.django_db
def test_rows_another_process_appended_are_copied_into_this_mirror_as_their_event_lines(settings, tmp_path):
    append_events(2)
    mine = settings.FORGE_AUDIT_LOG
    settings.FORGE_AUDIT_LOG = tmp_path / "other" / "audit.jsonl"  # another process, with a mirror of its own
    record(EventKind.TOOL_CALL, tool="other.process", arguments={"\u00e9": "\u2603"}, session="s")
    append_events(3)
    settings.FORGE_AUDIT_LOG = mine

    record(EventKind.TOOL_CALL, tool="this.process")

    assert mirror_lines(mine) == [event_line(event) for event in AuditEvent.objects.order_by("seq")]


@pytest.mark.django_db
def test_the_head_read_with_the_lock_is_the_chain_head():
    with transaction.atomic():
        assert services.locked_chain_head() == services.chain_head() == (0, services.GENESIS_MAC)
    last = append_events(3)[-1]
    with transaction.atomic():
        assert services.locked_chain_head() == services.chain_head() == (3, last.mac)


@pytest.mark.django_db
def test_appends_with_the_kept_frontier_store_the_nodes_appends_without_it_store(mirror_path):
    for number in range(37):
        if number % 5 == 0:
            services._FRONTIER.forget()
        record(EventKind.TOOL_CALL, tool="test.frontier", arguments={"number": number})
    with transaction.atomic():  # a batch of several rows, from the kept frontier
        record(EventKind.TOOL_CALL, tool="test.in_transaction")
        record(EventKind.TOOL_CALL, tool="test.in_transaction")

    assert stored_nodes() == nodes_recomputed()
    assert mirror_lines(mirror_path) == [event_line(event) for event in AuditEvent.objects.order_by("seq")]
    assert audit_verify().startswith("ok 39 events")


@pytest.mark.django_db
def test_a_frontier_kept_for_another_head_is_not_used(mirror_path):
    append_events(3)
    kept = services._FRONTIER.state
    assert kept[0] == 3 and kept[2]
    services._FRONTIER.forget()  # another process appends: this one's frontier no longer matches the head
    append_events(4)
    services._FRONTIER.state = (kept[0], kept[1], {key: b"\xff" * 32 for key in kept[2]})  # wrong, were it read

    append_events(9)

    assert stored_nodes() == nodes_recomputed()
    assert audit_verify().startswith("ok 16 events")


@pytest.mark.django_db
def test_a_frontier_left_by_a_rolled_back_append_is_not_used():
    append_events(3)
    with pytest.raises(RuntimeError), transaction.atomic():
        append_events(2)
        raise RuntimeError("the action failed after its audit rows were written")
    assert services._FRONTIER.state[0] == 5

    append_events(6)

    assert stored_nodes() == nodes_recomputed()
    assert audit_verify().startswith("ok 9 events")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the advisory lock is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_head_read_after_waiting_for_the_lock_sees_the_append_that_held_it():
    append_events(1)
    holding, seen = threading.Event(), []

    def hold_the_lock_and_append() -> None:
        try:
            with transaction.atomic():
                services._append(
                    [fastsql.built(AuditEvent, kind="tool_call", tool="holder")],
                    services.locked_chain_head(),
                    connection,
                )
                holding.set()
                time.sleep(0.3)
        finally:
            connection.close()

    def read_the_head() -> None:
        try:
            with transaction.atomic():
                seen.append(services.locked_chain_head())
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_lock_and_append)
    holder.start()
    assert holding.wait(10)
    reader = threading.Thread(target=read_the_head)
    reader.start()
    holder.join()
    reader.join()

    last = AuditEvent.objects.order_by("-seq").first()
    assert last is not None and last.tool == "holder"
    assert seen == [(2, last.mac)]


@pytest.mark.django_db(transaction=True)
def test_a_row_the_database_refuses_fails_the_append_with_djangos_error_and_writes_no_line(mirror_path):
    append_events(1)
    lines = mirror_lines(mirror_path)

    with pytest.raises(IntegrityError), transaction.atomic():  # a stale head: seq 1 is taken
        services._append(
            [fastsql.built(AuditEvent, kind="tool_call", tool="stale")], (0, services.GENESIS_MAC), connection
        )

    assert mirror_lines(mirror_path) == lines
    assert list(AuditEvent.objects.values_list("seq", flat=True)) == [1]
    record(EventKind.TOOL_CALL, tool="after")
    assert audit_verify().startswith("ok 2 events")


@pytest.mark.django_db
def test_an_appended_rows_time_and_tree_nodes_are_stored_as_djangos_own_conversions_store_them():
    row = record(EventKind.TOOL_CALL, tool="timed")
    append_events(6)

    # The ORM converts the looked-up time and hash its own way: a row stored otherwise is not found.
    assert list(AuditEvent.objects.filter(ts=row.ts).values_list("seq", flat=True)) == [row.seq]
    for (level, index), digest in stored_nodes().items():
        assert AuditTreeNode.objects.filter(level=level, index=index, hash=digest).exists()
    assert stored_nodes() == nodes_recomputed()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's storage classes")
@pytest.mark.django_db
def test_tree_node_hashes_are_stored_on_sqlite_as_blobs_of_their_bytes():
    append_events(3)
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT typeof(hash), length(hash) FROM audit_audittreenode")
        assert cursor.fetchall() == [("blob", 32)]
    assert stored_nodes() == nodes_recomputed()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's stored text of a time")
@pytest.mark.parametrize(
    "ts",
    [
        datetime(2026, 12, 5, 4, 5, 6, 789012, tzinfo=UTC),
        datetime(2026, 12, 5, 4, 5, 6, tzinfo=UTC),  # no fraction: str() leaves it out, as Django's text does
        datetime(2026, 12, 5, 5, 5, 6, 7, tzinfo=timezone(timedelta(hours=1))),  # not UTC: Django's own way
    ],
)
def test_sqlite_times_go_to_the_database_as_djangos_conversion_sends_them(ts):
    field = AuditEvent._meta.get_field("ts")

    assert services._sqlite_utc_text(ts, connection) == field.get_db_prep_value(ts, connection, prepared=True)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's stored text of a time")
@settings(max_examples=300, deadline=None)
@given(ts=st.datetimes(min_value=datetime(1000, 1, 1), timezones=st.just(UTC)))
def test_sqlite_times_taken_from_the_lines_text_are_djangos_conversion_of_them(ts):
    field = AuditEvent._meta.get_field("ts")

    expected = field.get_db_prep_value(ts, connection, prepared=True)
    assert services._row_time(ts) == (services.format_ts(ts), expected)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's stored text of a time")
def test_row_times_in_one_second_after_it_and_before_it_have_their_own_texts():
    field = AuditEvent._meta.get_field("ts")
    second = datetime(2026, 12, 6, 4, 59, 59, tzinfo=UTC)
    micros = [0, 1, 999_999, 1_000_000, 1_000_001, -1, 500_000, 2_000_000, 0]  # the clock may step back
    times = [second + timedelta(microseconds=micro) for micro in micros]
    times += [datetime.max.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC, microsecond=0), times[0]]

    texts = [services._row_time(ts) for ts in times]

    assert texts == [(services.format_ts(ts), field.get_db_prep_value(ts, connection, prepared=True)) for ts in times]
    assert services._row_time(times[0], stored=False) == (services.format_ts(times[0]), "")


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's stored text of a time")
@pytest.mark.django_db
@pytest.mark.parametrize("microsecond", [0, 7, 789012])
def test_an_appended_rows_time_is_stored_as_django_stores_it_whatever_its_fraction(monkeypatch, microsecond):
    at = datetime(2026, 12, 6, 2, 3, 4, microsecond, tzinfo=UTC)

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):
            return at

    monkeypatch.setattr(services, "datetime", Clock)
    row = record(EventKind.TOOL_CALL, tool="timed")

    with connection.cursor() as cursor:
        cursor.execute("SELECT CAST(ts AS TEXT) FROM audit_auditevent WHERE seq = %s", [row.seq])  # the stored text
        stored = cursor.fetchone()[0]
    assert stored == AuditEvent._meta.get_field("ts").get_db_prep_value(at, connection, prepared=True)
    assert AuditEvent.objects.get(ts=at).seq == row.seq
