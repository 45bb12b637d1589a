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


@settings(max_examples=300, deadline=None)
@given(ts=st.datetimes(timezones=st.just(UTC)) | st.datetimes(timezones=st.timezones()))
def test_a_time_is_formatted_as_its_utc_strftime_text_whatever_its_year_and_zone(ts):
    assert services.format_ts(ts) == ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


plain_values = st.none() | st.booleans() | st.integers()


def non_empty_containers(value) -> int:
    if isinstance(value, dict | list):
        return bool(value) + sum(map(non_empty_containers, value.values() if isinstance(value, dict) else value))
    return 0


@settings(max_examples=300, deadline=None)
@given(arguments=st.dictionaries(texts, plain_values | st.lists(plain_values, max_size=4), max_size=6))
def test_the_size_sanitize_reckons_for_keys_and_plain_values_is_their_canonical_json_length(arguments):
    sanitized, size = services._sanitize(arguments, frozenset())

    assert sanitized == arguments
    # It counts a comma after every member, so one more than there is in each container that has members.
    assert size == len(services.canonical_json(arguments)) + non_empty_containers(arguments)


def test_a_row_is_macd_under_the_key_in_use_when_the_key_changes(monkeypatch):
    # The append path keeps a MAC context keyed once; a new key must not be met with the old key's context.
    event = AuditEvent(kind="tool_call", tool="keyed", arguments_json="{}")
    event.ts, event.seq, event.prev_mac = datetime(2026, 1, 2, tzinfo=UTC), 1, services.GENESIS_MAC
    macs = []
    for key in (b"k" * 64, b"q" * 64, b"k" * 64):
        monkeypatch.setattr(services.keys, "hmac_key", lambda key=key: key)
        services._sealed_texts(event)
        assert event.mac == services.compute_mac(event.prev_mac, services.row_body(event))
        macs.append(event.mac)
    assert macs[0] != macs[1] and macs[0] == macs[2]
