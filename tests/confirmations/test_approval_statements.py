"""What one approval costs the database: the statements from an operator's approve to the confirmation executed
(decision, the contract's record, its EXECUTING and VERIFIED moves, every audit row), counted with Django's query
capture, as a request makes them (its own transactions, a user read fresh). On PostgreSQL each statement is a
round trip, and the approval's latency is mostly these; the count is pinned so a change that adds one says so."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from confirmations.api import ConfirmationDetail
from confirmations.models import ConfirmationState, Contract
from confirmations.services import do_approve_confirmation
from tests.confirmations.operator_helpers import ask
from tests.conftest import Cast

# The decision 8 (one transaction: the locked record, the project's row read once for the decider's rights and the
# decider's permissions in one read, the move and its audit row), the decision seal read back 1, prepare 9 (the
# project's registration read once for the whole change, then one transaction: record, PREPARING, the PREPARED move
# on the record it has just written, their two audit rows appended together), EXECUTING 9 (the reservation one
# insert that returns its row), the file's read, write and read-back none (they check the registration read in
# prepare), VERIFIED with the project's new revision and the confirmation executed 12 (the confirmation moved by one
# UPDATE from approved; the contract's, the project's and the confirmation's audit rows together), after the commit 2
# (resource subscribers, an approval task). The same on SQLite and PostgreSQL.
APPROVAL_STATEMENTS = 41

pytestmark = pytest.mark.django_db(transaction=True)


def approval_statements(cast: Cast, project) -> list[str]:
    warm = ask(cast.caretaker, project, name="warm")
    do_approve_confirmation(warm.pk, acting_user=cast.operator.user)  # caches of the process, as a server has
    pending = ask(cast.caretaker, project)
    operator = User.objects.get(pk=cast.operator.user.pk)  # a request's user: no permissions cached yet
    with CaptureQueriesContext(connection) as queries:
        done = do_approve_confirmation(pending.pk, acting_user=operator)
    assert done.state == ConfirmationState.EXECUTED, done.outcome
    return [query["sql"] for query in queries.captured_queries]


def test_an_approval_to_its_outcome_sends_a_pinned_number_of_statements(cast, project):
    statements = approval_statements(cast, project)

    if os.environ.get("FORGE_PRINT_STATEMENTS"):
        for sql, count in Counter(statements).most_common():
            print(f"{count:3d} x {sql[:160]}")
    assert len(statements) == APPROVAL_STATEMENTS, (
        f"one approval sent {len(statements)} statements, not the {APPROVAL_STATEMENTS} pinned: see which with "
        "FORGE_PRINT_STATEMENTS=1 (pytest -s); remove what is redundant, or pin the new count and say why"
    )


def test_the_approval_answers_with_what_it_holds_without_reading_again(cast, project):
    pending = ask(cast.caretaker, project)
    done = do_approve_confirmation(pending.pk, acting_user=User.objects.get(pk=cast.operator.user.pk))

    with CaptureQueriesContext(connection) as queries:
        answer = ConfirmationDetail(done).data

    assert queries.captured_queries == []
    assert answer["state"] == ConfirmationState.EXECUTED
    assert answer["principal"] == cast.caretaker.user.get_username()
    assert answer["decided_by"] == cast.operator.user.get_username()
    assert answer["contract"] == str(Contract.objects.get(confirmation=pending).id)
    assert answer["authentic"] is True
