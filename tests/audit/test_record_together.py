"""`record_together`: several events of one transaction appended as one batch, in order, fail closed; and
`audit.together.audited_together`, which gathers a contract move's rows for it."""

from __future__ import annotations

import contextlib
import json

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent, EventKind
from audit.services import record, record_together
from audit.together import audit_row, audited_together
from forge_core.errors import AuditUnavailable
from tests.audit.helpers import audit_verify, mirror_lines

pytestmark = pytest.mark.django_db(transaction=True)


def entries(*outcomes: str) -> list[dict]:
    return [
        {"kind": EventKind.TOOL_CALL, "tool": "t", "arguments": {"token": "secret"}, "outcome": o} for o in outcomes
    ]


def audit_inserts(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in queries.captured_queries if "INSERT INTO" in query["sql"]]


def test_the_events_of_a_transaction_are_appended_in_order_with_one_insert_of_rows_and_one_of_nodes(mirror_path):
    record(EventKind.TOOL_CALL, outcome="before")
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        together = record_together(entries("first", "second", "third"))

    assert len(audit_inserts(queries)) == 2
    stored = list(AuditEvent.objects.order_by("seq"))
    assert [(event.seq, event.outcome) for event in stored] == [
        (1, "before"),
        (2, "first"),
        (3, "second"),
        (4, "third"),
    ]
    assert [event.mac for event in together] == [event.mac for event in stored[1:]]
    assert json.loads(stored[1].arguments_json)["token"] == "[redacted]"
    assert [json.loads(line)["mac"] for line in mirror_lines(mirror_path)] == [event.mac for event in stored]
    assert audit_verify().startswith("ok 4 events")


def test_outside_a_transaction_each_event_is_recorded_on_its_own(mirror_path):
    together = record_together(entries("first", "second"))

    assert [event.outcome for event in AuditEvent.objects.order_by("seq")] == ["first", "second"]
    assert [event.seq for event in together] == [1, 2]


def test_an_unknown_kind_among_them_is_refused_and_none_is_appended():
    with pytest.raises(ValueError, match="not an audit event kind"), transaction.atomic():
        record_together([*entries("first"), {"kind": "tool_called"}])

    assert AuditEvent.objects.count() == 0


def test_when_the_batch_cannot_be_written_the_transaction_that_asked_commits_nothing(cast):
    def refuse_audit_inserts(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT") and "audit_auditevent" in sql:
            raise DatabaseError("the audit table cannot be written (refused by the test)")
        return execute(sql, params, many, context)

    count = AuditEvent.objects.count()
    with pytest.raises(AuditUnavailable), connection.execute_wrapper(refuse_audit_inserts), transaction.atomic():
        cast.operator.user.first_name = "changed"
        cast.operator.user.save(update_fields=["first_name"])
        record_together(entries("first", "second"))

    assert AuditEvent.objects.count() == count
    cast.operator.user.refresh_from_db()
    assert cast.operator.user.first_name != "changed"


def test_rows_kept_by_an_inner_block_that_rolls_back_to_its_savepoint_are_not_appended(mirror_path):
    with transaction.atomic(), audited_together():
        audit_row(**entries("the move that stays")[0])
        with contextlib.suppress(RuntimeError), transaction.atomic(), audited_together():
            audit_row(**entries("the move rolled back")[0])
            raise RuntimeError("the inner move fails; its caller goes on")
        audit_row(**entries("the next move")[0])

    assert [event.outcome for event in AuditEvent.objects.order_by("seq")] == ["the move that stays", "the next move"]
    assert audit_verify().startswith("ok 2 events")
