"""The SQLite backend's write lock inside the process (forge_core.sqlite): a transaction holds it from BEGIN to
COMMIT or ROLLBACK, the next writer of the process waits on it rather than in SQLite's busy handler, and it is
let go however the transaction ends."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection, transaction

from audit.models import EventKind
from audit.services import record
from forge_core.sqlite.base import WRITE_LOCK

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "forge_core.sqlite", reason="the write lock is the SQLite backend's"
    ),
]

BOUND = 30


def test_a_transaction_holds_the_lock_until_it_commits():
    assert not WRITE_LOCK.locked()
    with transaction.atomic():
        assert WRITE_LOCK.locked()
        with transaction.atomic():  # a savepoint takes nothing more
            assert WRITE_LOCK.locked()
    assert not WRITE_LOCK.locked()


def test_the_lock_is_let_go_when_the_transaction_rolls_back():
    with pytest.raises(RuntimeError), transaction.atomic():
        raise RuntimeError("the change fails")
    assert not WRITE_LOCK.locked()


def test_a_second_writer_waits_for_the_first_and_both_commit():
    holding, release, entered = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with transaction.atomic():
            record(EventKind.TOOL_CALL, tool="test.first")
            holding.set()
            release.wait(BOUND)
        connection.close()

    def second() -> None:
        holding.wait(BOUND)
        with transaction.atomic():
            entered.set()
            record(EventKind.TOOL_CALL, tool="test.second")
        connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert holding.wait(BOUND)
    assert not entered.wait(0.2)  # the second writer is held at BEGIN while the first is open
    release.set()
    for thread in threads:
        thread.join(BOUND)
    assert entered.is_set()
    from audit.models import AuditEvent

    assert list(AuditEvent.objects.order_by("seq").values_list("tool", flat=True)) == ["test.first", "test.second"]


def test_many_writers_of_one_process_all_commit():
    failures: list[Exception] = []

    def writer(index: int) -> None:
        try:
            for number in range(20):
                with transaction.atomic():
                    record(EventKind.TOOL_CALL, tool="test.many", arguments={"w": index, "n": number})
        except Exception as exc:
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert failures == []
    from audit.models import AuditEvent

    assert AuditEvent.objects.count() == 160
