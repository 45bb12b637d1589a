"""The append path's assembled row text (audit.services._sealed_texts) is exactly the general canonical form
that verification recomputes (row_body, compute_mac, event_line), whatever the fields hold."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from audit import services
from audit.models import AuditEvent

texts = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    tool=texts,
    arguments=st.dictionaries(texts, json_values, max_size=5),
    outcome=texts,
    called_by=texts,
    session=texts,
    label=texts,
    project=texts,
    seq=st.integers(min_value=1, max_value=2**48),
    micros=st.integers(min_value=0, max_value=10**15),
)
def test_the_assembled_row_is_the_canonical_row(
    tool, arguments, outcome, called_by, session, label, project, seq, micros
):
    event = AuditEvent(
        kind="tool_call",
        tool=tool,
        arguments_json=services.canonical_json(arguments),
        outcome=outcome,
        called_by=called_by,
        session=session,
        client_label=label,
        project=project,
    )
    event.ts = datetime.fromtimestamp(micros / 10**6, UTC)
    event.seq, event.prev_mac = seq, "ab" * 32

    body, line = services._sealed_texts(event)

    assert body == services.canonical_json(services.row_body(event))
    assert event.mac == services.compute_mac(event.prev_mac, services.row_body(event))
    assert line == services.event_line(event)
