"""The audit screen for investigations: newest first, times to the second with their offset, the filter bar,
the verification state at a glance, the readable detail of an event, and the export of a filtered range
(JSONL lines that are the mirror's, CSV that parses back), recorded, and refused to whoever may not."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit import export
from audit.models import AuditEvent, EventKind
from audit.services import do_make_checkpoint, event_line, record
from tests.audit.helpers import append_events, change_behind_the_models_back, mirror_lines

CHANGELIST = "admin:audit_auditevent_changelist"
EXPORT = "admin:audit_auditevent_export"
VERIFY = "admin:audit_auditevent_verify"


@pytest.fixture
def operator_client(client, cast):
    client.force_login(cast.operator.user)
    return client


@pytest.fixture
def investigation(cast) -> list[AuditEvent]:
    """Five events of two principals, two clients, two projects and three outcomes."""
    return [
        record(EventKind.TOOL_CALL, tool="project.find", arguments={"text": "Motor_1"}, outcome="ok",
               called_by="dana", client_label="claude-desktop", session="s-1", project="line-a"),
        record(EventKind.TOOL_CALL, tool="project.write.add_variable", outcome="FORGE_ERR_CONFIRMATION_REQUIRED",
               called_by="dana", client_label="claude-desktop", session="s-1", project="line-a"),
        record(EventKind.ACCESS_REQUEST, outcome="pending", called_by="erik", client_label="cursor", project="line-b"),
        record(EventKind.ACCESS_DECISION, outcome="allowed", called_by="olivia", project="line-b"),
        record(EventKind.TOOL_CALL, tool="project.overview", outcome="ok", called_by="erik", client_label="cursor",
               session="s-2", project="line-b"),
    ]  # fmt: skip


def shown_seqs(response) -> list[int]:
    return [event.seq for event in response.context["cl"].result_list]


def export_of(client, query: str, fmt: str):
    return client.post(reverse(EXPORT), {"query": query, "format": fmt})


def body_of(response) -> str:
    return b"".join(response.streaming_content).decode()


def messages_of(response) -> list[str]:
    return [message.message for message in response.context["messages"]]


# --- the list ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_list_shows_the_newest_event_first(operator_client, investigation):
    response = operator_client.get(reverse(CHANGELIST))

    seqs = shown_seqs(response)
    assert seqs == sorted(seqs, reverse=True)
    assert seqs[0] == AuditEvent.objects.order_by("-seq").first().seq


@pytest.mark.django_db
def test_each_time_is_shown_to_the_second_with_its_offset_and_the_exact_instant_in_its_tooltip(
    operator_client, investigation
):
    event = investigation[-1]

    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    exact = event.ts.isoformat(timespec="microseconds").replace("+00:00", "Z")
    shown = f"{event.ts:%Y-%m-%d %H:%M:%S} +00:00"
    assert f'<time class="forge-time" datetime="{exact}" title="{exact} (UTC)">{shown}</time>' in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("parameter", "value", "expected"),
    [
        ("kind", "access_request", [3]),
        ("called_by", "dana", [1, 2]),
        ("client_label", "cursor", [3, 5]),
        ("project", "line-b", [3, 4, 5]),
        ("outcome", "FORGE_ERR_CONFIRMATION_REQUIRED", [2]),
    ],
)
def test_a_filter_of_the_bar_shows_only_the_events_it_matches(
    operator_client, investigation, parameter, value, expected
):
    response = operator_client.get(reverse(CHANGELIST), {parameter: value})

    assert response.status_code == 200
    assert shown_seqs(response) == sorted((investigation[n - 1].seq for n in expected), reverse=True)


@pytest.mark.django_db
def test_filters_combine_and_empty_fields_of_the_bar_filter_nothing(operator_client, investigation):
    response = operator_client.get(
        reverse(CHANGELIST), {"called_by": "erik", "project": "line-b", "kind": "", "outcome": "", "q": "", "since": ""}
    )

    assert shown_seqs(response) == [investigation[4].seq, investigation[2].seq]


@pytest.mark.django_db
def test_the_principal_filter_suggests_the_principals_of_the_newest_events(operator_client, investigation):
    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    suggested = re.search(r'<datalist id="audit-suggest-called_by">(.*?)</datalist>', page, re.S).group(1)
    assert re.findall(r'value="([^"]*)"', suggested) == ["dana", "erik", "olivia", "tests"]


@pytest.mark.django_db
def test_the_time_range_is_read_in_the_browsers_zone_and_keeps_the_events_from_since_to_before_until(
    operator_client, investigation
):
    vienna = ZoneInfo("Europe/Vienna")
    since = investigation[1].ts.astimezone(vienna).replace(tzinfo=None).isoformat()
    until = investigation[3].ts.astimezone(vienna).replace(tzinfo=None).isoformat()

    response = operator_client.get(reverse(CHANGELIST), {"since": since, "until": until, "tz": "Europe/Vienna"})

    assert shown_seqs(response) == [investigation[2].seq, investigation[1].seq]


@pytest.mark.django_db
def test_a_time_that_cannot_be_read_is_named_and_the_range_not_applied(operator_client, investigation):
    response = operator_client.get(reverse(CHANGELIST), {"since": "yesterday"})

    assert response.status_code == 200
    assert "The time range was not applied: since &#x27;yesterday&#x27; is not a date and time" in (
        response.content.decode()
    )
    assert len(shown_seqs(response)) == AuditEvent.objects.count()


@pytest.mark.django_db
def test_the_search_finds_a_word_of_the_arguments(operator_client, investigation):
    response = operator_client.get(reverse(CHANGELIST), {"q": "Motor_1"})

    assert shown_seqs(response) == [investigation[0].seq]


@pytest.mark.django_db
def test_the_unfiltered_list_counts_the_log_by_its_last_seq_without_counting_its_rows(operator_client, investigation):
    with CaptureQueriesContext(connection) as queries:
        response = operator_client.get(reverse(CHANGELIST))

    assert response.context["cl"].result_count == AuditEvent.objects.count()
    assert not [query["sql"] for query in queries if "COUNT(" in query["sql"] and "audit_auditevent" in query["sql"]]


# --- the verification state -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_sound_log_shows_nothing_wrong_with_its_latest_checkpoint_and_newest_events(operator_client):
    append_events(4)
    checkpoint = do_make_checkpoint()
    append_events(2)
    last = AuditEvent.objects.order_by("-seq").first().seq

    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    assert "Verification: nothing wrong found" in page
    assert f"Events 1–{last}: no gap, each links to the one before and its MAC matches." in page
    assert f"{checkpoint.size} events, signed" in page
    assert f"signature valid, the stored tree has its root; {last - checkpoint.size} events since." in page
    assert "The kept checkpoint and the mirror&#x27;s end agree with the database" in page
    assert "Not run from the console since the server started" in page


@pytest.mark.django_db(transaction=True)
def test_a_row_changed_behind_the_models_back_shows_as_a_failed_check_naming_it(operator_client):
    append_events(3)
    tampered = AuditEvent.objects.order_by("-seq").first().seq - 1
    change_behind_the_models_back("UPDATE audit_auditevent SET outcome = %s WHERE seq = %s", ["denied", tampered])

    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    assert "Verification: a problem was found" in page
    assert f"FAILED at event {tampered}: MAC mismatch" in page


@pytest.mark.django_db
def test_the_last_full_check_from_the_console_is_shown_with_who_ran_it(operator_client):
    append_events(2)

    operator_client.post(reverse(VERIFY))
    page = operator_client.get(reverse(CHANGELIST)).content.decode()

    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+00:00 by olivia: ok \d+ events, 0 checkpoints", page)


# --- one event --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_events_page_shows_its_arguments_laid_out_and_its_macs_short_with_copy_buttons(
    operator_client, investigation
):
    event = investigation[0]

    page = operator_client.get(reverse("admin:audit_auditevent_change", args=[event.seq])).content.decode()

    assert '<link href="/static/forge/format.css" media="all" rel="stylesheet">' in page
    assert '<pre class="forge-json">{\n  &quot;text&quot;: &quot;Motor_1&quot;\n}</pre>' in page
    assert f'<code title="{event.mac}">{event.mac[:8]}…{event.mac[-4:]}</code>' in page
    whole = re.search(rf'<span class="forge-whole" id="([^"]+)" aria-hidden="true">{event.mac}</span>', page)
    assert f'class="copy forge-copy" data-copy="{whole.group(1)}" aria-label="Copy the MAC"' in page


# --- export -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_jsonl_export_of_a_filtered_range_is_the_mirrors_lines_of_those_events_oldest_first(
    operator_client, investigation, mirror_path
):
    wanted = {event.seq for event in investigation if event.project == "line-b"}

    response = export_of(operator_client, "project=line-b", "jsonl")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="forge-audit-through-')
    mirrored = [line for line in mirror_lines(mirror_path) if json.loads(line)["seq"] in wanted]
    assert body_of(response).splitlines() == mirrored


@pytest.mark.django_db
def test_the_csv_export_parses_back_to_the_events_fields(operator_client, investigation):
    response = export_of(operator_client, "called_by=dana", "csv")

    rows = list(csv.DictReader(io.StringIO(body_of(response))))
    assert [int(row["seq"]) for row in rows] == [investigation[0].seq, investigation[1].seq]
    first = json.loads(event_line(investigation[0]))
    assert {name: rows[0][name] for name in ("kind", "tool", "outcome", "called_by", "client_label", "session")} == {
        name: first[name] for name in ("kind", "tool", "outcome", "called_by", "client_label", "session")
    }
    assert json.loads(rows[0]["arguments"]) == {"text": "Motor_1"}
    assert (rows[0]["ts"], rows[0]["prev_mac"], rows[0]["mac"]) == (first["ts"], first["prev_mac"], first["mac"])


@pytest.mark.django_db
def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_is_exported_inert(operator_client, cast):
    event = record(EventKind.TOOL_CALL, tool="project.find", outcome="ok", called_by="=HYPERLINK(1)")

    rows = list(csv.DictReader(io.StringIO(body_of(export_of(operator_client, f"called_by={event.called_by}", "csv")))))

    assert [row["called_by"] for row in rows] == ["'=HYPERLINK(1)"]


@pytest.mark.django_db
def test_an_export_is_recorded_before_it_is_served_with_its_filters_and_range(operator_client, investigation):
    last = AuditEvent.objects.order_by("-seq").first().seq

    body_of(export_of(operator_client, "project=line-b&p=2&q=", "jsonl"))

    recorded = AuditEvent.objects.order_by("-seq").first()
    assert (recorded.kind, recorded.outcome, recorded.called_by) == ("audit_exported", "ok", "olivia")
    assert recorded.arguments == {"format": "jsonl", "filters": {"project": "line-b"}, "events": 3, "through_seq": last}


@pytest.mark.django_db
def test_an_export_holds_no_event_recorded_after_it_started(operator_client, investigation):
    body = body_of(export_of(operator_client, "", "jsonl"))

    assert [json.loads(line)["kind"] for line in body.splitlines()][-1] != "audit_exported"
    assert len(body.splitlines()) == AuditEvent.objects.count() - 1


@pytest.mark.django_db
def test_an_export_without_the_right_to_view_the_log_is_refused_and_the_refusal_recorded(client, cast, investigation):
    staff = User.objects.create_user("sam", password="sam-password-123", is_staff=True)
    client.force_login(staff)
    before = AuditEvent.objects.count()

    response = export_of(client, "", "jsonl")

    assert response.status_code == 403
    assert not getattr(response, "streaming", False)
    refused = AuditEvent.objects.order_by("-seq").first()
    assert AuditEvent.objects.count() == before + 1
    assert (refused.kind, refused.outcome, refused.called_by) == ("audit_exported", "FORGE_ERR_FORBIDDEN", "sam")


@pytest.mark.django_db
def test_an_export_needs_a_console_login(client, investigation):
    before = AuditEvent.objects.count()

    response = export_of(client, "", "jsonl")

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
def test_an_export_is_never_started_by_a_get(operator_client, investigation):
    before = AuditEvent.objects.count()

    response = operator_client.get(reverse(EXPORT), {"query": "", "format": "jsonl"})

    assert response.status_code == 302
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
def test_an_export_in_an_unknown_format_is_refused_with_what_to_ask_for(operator_client, investigation):
    response = operator_client.post(reverse(EXPORT), {"query": "project=line-a", "format": "xlsx"}, follow=True)

    assert response.redirect_chain == [(f"{reverse(CHANGELIST)}?project=line-a", 302)]
    assert messages_of(response) == ["Export as jsonl or csv."]
    assert AuditEvent.objects.order_by("-seq").first().outcome == "FORGE_ERR_BAD_FORMAT"


@pytest.mark.django_db
def test_an_export_over_the_bound_is_refused_saying_how_many_events_it_holds(
    operator_client, investigation, monkeypatch
):
    monkeypatch.setattr(export, "EXPORT_MAX_EVENTS", 2)

    response = operator_client.post(reverse(EXPORT), {"query": "project=line-b", "format": "csv"}, follow=True)

    [message] = messages_of(response)
    assert message.startswith("The filtered range holds 3 events, more than the 2 one export may hold; narrow it")
    assert AuditEvent.objects.order_by("-seq").first().outcome == "FORGE_ERR_EXPORT_TOO_LARGE"


@pytest.mark.django_db
def test_an_export_of_a_range_that_cannot_be_read_is_refused_and_exports_nothing(operator_client, investigation):
    before = AuditEvent.objects.count()

    response = operator_client.post(reverse(EXPORT), {"query": "until=soon", "format": "jsonl"}, follow=True)

    assert messages_of(response) == ["Nothing exported: until 'soon' is not a date and time (YYYY-MM-DD HH:MM:SS)."]
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
def test_the_export_form_carries_the_lists_filters_without_its_page(operator_client, investigation):
    page = operator_client.get(reverse(CHANGELIST), {"project": "line-b", "p": "1"}).content.decode()

    assert '<input type="hidden" name="query" value="project=line-b">' in page
    assert "Export the 3 filtered events" in page


@pytest.mark.django_db
def test_a_time_range_export_keeps_the_same_events_as_the_list(operator_client, investigation):
    since = (investigation[2].ts - timedelta(microseconds=1)).isoformat()

    body = body_of(export_of(operator_client, f"since={since.replace('+', '%2B')}", "jsonl"))

    assert [json.loads(line)["seq"] for line in body.splitlines()] == [event.seq for event in investigation[2:]]
