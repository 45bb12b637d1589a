"""State changes of client identity and sessions, each one transactional function that also audits.

Views, consumers, console actions and management commands call these; none of them saves a
`ClientToken` or `McpSession` directly.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from access import hotpath, limits, peers
from access.grants import end_grants
from access.models import (
    BearerToken,
    ClientToken,
    McpSession,
    ServerState,
    Transport,
    session_group,
    token_group,
)
from audit.models import EventKind
from audit.services import record
from confirmations.services import do_cancel_confirmations
from forge_core.errors import AuditUnavailable
from forge_core.live import notify_console, notify_streams, notify_tools_changed
from forge_core.tokens import CLIENT_TOKEN_PREFIX, mint_token, presented_digest
from forge_core.tokens import token_digest as token_digest  # where the tests and benchmarks look it up

LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_SESSION_ID_CHARS = 64  # ids are 32 characters (`new_session_id`); a longer one names no session


@dataclass(frozen=True)
class NewToken:
    token: ClientToken
    raw: str


def do_create_token(
    *,
    owner: User,
    label: str,
    expires_at: datetime | None = None,
    acting_user: str = "",
    owner_created: bool = False,
) -> NewToken:
    """Create a client token and return it with its raw value, which is shown once and never stored.
    `owner_created`: the owner was made for this token in the caller's transaction (the audit row says so)."""
    minted = mint_token(CLIENT_TOKEN_PREFIX)
    with transaction.atomic():
        token = ClientToken.objects.create(
            label=label, owner=owner, digest=minted.digest, prefix=minted.shown, expires_at=expires_at
        )
        record_token_event(
            EventKind.TOKEN_CREATED,
            token,
            outcome="created",
            called_by=acting_user or owner.get_username(),
            expires_at=str(expires_at or ""),
            **({"owner_created": True} if owner_created else {}),
        )
    return NewToken(token=token, raw=minted.raw)


def do_revoke_token(token: ClientToken, *, acting_user: str) -> None:
    """Revoke a token at once: its next request is refused, its open streams are closed and the pending
    confirmations of its sessions are cancelled."""
    with transaction.atomic():
        if not token.mark_revoked():
            return
        end_grants(reason="token revoked", token=token)
        sessions = McpSession.objects.filter(token=token).values_list("id", flat=True)
        do_cancel_confirmations("token_revoked", sessions=sessions, acting_user=acting_user)
        record_token_event(EventKind.TOKEN_REVOKED, token, outcome="revoked", called_by=acting_user)
        transaction.on_commit(lambda: notify_streams(token_group(token.pk), "mcp.revoked"))
    token.refresh_from_db(fields=["revoked_at"])


def record_token_event(kind: EventKind, token: BearerToken, *, outcome: str, called_by: str, **details: Any) -> None:
    """The audit row of a token's creation or revocation, client or operator token alike: the token as
    `audit_identity` names it (never its raw value or digest) with `details` beside it, under its label."""
    record(
        kind,
        arguments={**token.audit_identity(), **details},
        outcome=outcome,
        called_by=called_by,
        client_label=token.label,
    )


def record_refused_token(path: str, *, outcome: str, called_by: str = "") -> None:
    """The audit row of a refused credential; the refusal stands even when it cannot be written."""
    with contextlib.suppress(AuditUnavailable):
        record(EventKind.AUTH_REFUSED, arguments={"path": path}, outcome=outcome, called_by=called_by)


def authenticate_certificate(chain_pem: Sequence[str], path: str) -> ClientToken:
    """The client token a presented team certificate acts through (`access.peers`); a refused one is audited as an
    attempt and raised as `CertificateRefused`."""
    try:
        token = peers.token_for(peers.verify(chain_pem))
        if not token.is_usable() or not token.owner.is_active:
            raise peers.CertificateRefused(
                "access_revoked",
                "An operator revoked this certificate's access in the Forge console; ask them, or the caretaker.",
            )
    except peers.CertificateRefused as refused:
        with contextlib.suppress(AuditUnavailable):
            record(
                EventKind.AUTH_REFUSED,
                arguments={"path": path, **refused.audit_details()},
                outcome=f"bad_certificate: {refused.reason}",
            )
        raise
    return token


def authenticate_token(raw: str | None, *, session_id: str | None = None) -> ClientToken | None:
    """The usable token for a raw bearer value, or None. `session_id`, the session the request names, is read
    with it (`find_session` then needs no query of its own)."""
    digest = presented_digest(raw, CLIENT_TOKEN_PREFIX)
    if digest is None:
        return None
    if session_id is not None and not 0 < len(session_id) <= MAX_SESSION_ID_CHARS:
        session_id = None
    token = hotpath.token_by_digest(digest, session_id)
    now = timezone.now()
    if token is None or not token.is_usable(now) or not token.owner.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        # At most one write a minute per token: enough for an operator, nothing on the hot path.
        ClientToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def authenticate_bearer(raw: str, path: str, *, session_id: str | None = None) -> ClientToken | None:
    """The usable token for a presented bearer value; a refused one is audited as an attempt."""
    token = authenticate_token(raw, session_id=session_id)
    if token is None:
        record_refused_token(path, outcome="bad_token")
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
    client_capabilities: dict | None = None,
) -> McpSession:
    """Open a session for a token, and audit it; refused (`limits.LimitReached`, audited) when the token holds
    its cap of open sessions, or of stateless handles."""
    try:
        return _open_session(token, transport, protocol_version, client_info, initialized, client_capabilities)
    except limits.LimitReached as refused:
        limits.record_limit_reached(token, refused, transport=str(transport))
        raise


def _open_session(
    token: ClientToken,
    transport: Transport,
    protocol_version: str,
    client_info: dict | None,
    initialized: bool,
    client_capabilities: dict | None = None,
) -> McpSession:
    with transaction.atomic():
        limits.check_session_cap(token, transport)
        session = McpSession.objects.create(
            id=new_session_id(),
            token=token,
            transport=transport,
            protocol_version=protocol_version,
            client_info=client_info or {},
            client_capabilities=client_capabilities or {},
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
    if not session_id or len(session_id) > MAX_SESSION_ID_CHARS:
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
        do_cancel_confirmations("session_ended", sessions=[session.id], acting_user=session.token.owner.get_username())
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
    """Turn MCP on or off for every client; open streams are told their tool list changed. Switching it off
    ends every grant and cancels every pending confirmation.

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
            do_cancel_confirmations("mcp_disabled", sessions=None, acting_user=acting_user)
        notify_console("mcp")
        record(
            EventKind.MCP_SWITCHED,
            arguments={"enabled": enabled},
            outcome="on" if enabled else "off",
            called_by=acting_user,
        )
        notify_tools_changed()
    return True
