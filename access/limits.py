"""Per-token caps: how much one client token may hold open at once, so that one client (a looping agent, a
leaked token) cannot fill the tables every other client and every operator screen reads.

Each cap is a setting (`FORGE_MAX_*`, README "Configuration") and is checked where the thing is created,
inside the creating transaction: the token's row is locked first, so two concurrent opens by one token
count in turn (PostgreSQL; SQLite's IMMEDIATE transactions are serialized already), and the count is one
indexed COUNT per creation, never per message. A token at a cap is refused with `LimitReached`, which names
the cap, its setting and what to do, and changes nothing; the edge that maps it audits the attempt.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from access.models import AccessRequest, AccessState, ClientToken, McpSession, OpenStream, Transport
from audit.models import EventKind
from audit.services import record
from confirmations.models import ConfirmationState, PendingConfirmation
from forge_core.errors import AuditUnavailable, Refusal


class LimitReached(Refusal):
    """A token already holds as many of something as its cap allows: nothing was created (HTTP 429)."""

    code = "FORGE_ERR_LIMIT_REACHED"
    status = 429


@dataclass(frozen=True)
class Cap:
    """One per-token cap: the setting that holds it, what it counts, and how to get under it again."""

    setting: str
    what: str
    remedy: str

    @property
    def limit(self) -> int:
        return int(getattr(settings, self.setting))

    def refuse_if_full(self, token: ClientToken, held: QuerySet) -> None:
        """Lock the token's row, then refuse when `held` (what it holds now) has reached the cap."""
        ClientToken.objects.select_for_update().filter(pk=token.pk).values_list("pk", flat=True).first()
        limit = self.limit
        count = held.count()
        if count >= limit:
            raise LimitReached(
                LimitReached.code,
                f"This token already holds {count} {self.what} ({self.setting} is {limit}); nothing was "
                f"created. {self.remedy}",
                limit=limit,
                setting=self.setting,
            )


SESSIONS = Cap(
    "FORGE_MAX_SESSIONS_PER_TOKEN",
    "open sessions",
    "End one you no longer use (DELETE /mcp with its Mcp-Session-Id, or close its /sse stream) and try again, "
    "or ask an operator to end old sessions in the Forge console.",
)
STREAMS = Cap(
    "FORGE_MAX_STREAMS_PER_TOKEN",
    "open streams",
    "Close a stream you no longer read (a GET /mcp, an /sse stream or a subscriptions/listen) and try again; a "
    "stream whose connection was lost stops counting within two stream rechecks (FORGE_STREAM_RECHECK_SECONDS).",
)
HANDLES = Cap(
    "FORGE_MAX_HANDLES_PER_TOKEN",
    "stateless session handles",
    "Pass the session_handle you already have instead of asking for a new one, or ask an operator to end old "
    "ones in the Forge console.",
)
ACCESS_REQUESTS = Cap(
    "FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN",
    "access requests waiting for an operator",
    "Wait for an operator to decide the ones you raised (session.status shows them) before asking for more.",
)
PENDING_CONFIRMATIONS = Cap(
    "FORGE_MAX_PENDING_PER_TOKEN",
    "changes waiting for an operator's confirmation",
    "Wait for an operator to decide them (editor.confirm tells you each outcome), or stage your changes in a "
    "change group instead.",
)


def check_session_cap(token: ClientToken, transport: Transport) -> None:
    """Refuse a new session (or stateless handle) when the token holds its cap of open ones."""
    open_sessions = McpSession.objects.filter(token=token, ended_at__isnull=True)
    if transport == Transport.HANDLE:
        HANDLES.refuse_if_full(token, open_sessions.filter(transport=Transport.HANDLE))
    else:
        SESSIONS.refuse_if_full(token, open_sessions.exclude(transport=Transport.HANDLE))


def counted_since() -> datetime:
    """Streams seen since this moment count: the holding process marks each at every recheck, so one unseen
    for two rechecks (and two keep-alives, the recheck's granularity) belongs to a process that is gone."""
    seconds = 2 * (settings.FORGE_STREAM_RECHECK_SECONDS + settings.FORGE_SSE_KEEPALIVE_SECONDS)
    return timezone.now() - timedelta(seconds=seconds)


def do_open_stream(token: ClientToken, session_id: str = "") -> int:
    """Count a stream the token is opening and return its id; refused (audited) at the token's stream cap."""
    try:
        with transaction.atomic():
            STREAMS.refuse_if_full(token, OpenStream.objects.filter(token=token, seen_at__gte=counted_since()))
            return OpenStream.objects.create(token=token, session_id=session_id).pk
    except LimitReached as refused:
        record_limit_reached(token, refused, session=session_id)
        raise


def stream_seen(stream_id: int) -> None:
    """The stream is still open (its process rechecked it): it keeps counting."""
    OpenStream.objects.filter(pk=stream_id).update(seen_at=timezone.now())


def stream_closed(stream_id: int) -> None:
    """The stream has closed: it no longer counts."""
    OpenStream.objects.filter(pk=stream_id).delete()


def check_access_request_cap(token: ClientToken, *, besides: AccessRequest) -> None:
    """Refuse the access request `besides` (being raised) when the token has its cap of others still waiting."""
    waiting = AccessRequest.objects.filter(token=token, state=AccessState.PENDING).exclude(pk=besides.pk)
    ACCESS_REQUESTS.refuse_if_full(token, waiting)


def check_pending_confirmation_cap(token: ClientToken) -> None:
    """Refuse a new direct-write proposal when the token's sessions have their cap of them pending."""
    sessions = McpSession.objects.filter(token=token).values("id")
    PENDING_CONFIRMATIONS.refuse_if_full(
        token, PendingConfirmation.objects.filter(state=ConfirmationState.PENDING, session_id__in=sessions)
    )


def record_limit_reached(token: ClientToken, refused: LimitReached, **arguments: Any) -> None:
    """The audit row of an attempt refused at a cap (outside the transaction the refusal rolled back); the
    refusal stands even when the row cannot be written."""
    with contextlib.suppress(AuditUnavailable):
        record(
            EventKind.REQUEST_REFUSED,
            arguments={**arguments, "setting": refused.details["setting"], "limit": refused.details["limit"]},
            outcome="limit_reached",
            called_by=token.owner.get_username(),
            client_label=token.label,
        )
