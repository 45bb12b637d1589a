"""The audit log in the console: a screen for investigations, read-only.

Newest first; each event's time to the second with its offset; filters by kind, principal, client,
project, outcome and time range, and a search over the text fields and the arguments; an export of the
filtered range as JSONL or CSV (`audit.export`, itself recorded); and the log's verification state at a
glance, from checks that stay cheap on a log of millions of events (`LogState`): the newest
`RECENT_CHECKED` events' chain and MACs, the latest signed checkpoint against the stored tree, the start-up
checks against what is kept outside the database (`audit.checks`), and the outcome of the last full check
run from the console ("Verify the log", which walks every event, the mirror and every checkpoint).

The table is append-only: nothing here writes to it except through `audit.services.record` (an export
and a refused export are recorded).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters, ShowFacets
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Max, QuerySet
from django.http import HttpRequest, HttpResponseBase, HttpResponseRedirect, QueryDict
from django.urls import path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.functional import cached_property
from django.utils.safestring import SafeString

from audit import checks, merkle
from audit.export import FORMATS, do_export_events
from audit.models import AuditCheckpoint, AuditEvent, EventKind
from audit.services import GENESIS_MAC, DatabaseNodeStore
from audit.verify import check_checkpoint, check_event, verify_log
from forge_core.console import ReadOnlyModelAdmin, is_operator, refused, signed_in
from forge_core.errors import Refusal
from forge_core.formatting import local_time, pretty_json, second_text, short_hash

RECENT_CHECKED = 500
"""How many of the newest events the screen checks on every load (their links and MACs: a few ms)."""
SUGGESTED_FROM = 2000
"""The filters suggest the values seen among this many newest events (a bounded read, not a scan)."""
LAST_FULL_CHECK = "forge:audit:last-full-check"
NOT_FILTERS = frozenset({"p", "o", "e", "_facets"})


# --- filters: each one a field of the filter bar above the list ------------------------------------


def _one(params: dict[str, Any], name: str) -> str:
    """The last value of a query parameter the changelist handed over (a list of values), popped."""
    value = params.pop(name, "")
    return (value[-1] if isinstance(value, list) and value else value or "").strip()


class ExactFilter(admin.ListFilter):
    """Events whose `field` is exactly the value typed (or picked); suggests the values of the newest events."""

    field = ""
    template = "admin/audit/auditevent/filter_exact.html"
    options: tuple[tuple[str, str], ...] = ()  # a closed list: shown as a select, not suggested

    def __init__(self, request, params, model, model_admin) -> None:
        super().__init__(request, params, model, model_admin)
        self.value = _one(params, self.field)

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str | None]:
        return [self.field]

    def choices(self, changelist) -> Iterator[Any]:
        yield from ()  # the filter bar's template renders the field from the filter itself

    def queryset(self, request, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        return queryset.filter(**{self.field: self.value}) if self.value else queryset

    def suggestions(self) -> list[str]:
        if self.options:
            return []
        last = AuditEvent.objects.aggregate(last=Max("seq"))["last"] or 0
        recent = AuditEvent.objects.filter(seq__gt=last - SUGGESTED_FROM).exclude(**{self.field: ""})
        return sorted(set(recent.values_list(self.field, flat=True)))


class KindFilter(ExactFilter):
    title = "kind"
    field = "kind"
    options = tuple(EventKind.choices)


def exact(field: str, title: str) -> type[ExactFilter]:
    """The filter of events whose `field` is exactly a value; `title` is what the bar calls it."""
    return type(f"{field.title().replace('_', '')}Filter", (ExactFilter,), {"field": field, "title": title})


class TimeRangeFilter(admin.ListFilter):
    """Events from `since` (included) to `until` (excluded). A time without an offset is read in the zone
    `tz` names (the browser's, which its script fills in and shows the events' times in), else in the
    server's; one that cannot be read is named in `problem` and the range is not applied."""

    title = "time"
    template = "admin/audit/auditevent/filter_time.html"

    def __init__(self, request, params, model, model_admin) -> None:
        super().__init__(request, params, model, model_admin)
        self.since_text, self.until_text, self.zone_name = (_one(params, name) for name in ("since", "until", "tz"))
        self.problem = ""
        zone = self._zone()
        self.since = self._instant("since", self.since_text, zone)
        self.until = self._instant("until", self.until_text, zone)

    def _zone(self) -> Any:
        if self.zone_name:
            try:
                return ZoneInfo(self.zone_name)
            except (ZoneInfoNotFoundError, ValueError):
                self.problem = f"tz {self.zone_name!r} is not a time zone name (such as Europe/Vienna)"
        return timezone.get_current_timezone()

    def _instant(self, name: str, text: str, zone: Any) -> datetime | None:
        if not text or self.problem:
            return None
        try:
            value = parse_datetime(text.replace(" ", "T", 1))
        except ValueError:
            value = None
        if value is None:
            self.problem = f"{name} {text!r} is not a date and time (YYYY-MM-DD HH:MM:SS)"
            return None
        return timezone.make_aware(value, zone) if timezone.is_naive(value) else value

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str | None]:
        return ["since", "until", "tz"]

    def choices(self, changelist) -> Iterator[Any]:
        yield from ()

    def queryset(self, request, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        if self.problem:
            return queryset
        if self.since is not None:
            queryset = queryset.filter(ts__gte=self.since)
        if self.until is not None:
            queryset = queryset.filter(ts__lt=self.until)
        return queryset


# --- the log's state at a glance --------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One line of the verification panel: what was checked, whether it held, and what was found."""

    name: str
    ok: bool | None  # None: nothing to say yet (no checkpoint signed, no full check run)
    text: str
    hash: str = ""


@dataclass(frozen=True)
class LogState:
    events: int
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok is not False for check in self.checks)


