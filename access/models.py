"""Who may reach the MCP server, and what: client tokens, MCP sessions, the master switch and per-session
grants (access requests). The state every daphne process shares, read by the MCP edge on every call and
by the console's screens and operator API.

These models were born in `mcp_api` and keep its tables (`db_table`), so a database migrated before they
moved here works unchanged (access/migrations/0001_initial.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import User
from django.db import models
from django.utils import timezone

from forge_core.live import BROADCAST_GROUP as BROADCAST_GROUP  # its home; the transports look it up here


class BearerToken(models.Model):
    """What every kind of bearer token shares (client, operator and runtime connector tokens; `forge_core.tokens`
    mints them): the stored digest and first characters, never the raw value, and revocation. Abstract: each
    kind keeps its own table, so a value of one kind is never looked up among another's."""

    kind: ClassVar[str]  # "client", "operator" or "runtime", as the audit log names it
    holder_field: ClassVar[str]  # the foreign key to the user the token acts for

    label = models.CharField(max_length=200, help_text="What the token is for, shown in the audit log.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, help_text="The first characters, to recognise it.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"

    @property
    def holder(self) -> AbstractBaseUser:
        """The user the token acts for: the foreign key each kind names in `holder_field`."""
        user: AbstractBaseUser = getattr(self, self.holder_field)
        return user

    def is_usable(self, now: datetime | None = None) -> bool:
        return self.revoked_at is None

    def mark_revoked(self) -> bool:
        """Revoke it in the database now, unless it already is: False when it was (nothing changed). The
        instance is left as it is, for the caller to refresh once its transaction has committed."""
        manager = type(self)._default_manager
        return bool(manager.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()))

    def audit_identity(self) -> dict[str, Any]:
        """Which token an audit row is about, and nothing that would let anyone use it: its id, kind, label,
        holder and first characters (as the console lists it). Not the digest: it is the lookup key of a
        credential and the log has no use for it. Keys avoid the names the audit log redacts (`token`)."""
        return {
            "token_id": self.pk,
            "kind": self.kind,
            "label": self.label,
            "owner": self.holder.get_username(),
            "prefix": self.prefix,
        }


class ClientToken(BearerToken):
    """A bearer token for one MCP client. Only the SHA-256 digest of the token is stored."""

    kind = "client"
    holder_field = "owner"

    label = models.CharField(max_length=200, help_text="The client's attribution, shown in the audit log.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="client_tokens")
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(BearerToken.Meta):
        db_table = "mcp_api_clienttoken"

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return super().is_usable(now) and (self.expires_at is None or self.expires_at > now)

    @property
    def principal(self) -> str:
        return f"token:{self.pk}"


class ClientPrincipal(User):
    """A user that client tokens act for, as the console's principals screen shows it: which projects it may
    see (`access.principals`). A proxy of the user: no table of its own."""

    class Meta:
        proxy = True
        verbose_name = "client principal"


class Transport(models.TextChoices):
    STREAMABLE_HTTP = "streamable-http"
    SSE = "sse"
    HANDLE = "handle", "stateless handle"  # minted by session.request_access for 2026-07-28 clients


class McpSession(models.Model):
    """One MCP session, bound to the token that opened it. Ended sessions are kept for the record."""

    id = models.CharField(primary_key=True, max_length=64, editable=False)
    token = models.ForeignKey(ClientToken, on_delete=models.CASCADE, related_name="sessions")
    transport = models.CharField(max_length=20, choices=Transport.choices)
    protocol_version = models.CharField(max_length=20, blank=True)
    client_info = models.JSONField(default=dict, blank=True)
    # What the client declared it can do at initialize (sampling, elicitation, ...): a tool may ask the client
    # only for what it declared (`mcp_api.dialogue`), and any process may serve the asking call.
    client_capabilities = models.JSONField(default=dict, blank=True)
    initialized = models.BooleanField(default=False)
    context_generation = models.PositiveIntegerField(default=0)
    # The least severe MCP log level (RFC 5424's name) the client asked for with logging/setLevel; empty until
    # it asks, and then it hears no log messages. A column, not a stream's memory: any process may serve the call.
    log_level = models.CharField(max_length=9, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="To the minute.")
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "mcp_api_mcpsession"
        ordering = ["-created_at"]
        verbose_name = "MCP session"  # the side menu and page titles say MCP, not "Mcp"
        verbose_name_plural = "MCP sessions"

    def __str__(self) -> str:
        return f"{self.id[:8]}… {self.client_name or self.token.label}"

    @property
    def client_name(self) -> str:
        return str(self.client_info.get("name", "")) if isinstance(self.client_info, dict) else ""

    @property
    def group(self) -> str:
        return session_group(self.id)


def session_group(session_id: str) -> str:
    """The channel-layer group every stream of a session joins."""
    return f"mcp.session.{session_id}"


def token_group(token_id: int) -> str:
    """The channel-layer group every stream opened with a token joins, so revocation closes them."""
    return f"mcp.token.{token_id}"


class OpenStream(models.Model):
    """One event stream a token holds open (a session's GET /mcp, a /sse stream, a subscriptions/listen),
    counted against FORGE_MAX_STREAMS_PER_TOKEN (`access.limits`). The process holding the stream marks it
    seen at every recheck and deletes the row when it closes; the row of a process that died without closing
    it stops counting once it has gone unseen for two rechecks."""

    token = models.ForeignKey(ClientToken, on_delete=models.CASCADE, related_name="open_streams")
    session_id = models.CharField(max_length=64, blank=True)
    opened_at = models.DateTimeField(default=timezone.now, editable=False)
    seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["token", "seen_at"])]


