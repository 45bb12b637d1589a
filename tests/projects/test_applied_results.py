"""What an intent makes of a file is computed once per process: the preview's bytes serve the executor."""

from __future__ import annotations

import pytest

from projects import capability
from projects.capability import apply_intent, intent_for
from projects.plcopen import documents
from projects.preview import preview_change
from tests.confirmations.helpers import STAMP, add_variable
from tests.projects.conftest import MAIN, fixture_bytes


@pytest.fixture(autouse=True)
def _fresh_results():
    capability._results.clear()
    yield
    capability._results.clear()


def _no_parsing(monkeypatch) -> None:
    def refuse(data: bytes):
        raise AssertionError("the file was parsed again")

    monkeypatch.setattr(documents, "load", refuse)


def test_the_executor_writes_the_bytes_the_preview_made_without_applying_again(monkeypatch):
    current, intent = fixture_bytes(MAIN), intent_for([add_variable("Cached")], STAMP)
    previewed = preview_change(current, intent, name="main.xml").result
    _no_parsing(monkeypatch)

    assert apply_intent(current, intent) == previewed


def test_another_intent_or_other_bytes_are_applied_afresh():
    current, intent = fixture_bytes(MAIN), intent_for([add_variable("First")], STAMP)
    first = preview_change(current, intent, name="main.xml").result
    other_intent = intent_for([add_variable("Second")], STAMP)

    second = apply_intent(current, other_intent)
    from_result = apply_intent(first, other_intent)

    assert b'name="Second"' in second and b'name="First"' not in second
    assert b'name="Second"' in from_result and b'name="First"' in from_result


def test_a_result_computed_without_a_preview_is_kept_too(monkeypatch):
    current, intent = fixture_bytes(MAIN), intent_for([add_variable("Kept")], STAMP)
    made = apply_intent(current, intent)
    _no_parsing(monkeypatch)

    assert apply_intent(current, intent) == made