def log_state() -> LogState:
    """What can be told of the log's soundness without walking it: bounded reads only."""
    last = AuditEvent.objects.aggregate(last=Max("seq"))["last"] or 0
    return LogState(last, (_recent_chain(last), _latest_checkpoint(last), _kept_outside(), _last_full_check(last)))


def _recent_chain(last: int) -> Check:
    name = "Newest events"
    if not last:
        return Check(name, None, "No events yet.")
    first = max(1, last - RECENT_CHECKED + 1)
    window = list(AuditEvent.objects.filter(seq__gte=first - 1).order_by("seq"))
    expected, prev_mac = (first, GENESIS_MAC) if window[0].seq >= first else (first, window.pop(0).mac)
    for event in window:
        finding = check_event(event, expected, prev_mac, [], {}, None)
        if finding is not None:
            return Check(name, False, f"FAILED at {finding}. Run “Verify the log” for the whole log.")
        expected, prev_mac = event.seq + 1, event.mac
    if expected <= last:
        return Check(name, False, f"FAILED at event {expected}: missing (the log ends at event {expected - 1}).")
    return Check(name, True, f"Events {first:,}–{last:,}: no gap, each links to the one before and its MAC matches.")


def _latest_checkpoint(last: int) -> Check:
    name = "Latest checkpoint"
    latest = AuditCheckpoint.objects.order_by("-size").first()
    if latest is None:
        return Check(name, None, "None signed yet (one is signed as events accumulate, or by `audit_checkpoint`).")
    try:
        stored_root = merkle.root(latest.size, DatabaseNodeStore())
    except merkle.MissingNodeError:
        stored_root = None
    finding = check_checkpoint(latest, stored_root)
    signed = f"{latest.size:,} events, signed {second_text(latest.created_at)}"
    if finding is not None:
        return Check(name, False, f"{signed}: FAILED: {finding.reason}.", _b64(latest.root))
    since = f"; {last - latest.size:,} events since" if last > latest.size else ""
    return Check(name, True, f"{signed}: signature valid, the stored tree has its root{since}.", _b64(latest.root))


def _b64(digest: bytes | memoryview) -> str:
    """A hash as the checkpoint notes and the audit API write it."""
    return base64.b64encode(bytes(digest)).decode()


def _kept_outside() -> Check:
    name = "Outside the database"
    problems = checks.check_log_not_rolled_back(databases=[DEFAULT_DB_ALIAS])
    if problems:
        return Check(name, False, " ".join(f"{problem.id}: {problem.msg}" for problem in problems))
    return Check(name, True, "The kept checkpoint and the mirror's end agree with the database (no rollback).")


def _last_full_check(last: int) -> Check:
    name = "Full check"
    done = cache.get(LAST_FULL_CHECK)
    if done is None:
        return Check(
            name,
            None,
            f"Not run from the console since the server started: “Verify the log” walks all {last:,} events, "
            "the mirror and every checkpoint (`manage.py audit_verify` does the same from a shell).",
        )
    return Check(name, done["ok"], f"{second_text(done['at'])} by {done['by']}: {done['report']}")


# --- the screens ------------------------------------------------------------------------------------


COLUMNS = ("seq", "when", "event_kind", "tool", "outcome", "principal", "client", "project")
"""What the list shows of an event (and a shortened session id); an event's page shows them first."""


class FormattedValues:
    """The script and style of the readable values (`forge_core.formatting`) on a list's and a row's page."""

    js = ("forge/format.js",)
    css = {"all": ("forge/format.css",)}


