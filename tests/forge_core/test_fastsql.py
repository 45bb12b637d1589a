"""`fastsql.save_fields`, the UPDATE a record's `save(update_fields=...)` makes, written once: the same row, the same
signals, the same refusal."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext

from forge_core import fastsql
from projects.models import Project

pytestmark = pytest.mark.django_db


def _project() -> Project:
    return Project.objects.create(slug="line", name="Line", path="line.xml", fingerprint="a" * 64)


def test_it_writes_only_the_named_fields_in_one_statement():
    project = _project()
    Project.objects.filter(pk=project.pk).update(name="Renamed elsewhere")
    project.fingerprint, project.accepted_revision, project.name = "b" * 64, 2, "Not saved"

    with CaptureQueriesContext(connection) as queries:
        fastsql.save_fields(project, ("fingerprint", "accepted_revision"))

    assert len(queries.captured_queries) == 1
    stored = Project.objects.get(pk=project.pk)
    assert (stored.fingerprint, stored.accepted_revision, stored.name) == ("b" * 64, 2, "Renamed elsewhere")


def test_it_sends_the_signals_save_sends():
    project = _project()
    seen = []

    def note(signal_name):
        def receiver(sender, instance, update_fields, **kwargs):
            seen.append((signal_name, sender, instance, update_fields, kwargs.get("created")))

        return receiver

    before, after = note("pre_save"), note("post_save")
    pre_save.connect(before, sender=Project)
    post_save.connect(after, sender=Project)
    try:
        fastsql.save_fields(project, ("fingerprint",))
    finally:
        pre_save.disconnect(before, sender=Project)
        post_save.disconnect(after, sender=Project)

    assert seen == [
        ("pre_save", Project, project, frozenset({"fingerprint"}), None),
        ("post_save", Project, project, frozenset({"fingerprint"}), False),
    ]


def test_a_row_that_is_gone_is_refused_as_save_refuses_it():
    project = _project()
    Project.objects.filter(pk=project.pk).delete()

    with pytest.raises(DatabaseError, match="did not affect any rows"):
        fastsql.save_fields(project, ("fingerprint",))


def test_a_name_that_is_not_a_field_of_the_row_is_refused():
    with pytest.raises(ValueError, match="cannot save"):
        fastsql.save_fields(_project(), ("id",))
