"""A registered project: one PLCopen XML file under FORGE_PROJECTS_ROOT, and what is known about it."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


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