class LogPaginator(Paginator):
    """Counts an unfiltered log by its last `seq` (events are numbered 1, 2, 3, ... without gaps, which the
    verification checks) instead of counting every row on every page."""

    @cached_property
    def count(self) -> int:
        events = self.object_list
        if isinstance(events, QuerySet) and not events.query.where:
            return events.aggregate(last=Max("seq"))["last"] or 0
        return super().count


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    Media = FormattedValues
    paginator = LogPaginator
    list_display = (*COLUMNS, "session_id")
    list_display_links = ("seq",)
    list_filter = (
        KindFilter,
        exact("called_by", "principal"),
        exact("client_label", "client"),
        exact("project", "project"),
        exact("outcome", "outcome"),
        TimeRangeFilter,
    )
    search_fields = ("tool", "called_by", "client_label", "session", "project", "outcome", "arguments_json")
    search_help_text = "Words found in the tool, principal, client, session, project, outcome or arguments."
    ordering = ("-seq",)
    sortable_by = ("seq",)
    show_facets = ShowFacets.NEVER
    show_full_result_count = False  # a second count over the whole log on every filtered page
    list_per_page = 50
    fields = (*COLUMNS, "session", "arguments", "previous_mac", "event_mac")
    readonly_fields = fields
    change_list_template = "admin/audit/auditevent/change_list.html"

    @admin.display(description="time")
    def when(self, event: AuditEvent) -> SafeString:
        return local_time(event.ts)

    @admin.display(description="kind")
    def event_kind(self, event: AuditEvent) -> str:
        return event.kind  # the word the filters, the API and the exports use, not its label

    @admin.display(description="principal")
    def principal(self, event: AuditEvent) -> str:
        return event.called_by

    @admin.display(description="client")
    def client(self, event: AuditEvent) -> str:
        return event.client_label

    @admin.display(description="session")
    def session_id(self, event: AuditEvent) -> SafeString:
        return short_hash(event.session, "session id")

    @admin.display(description="arguments")
    def arguments(self, event: AuditEvent) -> SafeString:
        return pretty_json(event.arguments_json)

    @admin.display(description="previous MAC")
    def previous_mac(self, event: AuditEvent) -> SafeString:
        return short_hash(event.prev_mac, "previous MAC")

    @admin.display(description="MAC")
    def event_mac(self, event: AuditEvent) -> SafeString:
        return short_hash(event.mac, "MAC")

    def get_urls(self):
        verify = self.admin_site.admin_view(self.verify_view)
        export = self.admin_site.admin_view(self.export_view)
        return [
            path("verify/", verify, name="audit_auditevent_verify"),
            path("export/", export, name="audit_auditevent_export"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None):
        query = request.GET.copy()
        for name in NOT_FILTERS:
            query.pop(name, None)
        context = {
            "title": "Audit log",
            "log_state": log_state(),
            "export_query": query.urlencode(),
            "export_formats": list(FORMATS),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def verify_view(self, request: HttpRequest):
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:audit_auditevent_changelist"))
        report = verify_log(settings.FORGE_AUDIT_LOG)
        done = {"at": timezone.now(), "by": signed_in(request.user).get_username(), "ok": report.ok}
        cache.set(LAST_FULL_CHECK, {**done, "report": str(report)}, None)
        level = messages.SUCCESS if report.ok else messages.ERROR
        self.message_user(request, f"Audit log check: {report}", level)
        return HttpResponseRedirect(reverse("admin:audit_auditevent_changelist"))

    def export_view(self, request: HttpRequest) -> HttpResponseBase:
        """POST: the filtered range (the list's query string, `query`) as `format`, recorded first."""
        listed = reverse("admin:audit_auditevent_changelist")
        if request.method != "POST":
            return HttpResponseRedirect(listed)
        user = signed_in(request.user)
        query = request.POST.get("query", "")
        back = f"{listed}?{query}" if query else listed
        allowed = is_operator(user) and self.has_view_permission(request)
        filters = {name: str(value) for name, value in QueryDict(query).items() if value and name not in NOT_FILTERS}
        try:
            events = self._filtered(request, query) if allowed else AuditEvent.objects.none()
            export = do_export_events(
                events,
                fmt=request.POST.get("format", ""),
                filters=filters,
                acting_user=user.get_username(),
                allowed=allowed,
            )
        except Refusal as refusal:
            if refusal.status == 403:
                raise PermissionDenied(refusal.message) from None
            refused(request, refusal)
            return HttpResponseRedirect(back)
        return export.response(asynchronous=isinstance(request, ASGIRequest))

    def _filtered(self, request: HttpRequest, query: str) -> QuerySet[AuditEvent]:
        """The events the list shows for `query`: the list's own filters and search, applied to all pages."""
        listing = copy.copy(request)
        listing.GET = QueryDict(query)
        listing.method = "GET"
        try:
            changelist = self.get_changelist_instance(listing)
        except IncorrectLookupParameters:
            raise Refusal("FORGE_ERR_BAD_FILTER", "The filters are not valid; clear them and filter again.") from None
        problems = [
            spec.problem for spec in changelist.filter_specs if isinstance(spec, TimeRangeFilter) and spec.problem
        ]
        if problems:
            raise Refusal("FORGE_ERR_BAD_FILTER", f"Nothing exported: {'; '.join(problems)}.", status=400)
        return changelist.queryset


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(ReadOnlyModelAdmin):
    Media = FormattedValues
    list_display = ("size", "signed", "root_hash")
    fields = ("size", "signed", "root_hash", "note")
    readonly_fields = fields
    ordering = ("-size",)

    @admin.display(description="signed", ordering="created_at")
    def signed(self, checkpoint: AuditCheckpoint) -> SafeString:
        return local_time(checkpoint.created_at)

    @admin.display(description="root hash")
    def root_hash(self, checkpoint: AuditCheckpoint) -> SafeString:
        return short_hash(_b64(checkpoint.root), "root hash")
