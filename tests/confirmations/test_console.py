"""The console's confirmation and contract screens (confirmations.admin): the live list with its countdown,
a confirmation's page and its decisions, a contract's page with its rollback and reconciliation forms,
and the counts on the dashboard. Every decision goes through the services, so each is checked on the
page (the message) and in the stored state and the audit log.

Carla is the AI client's owner; Olivia and Oscar are operators."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from django.contrib.messages import constants
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventKind
from confirmations.models import ConfirmationState, Contract, ContractState, PendingConfirmation
from confirmations.services import do_deny_confirmation
from forge_core.live import CONSOLE_GROUP
from projects.plcopen import documents
from tests.confirmations.operator_helpers import (
    ask,
    carried_out,
    change_behind_its_back,
    expire,
    left_in_reconciliation,
    project_file_of,
    rollback_left_in_reconciliation,
    tamper,
    withdraw_from_operators,
)

pytestmark = pytest.mark.django_db

C = ConfirmationState
S = ContractState
CONFIRMATIONS = "admin:confirmations_pendingconfirmation_changelist"
CONTRACTS = "admin:confirmations_contract_changelist"


@pytest.fixture
def operator(client, cast) -> Client:
    client.force_login(cast.operator.user)
    return client


@pytest.fixture
def pending(cast, project) -> PendingConfirmation:
    return ask(cast.caretaker, project)


def page_of(confirmation: PendingConfirmation) -> str:
    return reverse("admin:confirmations_pendingconfirmation_change", args=[confirmation.pk])


def contract_page(contract: Contract) -> str:
    return reverse("admin:confirmations_contract_change", args=[contract.pk])


def decide(client: Client, confirmation: PendingConfirmation, decision: str, **fields: str):
    url = reverse("admin:confirmations_pendingconfirmation_decide", args=[confirmation.pk])
    return client.post(url, {"decision": decision, **fields}, follow=True)


def messages_of(response) -> list[tuple[int, str]]:
    return [(message.level, str(message.message)) for message in response.context["messages"]]


def decided_rows(**filters) -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(kind=EventKind.CONFIRMATION_DECIDED, **filters).order_by("seq")
    return [(row.outcome, row.called_by) for row in rows]


def refused_contract_rows() -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION, outcome__startswith="refused").order_by("seq")
    return [(row.outcome, row.called_by) for row in rows]


# --- the list --------------------------------------------------------------------------------------


def test_the_list_shows_a_pending_confirmation_with_who_asked_and_a_countdown(operator, pending):
    page = operator.get(reverse(CONFIRMATIONS)).content.decode()

    assert pending.memorable_id in page
    for shown in ("project.write.add_variable", "steps", "carla", "carla-client", "pending"):
        assert shown in page
    assert 'class="countdown" data-countdown-seconds="' in page


def test_reading_the_list_expires_what_is_past_its_time_and_shows_it_expired(operator, pending):
    expire(pending)

    page = operator.get(reverse(CONFIRMATIONS)).content.decode()

    pending.refresh_from_db()
    assert pending.state == C.EXPIRED
    assert '<span class="countdown expired">expired</span>' in page
    assert decided_rows() == [("expired", "expiry")]


def test_the_list_filters_by_state_and_finds_a_confirmation_by_its_memorable_id(operator, cast, project, pending):
    denied = ask(cast.caretaker, project, name="other")
    do_deny_confirmation(denied.pk, acting_user=cast.other_operator.user)

    by_state = operator.get(reverse(CONFIRMATIONS), {"state__exact": "pending"}).content.decode()
    by_words = operator.get(reverse(CONFIRMATIONS), {"q": denied.memorable_id.upper()}).content.decode()
    by_two_words = operator.get(reverse(CONFIRMATIONS), {"q": " ".join(denied.memorable_id.split("-")[:2])})

    assert pending.memorable_id in by_state and denied.memorable_id not in by_state
    assert denied.memorable_id in by_words and pending.memorable_id not in by_words
    assert denied.memorable_id in by_two_words.content.decode()


def test_the_list_and_the_contracts_follow_the_console_feed(operator):
    page = operator.get(reverse(CONFIRMATIONS)).content.decode()

    live = page[page.index("data-live-pages=") :].split('"')[1].split()
    assert reverse(CONFIRMATIONS) in live and reverse(CONTRACTS) in live


def test_a_new_confirmation_is_announced_to_open_console_pages(cast, project, django_capture_on_commit_callbacks):
    channel_layers.backends.pop("default", None)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(CONSOLE_GROUP, channel)

    with django_capture_on_commit_callbacks(execute=True):
        ask(cast.caretaker, project)

    assert async_to_sync(layer.receive)(channel) == {"type": "console.changed", "what": "confirmations"}
    channel_layers.backends.pop("default", None)


# --- a confirmation's page -------------------------------------------------------------------------


def test_the_page_shows_the_question_preview_arguments_and_the_decision_buttons(operator, pending):
    response = operator.get(page_of(pending))

    page = response.content.decode()
    assert response.status_code == 200
    assert "Add the local variable zz : INT to LineMain?" in page
    assert '<span class="added">+  &lt;variable name=&quot;zz&quot;&gt;' in page
    assert '<span class="removed">-  &lt;!-- gone --&gt;</span>' in page
    assert "<code>pou/LineMain/zz</code>" in page  # the changed ids
    assert "zz is never read" in page  # a finding it adds, as a table row
    assert "&quot;section&quot;: &quot;localVars&quot;" in page  # the arguments, as pretty JSON
    assert 'value="approve"' in page and 'value="deny"' in page
    assert 'name="typed_id"' not in page


def test_the_typed_id_input_is_shown_when_the_tool_requires_it(operator, cast, project):
    asked = ask(cast.caretaker, project, requires_typed_id=True)

    page = operator.get(page_of(asked)).content.decode()

    assert 'name="typed_id"' in page
    assert f"of this confirmation ({asked.memorable_id})" in page


def test_the_address_write_tools_give_their_clients_leads_to_the_confirmations_page(operator, pending):
    response = operator.get(f"/console/confirmations/{pending.pk}/")

    assert response.status_code == 302
    assert response["Location"] == page_of(pending)


def test_an_unknown_confirmation_sends_the_operator_back_to_the_list(operator, project):
    response = operator.get(reverse("admin:confirmations_pendingconfirmation_change", args=["no-such-id"]))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:index"))


# --- decisions -------------------------------------------------------------------------------------


def test_approving_carries_the_change_out_and_links_its_contract(operator, pending, project):
    response = decide(operator, pending, "approve")

    pending.refresh_from_db()
    contract = Contract.objects.get(confirmation=pending)
    assert pending.state == C.EXECUTED
    assert contract.state == S.VERIFIED
    assert messages_of(response) == [
        (
            constants.SUCCESS,
            f'Approved {pending.memorable_id} and carried out: contract <a href="{contract_page(contract)}">'
            f"{contract.memorable_id}</a> is verified.",
        )
    ]
    assert b'name="zz"' in project_file_of(project).read_bytes()
    assert decided_rows(called_by="olivia") == [("approved", "olivia")]


def test_approving_a_change_whose_project_changed_since_says_it_was_not_carried_out(operator, pending, project):
    change_behind_its_back(project)

    response = decide(operator, pending, "approve")

    pending.refresh_from_db()
    assert pending.state == C.FAILED
    ((level, text),) = messages_of(response)
    assert level == constants.ERROR
    assert text.startswith(f"Approved {pending.memorable_id}, but it was not carried out (FORGE_ERR_TARGET_DRIFT)")


def test_a_typed_id_that_does_not_match_is_refused_and_changes_nothing(operator, cast, project):
    asked = ask(cast.caretaker, project, requires_typed_id=True)

    response = decide(operator, asked, "approve", typed_id="wrong-words-typed-here")

    asked.refresh_from_db()
    assert asked.state == C.PENDING
    assert messages_of(response) == [
        (constants.ERROR, "Type the memorable ID shown with the confirmation exactly to approve it.")
    ]


def test_the_typed_memorable_id_approves_however_it_is_spaced_or_cased(operator, cast, project):
    asked = ask(cast.caretaker, project, requires_typed_id=True)

    decide(operator, asked, "approve", typed_id=f"  {asked.memorable_id.replace('-', ' ').upper()} ")

    asked.refresh_from_db()
    assert asked.state == C.EXECUTED


def test_the_key_memorable_id_is_what_must_be_typed_when_a_key_is_involved(operator, cast, project):
    key = "abandon-ability-able-about"
    asked = ask(cast.caretaker, project, requires_typed_id=True, key_memorable_id=key)
    assert f"of the key ({key})" in operator.get(page_of(asked)).content.decode()

    refused = decide(operator, asked, "approve", typed_id=asked.memorable_id)
    decide(operator, asked, "approve", typed_id=key)

    asked.refresh_from_db()
    assert messages_of(refused)[0][0] == constants.ERROR
    assert asked.state == C.EXECUTED


def test_denying_writes_nothing_and_tells_the_operator_the_client_is_told(operator, pending, project):
    before = project_file_of(project).read_bytes()

    response = decide(operator, pending, "deny", reason="not during the shift")

    pending.refresh_from_db()
    assert (pending.state, pending.decided_by.get_username()) == (C.DENIED, "olivia")
    assert pending.outcome["operator_note"] == "not during the shift"
    assert messages_of(response) == [
        (
            constants.SUCCESS,
            f"Denied {pending.memorable_id}: nothing was written, and the client is told "
            "(FORGE_ERR_CONFIRMATION_DENIED).",
        )
    ]
    assert project_file_of(project).read_bytes() == before


def test_a_second_decision_is_refused_and_says_what_it_is(operator, cast, pending):
    do_deny_confirmation(pending.pk, acting_user=cast.other_operator.user)

    response = decide(operator, pending, "approve")

    pending.refresh_from_db()
    assert pending.state == C.DENIED
    assert messages_of(response) == [(constants.ERROR, "This confirmation was already decided: it is denied.")]


def test_deciding_an_expired_confirmation_is_refused_and_it_shows_as_expired(operator, pending):
    expire(pending)

    response = decide(operator, pending, "approve")

    pending.refresh_from_db()
    assert pending.state == C.EXPIRED
    assert messages_of(response) == [
        (constants.ERROR, "This confirmation expired before it was decided; the client must ask again.")
    ]
    assert '<span class="state-badge" id="confirmation-state">expired</span>' in response.content.decode()


def test_deciding_without_the_permission_is_refused_and_audited(client, cast, pending):
    withdraw_from_operators("decide_confirmation")
    client.force_login(cast.operator.user)

    response = decide(client, pending, "approve")

    pending.refresh_from_db()
    assert pending.state == C.PENDING
    assert messages_of(response)[0][0] == constants.ERROR
    assert "decide_confirmation permission" in messages_of(response)[0][1]
    assert decided_rows() == [("refused: approve without permission", "olivia")]
    assert "You may not decide this confirmation" in client.get(page_of(pending)).content.decode()


def test_a_decision_without_the_csrf_token_is_refused(cast, pending):
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(cast.operator.user)

    response = forged.post(
        reverse("admin:confirmations_pendingconfirmation_decide", args=[pending.pk]), {"decision": "approve"}
    )

    pending.refresh_from_db()
    assert response.status_code == 403
    assert pending.state == C.PENDING


def test_a_decision_other_than_approve_or_deny_changes_nothing(operator, pending):
    response = decide(operator, pending, "maybe")

    pending.refresh_from_db()
    assert pending.state == C.PENDING
    assert messages_of(response) == [(constants.ERROR, "Choose approve or deny; nothing was decided.")]


# --- contracts -------------------------------------------------------------------------------------


@pytest.fixture
def verified(cast, project) -> Contract:
    return carried_out(cast.caretaker, cast.other_operator, project)


def rollback(client: Client, contract: Contract, typed_id: str):
    url = reverse("admin:confirmations_contract_rollback", args=[contract.pk])
    return client.post(url, {"typed_id": typed_id}, follow=True)


def resolve(client: Client, contract: Contract, conclusion: str):
    url = reverse("admin:confirmations_contract_resolve", args=[contract.pk])
    return client.post(url, {"conclusion": conclusion}, follow=True)


def test_the_contract_list_filters_by_state(operator, verified, project):
    stuck = left_in_reconciliation(project, at="before_write")

    page = operator.get(reverse(CONTRACTS), {"state__exact": "RECONCILIATION"}).content.decode()

    assert stuck.memorable_id in page and verified.memorable_id not in page


def test_the_contract_page_shows_its_record_its_confirmation_and_its_events(operator, verified):
    page = operator.get(contract_page(verified)).content.decode()

    assert verified.memorable_id in page and verified.target_digest in page and verified.post_fingerprint in page
    assert reverse("admin:confirmations_pendingconfirmation_change", args=[verified.confirmation_id]) in page
    events = page[page.index('id="contract-events"') :]
    for state in ("PREPARING", "PREPARED", "EXECUTING", "VERIFIED"):
        assert f"<td>{state}</td>" in events
    assert 'id="rollback-typed-id"' in page
    assert 'id="reconciliation"' not in page


def test_rolling_back_restores_the_file_and_says_so(operator, verified, project):
    original = documents.fingerprint(project_file_of(project).read_bytes())
    assert original == verified.post_fingerprint

    response = rollback(operator, verified, verified.memorable_id)

    verified.refresh_from_db()
    assert verified.state == S.ROLLED_BACK
    assert documents.fingerprint(project_file_of(project).read_bytes()) == verified.precondition_fingerprint
    assert messages_of(response) == [
        (constants.SUCCESS, f"Rolled back {verified.memorable_id}: the target holds what it held before.")
    ]


def test_a_rollback_with_another_typed_id_is_refused_and_changes_nothing(operator, verified, project):
    before = project_file_of(project).read_bytes()

    response = rollback(operator, verified, "not-the-right-words")

    verified.refresh_from_db()
    assert verified.state == S.VERIFIED
    assert messages_of(response) == [
        (
            constants.ERROR,
            f"Type the contract's memorable ID ({verified.memorable_id}) exactly to confirm.",
        )
    ]
    assert project_file_of(project).read_bytes() == before
    assert refused_contract_rows() == [("refused: rollback, typed_id_mismatch", "olivia")]


def test_a_rollback_after_the_file_changed_is_refused_for_drift_and_audited(operator, verified, project):
    change_behind_its_back(project)
    theirs = project_file_of(project).read_bytes()

    response = rollback(operator, verified, verified.memorable_id)

    verified.refresh_from_db()
    assert verified.state == S.VERIFIED
    ((level, text),) = messages_of(response)
    assert level == constants.ERROR
    assert text.startswith("The target changed after this contract was carried out")
    assert project_file_of(project).read_bytes() == theirs
    assert refused_contract_rows() == [("refused: rollback, target_drift", "olivia")]


def test_a_rollback_without_the_permission_is_refused_and_audited(client, cast, verified):
    withdraw_from_operators("resolve_contract")
    client.force_login(cast.operator.user)

    response = rollback(client, verified, verified.memorable_id)

    verified.refresh_from_db()
    assert verified.state == S.VERIFIED
    assert "resolve_contract permission" in messages_of(response)[0][1]
    assert refused_contract_rows() == [("refused: rollback without permission", "olivia")]


@pytest.mark.parametrize(
    ("at", "text"),
    [
        ("before_write", "The target matches what it was before the contract ran"),
        ("before_verified", "The target matches the intended result"),
    ],
)
def test_a_contract_in_reconciliation_shows_what_the_target_looks_like_now(operator, project, at, text):
    stuck = left_in_reconciliation(project, at=at)

    page = operator.get(contract_page(stuck)).content.decode()

    assert text in page
    for conclusion in ("applied", "not_applied", "rolled_back_by_hand"):
        assert f'id="conclude-{conclusion}"' in page
    assert 'id="rollback"' not in page


def test_a_target_changed_since_matches_neither(operator, project):
    stuck = left_in_reconciliation(project, at="before_write")
    change_behind_its_back(project)

    page = operator.get(contract_page(stuck)).content.decode()

    assert "The target matches neither what it was before nor the intended result" in page


@pytest.mark.parametrize(
    ("at", "conclusion", "state"),
    [
        ("before_verified", "applied", S.VERIFIED),
        ("before_write", "not_applied", S.FAILED),
        ("before_write", "rolled_back_by_hand", S.ROLLED_BACK),
    ],
)
def test_each_conclusion_resolves_the_reconciliation_and_is_audited(operator, project, at, conclusion, state):
    stuck = left_in_reconciliation(project, at=at)

    response = resolve(operator, stuck, conclusion)

    stuck.refresh_from_db()
    assert (stuck.state, stuck.detail) == (state, f"resolved:{conclusion}")
    assert messages_of(response) == [
        (
            constants.SUCCESS,
            f"Resolved {stuck.memorable_id} as {conclusion.replace('_', ' ')}: it is now {state}.",
        )
    ]
    audited = AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION).order_by("-seq").first()
    assert (audited.outcome, audited.called_by, audited.arguments["reason"]) == (
        state,
        "olivia",
        f"resolved:{conclusion}",
    )


def test_an_interrupted_rollback_is_reconciled_as_a_rollback(operator, verified):
    stuck = rollback_left_in_reconciliation(verified)

    page = operator.get(contract_page(stuck)).content.decode()
    resolve(operator, stuck, "not_applied")

    stuck.refresh_from_db()
    assert "The outcome of this contract's rollback could not be proven" in page
    assert "The target matches what it was before the contract ran" in page  # the rollback's write landed
    assert "The rollback did not take effect: the target still holds the contract&#x27;s result: the contract " in page
    assert stuck.state == S.VERIFIED


def test_resolving_a_contract_that_is_not_in_reconciliation_is_refused(operator, verified):
    response = resolve(operator, verified, "not_applied")

    verified.refresh_from_db()
    assert verified.state == S.VERIFIED
    assert messages_of(response) == [
        (constants.ERROR, f"Contract {verified.memorable_id} is VERIFIED, not in RECONCILIATION.")
    ]


def test_a_tampered_contract_shows_a_clear_error_and_no_forms(operator, verified):
    tamper(verified)

    response = operator.get(contract_page(verified))

    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="contract-tampered"' in page
    assert "does not authenticate; it was changed outside Forge." in page
    assert 'id="rollback-typed-id"' not in page


def test_rolling_back_a_tampered_contract_is_refused_with_a_clear_message(operator, verified):
    tamper(verified)

    response = rollback(operator, verified, verified.memorable_id)

    assert response.status_code == 200
    ((level, text),) = messages_of(response)
    assert level == constants.ERROR
    assert "was changed outside Forge" in text
    assert refused_contract_rows() == [("refused: rollback, contract_tampered", "olivia")]


def test_a_rollback_without_the_csrf_token_is_refused(cast, verified):
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(cast.operator.user)

    response = forged.post(
        reverse("admin:confirmations_contract_rollback", args=[verified.pk]), {"typed_id": verified.memorable_id}
    )

    verified.refresh_from_db()
    assert response.status_code == 403
    assert verified.state == S.VERIFIED


# --- the dashboard ---------------------------------------------------------------------------------


def test_the_dashboard_counts_pending_confirmations_and_reconciliations_with_links(operator, cast, project, pending):
    expire(ask(cast.caretaker, project, name="late"))
    left_in_reconciliation(project, at="before_write")

    response = operator.get(reverse("admin:index"))

    page = response.content.decode()
    assert (response.context["dashboard"].pending_confirmations, response.context["dashboard"].reconciliations) == (
        1,
        1,
    )
    assert 'id="pending-confirmation-count">1<' in page
    assert 'id="reconciliation-count">1<' in page
    assert f"{reverse(CONFIRMATIONS)}?state__exact=pending" in page
    assert f"{reverse(CONTRACTS)}?state__exact=RECONCILIATION" in page


def test_the_screens_open_with_nothing_in_them(operator):
    assert operator.get(reverse(CONFIRMATIONS)).status_code == 200
    assert operator.get(reverse(CONTRACTS)).status_code == 200
