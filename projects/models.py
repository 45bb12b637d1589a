"""A registered project: one PLCopen XML file under FORGE_PROJECTS_ROOT, and what is known about it."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from forge_core import fastsql


class Project(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=500, help_text="The file, relative to FORGE_PROJECTS_ROOT.")
    accepted_revision = models.PositiveIntegerField(default=1)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the file as last accepted.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]
        permissions = [
            ("approve_change", "Can approve changes to the project"),
            ("grant_access", "Can grant MCP sessions access to the project"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"

    def advance_revision(self, fingerprint: str) -> None:
        """The file now holds other bytes: they are the next accepted revision. On a row locked with
        select_for_update; the caller records why (a write of ours, another tool's edit)."""
        self.fingerprint = fingerprint
        self.accepted_revision += 1
        self.updated_at = timezone.now()
        fastsql.save_fields(self, ("fingerprint", "accepted_revision", "updated_at"))


# The project by its slug (none or one, the slug being unique). Every approval reads it three times: for the decider's
# rights, for the change's registration and, locked, for the revision its write makes. Compiled once
# (`fastsql.PreparedRead`): building each with the ORM cost more than its round trip.
project_by_slug = fastsql.PreparedRead(
    lambda slug: Project.objects.filter(slug=slug).order_by(), Project._meta.get_field("slug")
)
project_by_slug_locked = fastsql.PreparedRead(
    lambda slug: Project.objects.select_for_update().filter(slug=slug).order_by(), Project._meta.get_field("slug")
)


class WorkingDraft(models.Model):
    """A project's one working draft: the accepted file it builds on plus its change groups' operations.

    `working_revision` moves with every change of the draft or of its groups (begin, stage, unstage,
    submit, close, a replay on a new accepted revision, accept, discard), so a client's
    `expected_working_revision` says whether it still looks at the draft it reasoned about."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="draft")
    base_revision = models.PositiveIntegerField(help_text="The accepted revision the operations are replayed on.")
    base_fingerprint = models.CharField(max_length=64)
    working_revision = models.PositiveIntegerField(default=0)
    stamp = models.DateTimeField(default=timezone.now, help_text="The modification time the draft's file carries.")
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"draft of {self.project.slug} at revision {self.working_revision}"


class GroupState(models.TextChoices):
    BUILDING = "building"
    SUBMITTED = "submitted"
    CLOSED = "closed"
    ACCEPTED = "accepted"
    DISCARDED = "discarded"


# Groups whose operations are part of the draft.
LIVE_GROUP_STATES = (GroupState.BUILDING, GroupState.SUBMITTED, GroupState.CLOSED)


class ChangeGroup(models.Model):
    """One author's coherent change: its operations, why, and the findings it was submitted with."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    draft = models.ForeignKey(WorkingDraft, on_delete=models.CASCADE, related_name="groups")
    session_id = models.CharField(max_length=100, db_index=True, help_text="The MCP session that owns it.")
    principal = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    client_label = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=200)
    rationale = models.TextField(blank=True)
    state = models.CharField(max_length=20, choices=GroupState.choices, default=GroupState.BUILDING, db_index=True)
    acknowledged_findings = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.title} ({self.state})"


class StagedOperation(models.Model):
    """One operation of a group, at its position in the draft (positions order all groups' operations)."""

    draft = models.ForeignKey(WorkingDraft, on_delete=models.CASCADE, related_name="operations")
    group = models.ForeignKey(ChangeGroup, on_delete=models.CASCADE, related_name="operations")
    position = models.PositiveIntegerField()
    batch_revision = models.PositiveIntegerField(help_text="The working revision its stage call made.")
    operation = models.JSONField()
    changed_ids = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["draft", "position"]
        constraints = [models.UniqueConstraint(fields=["draft", "position"], name="staged_operation_position")]


class DraftEvent(models.Model):
    """What happened to a draft at a revision, for `draft.events` and the reviewer."""

    draft = models.ForeignKey(WorkingDraft, on_delete=models.CASCADE, related_name="events")
    revision = models.PositiveIntegerField()
    kind = models.CharField(max_length=20)
    group = models.ForeignKey(ChangeGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    session_id = models.CharField(max_length=100, blank=True)
    actor = models.CharField(max_length=200, blank=True)
    summary = models.JSONField(default=dict)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["draft", "revision", "id"]
