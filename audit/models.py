"""The audit log's tables: events (a MAC chain), the Merkle tree over them, and signed checkpoints.

Rows are only ever added, by `audit.services`; the model refuses to update or delete them and so do
database triggers (migration 0002), so a change behind the model's back needs the triggers dropped first,
and `audit_verify` finds it by the chain.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


class EventKind(models.TextChoices):
    TOOL_CALL = "tool_call"
    SESSION_OPENED = "session_opened"
    SESSION_ENDED = "session_ended"
    ACCESS_REQUEST = "access_request"
    ACCESS_DECISION = "access_decision"
    CONFIRMATION_CREATED = "confirmation_created"
    CONFIRMATION_DECIDED = "confirmation_decided"
    CONTRACT_TRANSITION = "contract_transition"
    DRAFT_ACCEPTED = "draft_accepted"
    DRAFT_DISCARDED = "draft_discarded"
    CARETAKER_ACTION = "caretaker_action"
    CONSOLE_LOGIN = "console_login"
    TOKEN_CREATED = "token_created"
    TOKEN_REVOKED = "token_revoked"
    MCP_SWITCHED = "mcp_switched"
    EXTERNAL_CHANGE = "external_change"
    PROJECT_WRITTEN = "project_written"
    PROJECT_REGISTERED = "project_registered"
    AUTH_REFUSED = "auth_refused"
    ORIGIN_REFUSED = "origin_refused"
    REQUEST_REFUSED = "request_refused"  # an authenticated request refused whole before any of it ran
    OPERATOR_CREATED = "operator_created"
    AUDIT_EXPORTED = "audit_exported"  # an operator exported a range of the log from the console (or was refused)
    RUNTIME_SNAPSHOT = "runtime_snapshot"  # a runtime connector posted a project's variable values (or was refused)


class RowidKey(models.BigIntegerField):
    """A 64-bit primary key that SQLite keeps as the table's rowid. SQLite makes a key its rowid only when it is
    declared `INTEGER PRIMARY KEY`, that type name exactly: a `bigint` key is a column beside a hidden rowid,
    with a second b-tree to find it by, so every append inserts into two b-trees and writes their pages
    (migration 0005). PostgreSQL keeps `bigint`."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        return "integer" if connection.vendor == "sqlite" else super().db_type(connection)


class AppendOnly(models.Model):
    class Meta:
        abstract = True

    def save(self, *args, **kwargs) -> None:
        if not kwargs.get("force_insert"):
            raise ValueError(f"{type(self).__name__} rows are append-only; they are only ever inserted")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError(f"{type(self).__name__} rows are append-only and cannot be deleted")


class AuditEvent(AppendOnly):
    """One event. `mac` = HMAC-SHA256(audit key, prev_mac || canonical JSON of the row without its MAC).

    Every call appends a row, so each index is a page more to write per commit: only `ts` (the API's time
    range) is indexed besides the key. The API and the console filter by the other fields while reading in
    `seq` order, which needs no index of them. The MAC has no index either (migration 0006): nothing looks a row
    up by it, the chain is checked in `seq` order, and a random key put each row of a commit on an index page of
    its own (docs/PERFORMANCE.md, section 14)."""

    seq = RowidKey(primary_key=True)
    ts = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=40, choices=EventKind.choices)
    tool = models.CharField(max_length=100, blank=True)
    arguments_json = models.TextField(default="{}", help_text="Sanitized arguments as canonical JSON.")
    outcome = models.CharField(max_length=200, blank=True)
    called_by = models.CharField(max_length=200, blank=True)
    session = models.CharField(max_length=100, blank=True)
    client_label = models.CharField(max_length=200, blank=True)
    project = models.CharField(max_length=100, blank=True)
    prev_mac = models.CharField(max_length=64)
    mac = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.tool} {self.outcome}".replace("  ", " ").strip()

    @property
    def arguments(self) -> Any:
        return json.loads(self.arguments_json)


NODE_KEY_HELP = "the last leaf it covers << 6 | level (audit.services.node_key)"


class AuditTreeNode(AppendOnly):
    """The hash of one perfect subtree of the RFC 9162 tree over the events: leaves [index*2^level, +2^level)."""

    key = RowidKey(primary_key=True, help_text=NODE_KEY_HELP)
    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hash = models.BinaryField(max_length=32)

    def __str__(self) -> str:
        return f"node {self.level}/{self.index}"


class AuditCheckpoint(AppendOnly):
    """A signed statement of the tree's size and root hash, in the C2SP signed-note checkpoint form."""

    size = RowidKey(primary_key=True)
    root = models.BinaryField(max_length=32)
    note = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["size"]

    def __str__(self) -> str:
        return f"checkpoint at {self.size}"
