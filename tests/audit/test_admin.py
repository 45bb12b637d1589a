"""The audit log in the console: the verify button reports the check as a message (naming the first bad
event), and the audit lists offer no way to add, change or delete a row."""

from __future__ import annotations

import pytest
from django.contrib.messages import constants
from django.urls import reverse

from audit.models import AuditCheckpoint, AuditEvent
from audit.services import do_make_checkpoint
from tests.audit.helpers import append_events, change_behind_the_models_back

VERIFY = "admin:audit_auditevent_verify"
CHANGELIST = "admin:audit_auditevent_changelist"


@pytest.fixture
def operator_client(client, cast):
    client.force_login(cast.operator.user)
    return client


def messages_of(response) -> list[tuple[int, str]]:
    return [(message.level, message.message) for message in response.context["messages"]]


@pytest.mark.django_db
def test_the_changelist_shows_the_verify_button(operator_client):
    response = operator_client.get(reverse(CHANGELIST))

    assert response.status_code == 200
    assert f'action="{reverse(VERIFY)}"' in response.content.decode()


@pytest.mark.django_db
def test_the_verify_button_reports_a_sound_log_as_a_success_message(operator_client):
    append_events(3)
    do_make_checkpoint()
    events = AuditEvent.objects.count()

    response = operator_client.post(reverse(VERIFY), follow=True)

    assert response.redirect_chain == [(reverse(CHANGELIST), 302)]
    assert messages_of(response) == [(constants.SUCCESS, f"Audit log check: ok {events} events, 1 checkpoints")]


@pytest.mark.django_db(transaction=True)
def test_the_verify_button_names_the_tampered_event_in_an_error_message(operator_client):
    append_events(3)
    tampered = AuditEvent.objects.count() - 1
    change_behind_the_models_back("UPDATE audit_auditevent SET outcome = %s WHERE seq = %s", ["denied", tampered])

    response = operator_client.post(reverse(VERIFY), follow=True)

    assert response.redirect_chain == [(reverse(CHANGELIST), 302)]
    [(level, text)] = messages_of(response)
    assert level == constants.ERROR
    assert text.startswith(f"Audit log check: FAILED at event {tampered}: MAC mismatch")


@pytest.mark.django_db
def test_the_verify_button_checks_nothing_on_a_get(operator_client):
    response = operator_client.get(reverse(VERIFY), follow=True)

    assert response.redirect_chain == [(reverse(CHANGELIST), 302)]
    assert messages_of(response) == []


@pytest.mark.django_db
def test_the_verify_button_needs_a_console_login(client, cast):
    response = client.post(reverse(VERIFY))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.django_db
@pytest.mark.parametrize("model", [AuditEvent, AuditCheckpoint])
def test_the_audit_changelist_offers_no_add_and_no_bulk_delete(operator_client, model):
    append_events(2)
    do_make_checkpoint()
    meta = model._meta

    response = operator_client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))

    assert response.status_code == 200
    assert reverse(f"admin:{meta.app_label}_{meta.model_name}_add") not in response.content.decode()
    assert "delete_selected" not in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("model", [AuditEvent, AuditCheckpoint])
def test_the_audit_console_refuses_to_add_a_row(operator_client, model):
    meta = model._meta
    count = model.objects.count()

    response = operator_client.post(reverse(f"admin:{meta.app_label}_{meta.model_name}_add"), {"outcome": "x"})

    assert response.status_code == 403
    assert model.objects.count() == count


@pytest.mark.django_db
@pytest.mark.parametrize("model", [AuditEvent, AuditCheckpoint])
def test_the_audit_console_shows_a_row_read_only_and_refuses_to_change_it(operator_client, model):
    append_events(2)
    do_make_checkpoint()
    row = model.objects.first()
    before = model.objects.values().get(pk=row.pk)
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[row.pk])

    shown = operator_client.get(url)
    posted = operator_client.post(url, {"outcome": "denied", "note": "x"})

    assert shown.status_code == 200
    assert 'name="_save"' not in shown.content.decode()
    assert posted.status_code == 403
    assert model.objects.values().get(pk=row.pk) == before


@pytest.mark.django_db
@pytest.mark.parametrize("model", [AuditEvent, AuditCheckpoint])
def test_the_audit_console_refuses_to_delete_a_row(operator_client, model):
    append_events(2)
    do_make_checkpoint()
    row = model.objects.first()
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_delete", args=[row.pk])

    assert operator_client.get(url).status_code == 403
    assert operator_client.post(url, {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=row.pk).exists()
