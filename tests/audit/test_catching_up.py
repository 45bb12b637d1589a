"""A batch on PostgreSQL catches up with what another process appended since this one's last append, in the script
that takes the chain lock: the events from there on give this process's mirror their lines and the tree's frontier
its nodes, so the batch stays two round trips where it took four (the head, the frontier's nodes, the mirror's
missing lines, the INSERTs). Another process is played here by appends to another mirror, after which this process's
memory of the chain (`_KnownFrontier`) is put back as its own last append left it."""

from __future__ import annotations

import pytest
from django.db import connection

from audit import services
from audit.models import AuditEvent, AuditTreeNode, EventKind
from audit.services import record
from tests.audit.helpers import append_events, appended_by_another_process, audit_verify, mirror_lines
from tests.audit.test_round_trips import GROUP_COMMITTED_APPEND_ROUND_TRIPS, sent_messages

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the catch-up script is PostgreSQL's"),
    pytest.mark.django_db(transaction=True),
]


def round_trips(sent: list[str]) -> int:
    return sent.count("Query") + sent.count("Sync")


def test_an_append_after_another_processs_appends_catches_up_in_its_two_round_trips(settings, tmp_path, mirror_path):
    append_events(3)
    appended_by_another_process(settings, tmp_path, 5)

    sent = sent_messages(tmp_path / "trace", lambda: record(EventKind.TOOL_CALL, tool="test.after"))

    assert round_trips(sent) == GROUP_COMMITTED_APPEND_ROUND_TRIPS, sent
    stored = list(AuditEvent.objects.order_by("seq"))
    assert [event.seq for event in stored] == list(range(1, 10))
    # This process's mirror holds every event, the other process's copied in from the catch-up's rows.
    assert mirror_lines(mirror_path) == [services._stored_line(event) for event in stored]
    # The frontier carried over the other process's events is the stored tree's: the next append needs no node read.
    size, mac, nodes = services._FRONTIER.state
    assert (size, mac) == (9, stored[-1].mac)
    assert nodes == {
        (node.level, node.index): bytes(node.hash)
        for node in AuditTreeNode.objects.all()
        if (node.level, node.index) in services.merkle.frontier(9)
    }
    assert audit_verify().startswith("ok 9 events")


def test_more_events_than_a_catch_up_reads_are_taken_as_a_process_that_knew_nothing_takes_them(
    settings, tmp_path, mirror_path, monkeypatch
):
    monkeypatch.setattr(services, "CATCH_UP_EVENTS", 2)
    services._begun_catch_up_sql.cache_clear()
    try:
        append_events(2)
        appended_by_another_process(settings, tmp_path, 4)

        sent = sent_messages(tmp_path / "trace", lambda: record(EventKind.TOOL_CALL, tool="test.after"))
    finally:
        services._begun_catch_up_sql.cache_clear()

    assert round_trips(sent) > GROUP_COMMITTED_APPEND_ROUND_TRIPS, sent  # the head alone, then the nodes and lines
    stored = list(AuditEvent.objects.order_by("seq"))
    assert [event.seq for event in stored] == list(range(1, 8))
    assert mirror_lines(mirror_path) == [services._stored_line(event) for event in stored]
    assert audit_verify().startswith("ok 7 events")


def test_a_chain_not_as_this_process_left_it_is_not_caught_up_with(settings, tmp_path, mirror_path):
    append_events(3)
    appended_by_another_process(settings, tmp_path, 2)
    size, _, nodes = services._FRONTIER.state
    services._FRONTIER.state = (size, "f" * 64, nodes)  # not the MAC of event 3: what it remembers is not the chain

    record(EventKind.TOOL_CALL, tool="test.after")

    stored = list(AuditEvent.objects.order_by("seq"))
    assert [event.seq for event in stored] == list(range(1, 7))
    assert stored[-1].prev_mac == stored[-2].mac
    assert mirror_lines(mirror_path) == [services._stored_line(event) for event in stored]
    assert audit_verify().startswith("ok 6 events")
