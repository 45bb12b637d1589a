"""The resource subscriptions of ended sessions are deleted by `resource_updates.prune_ended` (runmcp runs it
every few minutes); an open session's stay."""

from __future__ import annotations

import pytest
from django.utils import timezone

from access.models import McpSession, Transport
from mcp_api import resource_updates
from mcp_api.models import ResourceSubscription
from projects.models import Project

pytestmark = pytest.mark.django_db


def _subscribed(session_id: str, token, project: Project, count: int) -> McpSession:
    session = McpSession.objects.create(id=session_id, token=token, transport=Transport.STREAMABLE_HTTP)
    ResourceSubscription.objects.bulk_create(
        ResourceSubscription(session=session, project=project, uri=f"forge://projects/p/pous/P{n}/body.st")
        for n in range(count)
    )
    return session


def test_prune_deletes_every_subscription_of_ended_sessions_and_keeps_open_ones(cast, monkeypatch):
    monkeypatch.setattr(resource_updates, "PRUNE_BATCH", 2)  # several batches
    project = Project.objects.create(slug="p", name="P", path="p.xml", fingerprint="0" * 64)
    ended = _subscribed("ended", cast.operator.token, project, 5)
    _subscribed("open", cast.operator.token, project, 3)
    McpSession.objects.filter(pk=ended.pk).update(ended_at=timezone.now())

    assert resource_updates.prune_ended() == 5
    assert set(ResourceSubscription.objects.values_list("session_id", flat=True)) == {"open"}
    assert resource_updates.prune_ended() == 0
