"""State changes of client identity and sessions, each one transactional function that also audits.

Views, consumers, console actions and management commands call these; none of them saves a
`ClientToken` or `McpSession` directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from access import hotpath
from access.grants import end_grants
from access.models import BROADCAST_GROUP, ClientToken, McpSession, ServerState, Transport, session_group, token_group
from audit.models import EventKind
from audit.services import record
from confirmations.services import do_cancel_confirmations
from forge_core.errors import AuditUnavailable
from forge_core.live import notify_console, notify_streams

TOKEN_PREFIX = "fmcp_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_digest(raw: str) -> str:
    # Tokens carry 256 bits of randomness, so a plain SHA-256 is the right digest: a slow password hash
    # would add nothing but latency to every call.
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class NewToken:
    token: ClientToken
    raw: str


def do_create_token(*, owner: User, label: str, expires_at: datetime | None = None, acting_user: str = "") -> NewToken:
    """Create a client token and return it with its raw value, which is shown once and never stored."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ClientToken.objects.create(
            label=label, owner=owner, digest=token_digest(raw), prefix=raw[:12], expires_at=expires_at
        )
        record(
            EventKind.TOKEN_CREATED,
            arguments={"label": label, "owner": owner.get_username(), "expires_at": str(expires_at or "")},
            outcome="created",
            called_by=acting_user or owner.get_username(),
            client_label=label,
        )
    return NewToken(token=token, raw=raw)


def do_revoke_token(token: ClientToken, *, acting_user: str) -> None:
    """Revoke a token at once: its next request is refused and its open streams are closed."""
    with transaction.atomic():
        updated = ClientToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if not updated:
            return
        end_grants(reason="token revoked", token=token)
        record(
            EventKind.TOKEN_REVOKED,
            arguments={"token": token.prefix},
            outcome="revoked",
            called_by=acting_user,
            client_label=token.label,
        )
        transaction.on_commit(lambda: notify_streams(token_group(token.pk), "mcp.revoked"))
    token.refresh_from_db(fields=["revoked_at"])


def authenticate_token(raw: str | None) -> ClientToken | None:
    """The usable token for a raw bearer value, or None."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = hotpath.token_by_digest(token_digest(raw))
    now = timezone.now()
    if token is None or not token.is_usable(now) or not token.owner.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        # At most one write a minute per token: enough for an operator, nothing on the hot path.
        ClientToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def authenticate_bearer(raw: str, path: str) -> ClientToken | None:
    """The usable token for a presented bearer value; a refused one is audited as an attempt."""
    token = authenticate_token(raw)
    if token is None:
        with contextlib.suppress(AuditUnavailable):  # the refusal stands either way
            record(EventKind.AUTH_REFUSED, arguments={"path": path}, outcome="bad_token")
    return token


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


def do_open_session(
    token: ClientToken,
    *,
    transport: Transport,
    protocol_version: str = "",
    client_info: dict | None = None,
    initialized: bool = False,
) -> McpSession:
    """Open a session for a token, and audit it."""
    with transaction.atomic():
        session = McpSession.objects.create(
            id=new_session_id(),
            token=token,
            transport=transport,
            protocol_version=protocol_version,
            client_info=client_info or {},
            initialized=initialized,
        )
        notify_console("sessions")
        record(
            EventKind.SESSION_OPENED,
            arguments={"transport": str(transport), "protocol_version": protocol_version, "client": client_info or {}},
            outcome="opened",
            called_by=token.owner.get_username(),
            session=session.id,
            client_label=token.label,
        )
    return session


def mint_handle(token: ClientToken, revision: str, client_info: dict) -> McpSession:
    """A session handle for a stateless client: an id bound to its principal, passed back as an argument."""
    return do_open_session(token, transport=Transport.HANDLE, protocol_version=revision, client_info=client_info)


def find_session(token: ClientToken, session_id: str | None) -> McpSession | None:
    """The open session with this id opened by this token; another principal's id is 'no such session'."""
    if not session_id or len(session_id) > 64:
        return None
    session = hotpath.open_session_of(token, session_id)
    if session is not None:
        now = timezone.now()
        if session.last_seen_at is None or now - session.last_seen_at > LAST_USED_RESOLUTION:
            # At most one write a minute per session: the console's "last seen", not a hot-path cost.
            McpSession.objects.filter(pk=session.pk).update(last_seen_at=now)
            session.last_seen_at = now
    return session


def do_end_session(session: McpSession, *, reason: str) -> bool:
    """End a session (DELETE, stream closed, token revoked). Returns False when it had already ended."""
    with transaction.atomic():
        ended = McpSession.objects.filter(pk=session.pk, ended_at__isnull=True).update(ended_at=timezone.now())
        if not ended:
            return False
        end_grants(reason="session ended", session=session)
        do_cancel_confirmations(session.id, acting_user=session.token.owner.get_username())
        notify_console("sessions")
        record(
            EventKind.SESSION_ENDED,
            arguments={"reason": reason},
            outcome="ended",
            called_by=session.token.owner.get_username(),
            session=session.id,
            client_label=session.token.label,
        )
        transaction.on_commit(lambda: notify_streams(session_group(session.id), "mcp.session_ended"))
    return True


def do_switch_mcp(enabled: bool, *, acting_user: str) -> bool:
    """Turn MCP on or off for every client; open streams are told their tool list changed.

    Returns False when it was already in that position (nothing recorded).
    """
    with transaction.atomic():
        state, _ = ServerState.objects.select_for_update().get_or_create(pk=1)
        if state.mcp_enabled == enabled:
            return False
        state.mcp_enabled = enabled
        state.changed_by = acting_user
        state.changed_at = timezone.now()
        state.save()
        if not enabled:
            end_grants(reason="MCP switched off")
        notify_console("mcp")
        record(
            EventKind.MCP_SWITCHED,
            arguments={"enabled": enabled},
            outcome="on" if enabled else "off",
            called_by=acting_user,
        )
        transaction.on_commit(lambda: notify_streams(BROADCAST_GROUP, "mcp.tools_changed"))
    return True
