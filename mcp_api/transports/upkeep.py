"""The database side of a stream that stays open after its exchange: whether it may stay open, and the
legacy session that ends with its stream. Each runs in a hop of its own, now and then, not per message."""

from __future__ import annotations

from access import services
from access.models import ClientToken, McpSession


def stream_may_stay_open(token_id: int, session_id: str | None) -> bool:
    """Whether a stream may stay open: its token is still usable and its session has not ended."""
    token = ClientToken.objects.select_related("owner").filter(pk=token_id).first()
    if token is None or not token.is_usable() or not token.owner.is_active:
        return False
    return session_id is None or McpSession.objects.filter(pk=session_id, ended_at__isnull=True).exists()


def end_session_of_stream(session_id: str) -> None:
    """End the session whose stream closed (the legacy transport's session lives as long as its stream)."""
    session = McpSession.objects.select_related("token__owner").filter(pk=session_id).first()
    if session is not None:
        services.do_end_session(session, reason="stream closed")
