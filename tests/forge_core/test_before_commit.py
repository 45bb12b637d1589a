"""Work a commit waits for (forge_core.before_commit): run once just before the transaction commits, dropped when it
rolls back, and a hook that fails fails the commit with the transaction's writes rolled back."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import DatabaseError, transaction

from forge_core.before_commit import before_commit

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_hook_runs_once_as_the_transaction_commits_not_when_it_is_added():
    ran: list[str] = []
    with transaction.atomic():
        Group.objects.create(name="line-a")
        before_commit("k", lambda: ran.append("hook"))
        before_commit("k", lambda: ran.append("a second hook under the same key"))
        assert ran == []
    assert ran == ["hook"]


def test_hooks_run_in_the_order_they_were_added_each_once():
    ran: list[str] = []
    with transaction.atomic():
        before_commit("first", lambda: ran.append("first"))
        with transaction.atomic():  # a savepoint: its hooks still wait for the outer commit
            before_commit("second", lambda: ran.append("second"))
        assert ran == []
    assert ran == ["first", "second"]


def test_a_hook_of_a_transaction_that_rolls_back_never_runs():
    ran: list[str] = []
    with pytest.raises(RuntimeError), transaction.atomic():
        before_commit("k", lambda: ran.append("hook"))
        raise RuntimeError("the caller's change fails")
    with transaction.atomic():
        Group.objects.create(name="line-b")
    assert ran == []


def test_a_hook_that_fails_fails_the_commit_and_rolls_the_writes_back():
    def fail() -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(DatabaseError, match="Input/output error"), transaction.atomic():
        Group.objects.create(name="line-c")
        before_commit("k", fail)

    assert not Group.objects.filter(name="line-c").exists()
    with transaction.atomic():  # the connection is usable again, with no hook left over
        Group.objects.create(name="line-d")
    assert Group.objects.filter(name="line-d").exists()


def test_outside_a_transaction_a_hook_runs_at_once():
    ran: list[str] = []
    before_commit("k", lambda: ran.append("hook"))
    assert ran == ["hook"]