class ServerState(models.Model):
    """The one row of switches operators turn in the console. Read on every call, by every process."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    mcp_enabled = models.BooleanField(default=False, help_text="Off on a fresh install: nothing reaches a client.")
    changed_by = models.CharField(max_length=150, blank=True, editable=False)
    changed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "mcp_api_serverstate"
        verbose_name = "server state"

    def __str__(self) -> str:
        return f"MCP {'on' if self.mcp_enabled else 'off'}"


class AccessState(models.TextChoices):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    REVOKED = "revoked"
    ENDED = "ended"


class AccessRequest(models.Model):
    """A session's request to work on a project, and the operator's answer: the grant of gate 2.

    Keyed by (principal, session handle, project). The handle is the MCP session id, or for stateless
    clients a handle minted for them (an `McpSession` of transport `handle`). Only `pending -> allowed |
    denied`, `allowed -> revoked` and `pending | allowed -> ended` happen, in `access.grants`.
    """

    token = models.ForeignKey(ClientToken, on_delete=models.CASCADE, related_name="access_requests")
    session = models.ForeignKey(McpSession, on_delete=models.CASCADE, related_name="access_requests")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="access_requests")
    state = models.CharField(max_length=10, choices=AccessState.choices, default=AccessState.PENDING, db_index=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    decided_at = models.DateTimeField(null=True, blank=True, editable=False)
    decided_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        db_table = "mcp_api_accessrequest"
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["token", "session", "project"], name="access_request_per_session_project")
        ]

    def __str__(self) -> str:
        return f"{self.token.label} on {self.project.slug}: {self.state}"


class OutboxMessage(models.Model):
    """A message for open streams from a process that holds none and cannot reach them (a `manage.py` command
    on the embedded in-memory channel layer): the server process follows these rows and sends each one
    through its own layer (`access.outbox`). Kept minutes, then pruned."""

    group = models.CharField(max_length=200)
    message = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["id"]


class RuntimeToken(BearerToken):
    """A runtime connector's bearer token (`frt_...`): it posts the runtime snapshots of the one project it is
    bound to, and nothing else (never /mcp, never the operator API). Only its SHA-256 digest is stored. Its
    holder is the operator who made it, named in the audit rows of its creation and revocation."""

    kind = "runtime"
    holder_field = "created_by"

    label = models.CharField(max_length=200, help_text="The connector's name (the PLC or gateway), shown in the log.")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="runtime_tokens")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runtime_tokens")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(BearerToken.Meta):
        verbose_name = "runtime connector token"

    def audit_identity(self) -> dict[str, Any]:
        return {**super().audit_identity(), "project": self.project.slug}

    @property
    def principal(self) -> str:
        """Who posted a snapshot, as its audit row names it: the connector, never the operator who made it."""
        return f"runtime:{self.pk}"


class RuntimeValue(models.Model):
    """The latest value a runtime connector reported for one variable of a project, with whether the runtime
    forces it and when the connector read it (`observed_at`, the snapshot's timestamp). One row per
    (project, variable): a newer snapshot replaces it, an older one arriving late does not (`access.runtime`)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="runtime_values")
    variable = models.CharField(max_length=200)
    value = models.JSONField()
    forced = models.BooleanField()
    observed_at = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)
    token = models.ForeignKey(RuntimeToken, on_delete=models.SET_NULL, null=True, related_name="values")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "variable"], name="runtime_value_per_variable")]

    def __str__(self) -> str:
        return f"{self.variable} = {self.value!r}{' (forced)' if self.forced else ''}"
