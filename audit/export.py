"""Exporting a range of the audit log, as an operator narrowed it down on the console's audit screen.

`do_export_events` is the one way an export starts: it refuses one the operator may not make (and records the
refusal), bounds the range to the events committed when it started and to `EXPORT_MAX_EVENTS`, and records
the export itself (kind `audit_exported`: the format, the filters, how many events, through which `seq`)
before a byte of it is served. The body is then streamed in pages of `PAGE` events read by `seq`, so neither
the server nor the browser holds the whole range:

- JSONL: one event per line, each line exactly the event's mirror line and Merkle leaf data
  (`audit.services.event_line`: the row with its MAC, canonical JSON), so an auditor can check it against
  the mirror, recompute MACs with the key, or leaves without it.
- CSV: a header, then one row per event: the fields of `CSV_COLUMNS`, `ts` as the mirror writes it and the
  arguments as canonical JSON. A cell that a spreadsheet would run as a formula (it starts with `=`, `+`,
  `-`, `@`, a tab or a carriage return: arguments come from clients) gets a leading `'`, as OWASP advises;
  the JSONL holds every value exactly.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db.models import Max, QuerySet
from django.http import StreamingHttpResponse

from audit.models import AuditEvent, EventKind
from audit.services import event_line, format_ts, record
from forge_core.errors import Refusal

EXPORT_MAX_EVENTS = 100_000
PAGE = 2000
FORMATS = {"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}
TEXT_COLUMNS = ("kind", "tool", "outcome", "called_by", "client_label", "session", "project")
CSV_COLUMNS = ("seq", "ts", *TEXT_COLUMNS, "arguments", "prev_mac", "mac")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Export:
    """A recorded export: the events (in `seq` order, through `through`), how many, and in which format."""

    events: QuerySet[AuditEvent]
    format: str
    count: int
    through: int

    @property
    def filename(self) -> str:
        return f"forge-audit-through-{self.through}.{self.format}"

    def response(self, *, asynchronous: bool) -> StreamingHttpResponse:
        """The download, streamed: page by page on the event loop's terms when served over ASGI (a plain
        iterator there would be read whole into memory first), as a plain iterator otherwise."""
        body = self.chunks_async() if asynchronous else self.chunks()
        response = StreamingHttpResponse(body, content_type=FORMATS[self.format])
        response["Content-Disposition"] = f'attachment; filename="{self.filename}"'
        response["X-Content-Type-Options"] = "nosniff"
        return response

    def chunks(self) -> Iterator[bytes]:
        yield self.head()
        after = 0
        while (page := self.page(after)) is not None:
            data, after = page
            yield data

    async def chunks_async(self) -> AsyncIterator[bytes]:
        yield self.head()
        after = 0
        while (page := await sync_to_async(self.page)(after)) is not None:
            data, after = page
            yield data

    def head(self) -> bytes:
        return _csv_text([CSV_COLUMNS]) if self.format == "csv" else b""

    def page(self, after: int) -> tuple[bytes, int] | None:
        """The events after `seq` `after`, up to PAGE of them, encoded, with the last one's seq; None past the end."""
        events = list(self.events.filter(seq__gt=after)[:PAGE])
        if not events:
            return None
        if self.format == "csv":
            return _csv_text(csv_row(event) for event in events), events[-1].seq
        return "".join(f"{event_line(event)}\n" for event in events).encode(), events[-1].seq


def csv_row(event: AuditEvent) -> list[str]:
    texts = (getattr(event, name) for name in TEXT_COLUMNS)
    row = (str(event.seq), format_ts(event.ts), *texts, event.arguments_json, event.prev_mac, event.mac)
    return [_inert(cell) for cell in row]


def _inert(cell: str) -> str:
    return f"'{cell}" if cell.startswith(FORMULA_STARTS) else cell


def _csv_text(rows) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\r\n").writerows(rows)
    return text.getvalue().encode()


def do_export_events(
    events: QuerySet[AuditEvent], *, fmt: str, filters: Mapping[str, str], acting_user: str, allowed: bool
) -> Export:
    """Start an export of `events` (already filtered) for `acting_user`, recorded before it is served.

    Refused, and the refusal recorded, when the operator may not export (`allowed`, 403), the format is
    unknown (400) or the range holds more than EXPORT_MAX_EVENTS (400, saying how many it holds)."""
    arguments = {"format": fmt, "filters": dict(filters)}
    if not allowed:
        raise _refused(
            arguments,
            acting_user,
            "FORGE_ERR_FORBIDDEN",
            "Exporting the audit log needs a console operator with the right to view it; ask an operator "
            "to export the range for you, or to add you to the operators group.",
            status=403,
        )
    if fmt not in FORMATS:
        raise _refused(arguments, acting_user, "FORGE_ERR_BAD_FORMAT", "Export as jsonl or csv.", status=400)
    through = AuditEvent.objects.aggregate(last=Max("seq"))["last"] or 0
    bounded = events.filter(seq__lte=through).order_by("seq")
    count = bounded.count()
    if count > EXPORT_MAX_EVENTS:
        raise _refused(
            {**arguments, "events": count},
            acting_user,
            "FORGE_ERR_EXPORT_TOO_LARGE",
            f"The filtered range holds {count:,} events, more than the {EXPORT_MAX_EVENTS:,} one export may "
            "hold; narrow it (a shorter time range, a kind, a principal) and export it in parts.",
            status=400,
        )
    record(
        EventKind.AUDIT_EXPORTED,
        arguments={**arguments, "events": count, "through_seq": through},
        outcome="ok",
        called_by=acting_user,
    )
    return Export(events=bounded, format=fmt, count=count, through=through)


def _refused(arguments: Mapping[str, object], acting_user: str, code: str, message: str, *, status: int) -> Refusal:
    record(EventKind.AUDIT_EXPORTED, arguments=arguments, outcome=code, called_by=acting_user)
    return Refusal(code, message, status=status)
