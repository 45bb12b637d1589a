"""`notifications/resources/updated`: when a project's accepted file or working draft changes, every session
subscribed to one of its resources hears of it on its stream, whichever process holds the stream.

The change is seen where it is made (the project's row or its draft's saved, in the process that made it:
a tool call, an operator's approval, a management command) and announced once its transaction commits,
through the channel layer to each subscribed session's group (`forge_core.live.notify_streams`, which also
reaches the server from a management command). Receivers connect in `McpApiConfig.ready`.

A subscription lives as long as its session; the rows of sessions that have ended are deleted by
`prune_ended`, which `runmcp` runs every few minutes (a session ends in `access`, which may not know this app).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_save

from access.models import session_group
from forge_core.live import notify_streams
from mcp_api.jsonrpc import encode
from mcp_api.models import ResourceSubscription
from projects.models import Project, WorkingDraft

UPDATED = "notifications/resources/updated"


def connect() -> None:
    post_save.connect(_project_saved, sender=Project, dispatch_uid="mcp_api.resource_updates.project")
    post_save.connect(_draft_saved, sender=WorkingDraft, dispatch_uid="mcp_api.resource_updates.draft")


def _project_saved(sender: type[Project], instance: Project, created: bool, update_fields: Any, **kwargs: Any) -> None:
    if created or (update_fields is not None and not {"accepted_revision", "fingerprint"} & set(update_fields)):
        return
    # A new accepted file changes every POU body, and the draft, which is replayed on it.
    transaction.on_commit(lambda: announce(instance.pk, draft_only=False))


def _draft_saved(sender: type[WorkingDraft], instance: WorkingDraft, created: bool, **kwargs: Any) -> None:
    transaction.on_commit(lambda: announce(instance.project_id, draft_only=True))


def listeners_group(project_id: int) -> str:
    """The channel-layer group of the 2026-07-28 `subscriptions/listen` streams following a resource of the
    project: they hold no rows, so each is told what changed and picks its own addresses out of it."""
    return f"mcp.resources.{project_id}"


def announce(project_id: int, *, draft_only: bool) -> int:
    """Tell each open session subscribed to a changed resource of the project, and the listen streams following
    one; returns how many sessions were told."""
    notify_streams(listeners_group(project_id), "mcp.resources_changed", project=project_id, draft_only=draft_only)
    subscriptions = ResourceSubscription.objects.filter(project_id=project_id, session__ended_at__isnull=True)
    if draft_only:
        subscriptions = subscriptions.filter(uri__endswith="/draft.xml")
    told = 0
    for session_id, uri in subscriptions.values_list("session_id", "uri"):
        message = {"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": uri}}
        # As JSON text, as every mcp.message is: a shared layer's serializer cannot carry every JSON value.
        notify_streams(session_group(session_id), "mcp.message", json=encode(message).decode())
        told += 1
    return told


PRUNE_BATCH = 1000


def prune_ended() -> int:
    """Delete the subscriptions of sessions that have ended, a batch at a time (each a short transaction);
    returns how many were deleted. Nothing is announced to an ended session, so they only take room."""
    deleted = 0
    while True:
        ended = ResourceSubscription.objects.filter(session__ended_at__isnull=False)
        batch = list(ended.values_list("pk", flat=True)[:PRUNE_BATCH])
        if not batch:
            return deleted
        deleted += ResourceSubscription.objects.filter(pk__in=batch).delete()[0]
