"""A property of the working draft (hypothesis): whatever sequence of valid and invalid operations is
staged, in whatever batches, the draft is the accepted document with the accepted batches applied in
order, a refused batch stores nothing, a restart (the process cache cleared) materializes the same
bytes, and accepting through the executor writes exactly the draft."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from projects import drafts, operations
from projects.models import Project, StagedOperation, WorkingDraft
from projects.plcopen import documents
from projects.services import do_import_project, project_path
from tests.projects.conftest import MAIN, fixture_bytes
from tests.projects.test_drafts import accept

pytestmark = pytest.mark.django_db

SESSION = "property-session"

# Small pools, so that names collide (duplicates, also case-insensitively), ids sometimes exist and
# sometimes do not, a later operation often depends on an earlier one (a variable of a POU added in an
# earlier batch), and some valid operations change nothing (a type or qualifier it already has).
SCOPES = ["pou/LineMain", "pou/LineMain", "pou/FlowTotal", "pou/Extra"]
NEW_NAMES = ["A", "B", "C", "D", "E", "Dosed", "pulses", "1bad"]
VARIABLE_IDS = [
    *(f"pou/LineMain/var/{name}" for name in ("Dosed", "Capped", "Labelled", "Progress", "A", "B", "Missing")),
    *(f"pou/FlowTotal/var/{name}" for name in ("Pulses", "Litres", "A")),
    "pou/Extra/var/A",
]
TYPES = ["INT", "INT", "BOOL", "DINT"]
BODIES = ["", "A := 1;", "Pulses := Pulses + 1;", "Undeclared := 2;"]

add_variable = st.builds(
    lambda scope, name, type_: {
        "op": "add_variable",
        "scope": scope,
        "section": "localVars",
        "name": name,
        "type": type_,
    },
    st.sampled_from(SCOPES),
    st.sampled_from(NEW_NAMES),
    st.sampled_from(TYPES),
)
update_variable = st.builds(
    lambda id_, change: {"op": "update_variable", "id": id_, **change},
    st.sampled_from(VARIABLE_IDS),
    st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
        st.builds(lambda v: {"initial_value": v}, st.sampled_from(["0", "1", None])),
        st.builds(lambda r: {"retain": r}, st.booleans()),
        st.builds(lambda n: {"name": n}, st.sampled_from(NEW_NAMES)),
        st.just({"type": "INT", "name": "Both"}),  # outside the vocabulary: two fields at once
    ),
)
remove_variable = st.builds(lambda id_: {"op": "remove_variable", "id": id_}, st.sampled_from(VARIABLE_IDS))
add_pou = st.builds(
    lambda name, body: {"op": "add_pou", "name": name, "pou_type": "functionBlock", "body": body},
    st.sampled_from(["Extra", "Extra", "Other", "FlowTotal"]),
    st.sampled_from(BODIES),
)
set_pou_body = st.builds(
    lambda id_, text: {"op": "set_pou_body", "id": id_, "language": "ST", "text": text},
    st.sampled_from(["pou/Extra", "pou/FlowTotal", "pou/FlowTotal", "pou/Missing"]),
    st.sampled_from(BODIES),
)
unchanging = st.builds(
    lambda id_, change: {"op": "update_variable", "id": id_, **change},
    st.sampled_from(["pou/LineMain/var/Capped", "pou/FlowTotal/var/Pulses"]),  # INT, neither retain nor constant
    st.sampled_from([{"type": "INT"}, {"retain": False}, {"constant": False}]),
)
an_operation = st.one_of(add_variable, update_variable, remove_variable, add_pou, set_pou_body, unchanging)
batches = st.lists(st.lists(an_operation, min_size=1, max_size=3), min_size=1, max_size=8)

_examples = itertools.count()


def fresh_project() -> Project:
    """Each example works on a project of its own: the test's database is not reset between examples."""
    drafts.clear_cache()
    return do_import_project(fixture_bytes(MAIN), slug=f"prop-{next(_examples)}", acting_user="tests")


def stored(project: Project) -> tuple[int, int]:
    draft = WorkingDraft.objects.get(project=project)
    return draft.working_revision, StagedOperation.objects.filter(draft=draft).count()


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


@pytest.fixture
def clock(monkeypatch):
    """Every stamp the draft takes is one second after the previous one, as calls spread over time."""
    start = timezone.now().replace(microsecond=0)
    ticks = itertools.count()
    monkeypatch.setattr(drafts, "_now_stamp", lambda: start + timedelta(seconds=next(ticks)))


def replay(
    accepted: documents.ProjectDocument, batches: list[list[dict[str, Any]]], project: Project
) -> documents.ProjectDocument:
    """The accepted document with the batches applied in order, carrying the draft's stamp."""
    stamp = WorkingDraft.objects.get(project=project).stamp
    for batch in batches:
        accepted = operations.apply(accepted, batch, now=stamp).doc
    return accepted


def stage_and_accept(user, batches: list[list[dict[str, Any]]]) -> tuple[int, int]:
    """Stage the batches into one group of a new project, checking each against operations.apply on the
    expected document, then the draft against the accepted batches replayed, after a restart too, and the
    file an accept writes against the draft. Answers how many batches were accepted and how many of
    them changed nothing."""
    project = fresh_project()
    accepted = documents.load(project_path(project).read_bytes())
    group, _ = drafts.do_begin_group(
        project,
        session_id=SESSION,
        principal=user,
        client_label="property",
        title="Random",
        rationale="",
        expected_revision=0,
    )
    expected = accepted
    accepted_batches: list[list[dict[str, Any]]] = []
    unchanging = 0
    for batch in batches:
        before = stored(project)
        try:
            oracle = operations.apply(expected, batch)
        except operations.OperationRefused as refused:
            oracle_refusal = refused.index
        else:
            oracle_refusal = None
        try:
            answer = drafts.do_stage(project, group.pk, batch, session_id=SESSION, expected_revision=before[0])
        except operations.OperationRefused as refused:
            assert refused.index == oracle_refusal is not None, (batch, refused)
            assert stored(project) == before
            continue
        assert oracle_refusal is None, (batch, oracle_refusal)
        assert answer["changed_ids"] == list(oracle.changed_ids)
        assert stored(project) == (before[0] + 1, before[1] + len(batch))
        expected = oracle.doc
        accepted_batches.append(batch)
        unchanging += not oracle.changed_ids
        replayed = replay(accepted, accepted_batches, project)
        assert documents.serialize(drafts.current(project).document) == documents.serialize(replayed)

    replayed = replay(accepted, accepted_batches, project)
    draft_bytes = documents.serialize(drafts.current(project).document)
    assert draft_bytes == documents.serialize(replayed)

    drafts.clear_cache()  # a restart
    assert documents.serialize(drafts.current(project).document) == draft_bytes

    original = project_path(project).read_bytes()
    if replayed is accepted:
        with pytest.raises(drafts.DraftRefused):
            drafts.acceptance(project)
        assert project_path(project).read_bytes() == original
    else:
        contract = accept(project)
        assert contract.state == "VERIFIED", contract.detail
        assert project_path(project).read_bytes() == draft_bytes
    return len(accepted_batches), unchanging


# The fixtures (database, projects root, clock) are shared by all examples on purpose; each example
# creates its own project and clears the draft cache, so nothing carries over between examples.
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches)
def test_staged_batches_leave_the_draft_equal_to_the_accepted_batches_applied_in_order(cast, clock, batches):
    accepted, unchanging = stage_and_accept(cast.operator.user, batches)

    event(f"{accepted} of {len(batches)} batches accepted")
    event(f"{unchanging} accepted batches changed nothing")
