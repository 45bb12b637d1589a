"""The database side of a stream that stays open after its exchange: whether it may stay open (marking it
seen, so it keeps counting against its token's stream cap), and what its closing ends (its count, and the
legacy session that ends with its stream). Each runs in a hop of its own, now and then, not per message."""

from __future__ import annotations

from collections.abc import Sequence

from access import limits, services
from access.models import ClientToken, McpSession
from access.peers import CertificateRefused


def stream_may_stay_open(
    token_id: int, session_id: str | None, stream_id: int | None = None, *, certificate: Sequence[str] = ()
) -> bool:
    """Whether a stream may stay open: its token is still usable (and the certificate it authenticated with
    still passes every check), and its session has not ended."""
    token = ClientToken.objects.select_related("owner").filter(pk=token_id).first()
    if token is None or not token.is_usable() or not token.owner.is_active:
        return False
    if certificate:
        try:
            if services.authenticate_certificate(certificate, "stream").pk != token.pk:
                return False
        except CertificateRefused:
            return False
    if session_id is not None and not McpSession.objects.filter(pk=session_id, ended_at__isnull=True).exists():
        return False
    if stream_id is not None:
        limits.stream_seen(stream_id)
    return True


def stream_ended(stream_id: int | None, session_id: str | None, *, end_session: bool) -> None:
    """A stream has closed: it no longer counts against its token's cap, and a legacy stream's session ends."""
    if stream_id is not None:
        limits.stream_closed(stream_id)
    if end_session and session_id:
        end_session_of_stream(session_id)


def end_session_of_stream(session_id: str) -> None:
    """End the session whose stream closed (the legacy transport's session lives as long as its stream)."""
    session = McpSession.objects.select_related("token__owner").filter(pk=session_id).first()
    if session is not None:
        services.do_end_session(session, reason="stream closed")
