"""The operator REST API for confirmations and contracts (confirmations.api): lists with keyset pages and
a state filter, one confirmation or contract, approve and deny, rollback and resolve; each refusal with
its status and FORGE_ERR code, nothing changed, and the refusals that matter audited.

Carla is the AI client's owner; Olivia and Oscar are operators, through a console login or an operator
token; a client token, even an operator's, is refused."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from audit.models import AuditEvent, EventKind
from confirmations.models import ConfirmationState, Contract, ContractState, PendingConfirmation
from confirmations.services import do_deny_confirmation
from console.operator_tokens import do_create_operator_token
from projects import plcopen
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
from tests.conftest import Cast, Member

pytestmark = pytest.mark.django_db

C = ConfirmationState
S = ContractState
CONFIRMATIONS = "/api/confirmations"
CONTRACTS = "/api/contracts"


def logged_in(member: Member) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def with_bearer(raw: str) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture(params=["console login", "operator token"])
def operator(request, cast: Cast) -> APIClient:
    """Olivia, the operator, through each credential the API accepts."""
    if request.param == "console login":
        return logged_in(cast.operator)
    return with_bearer(do_create_operator_token(cast.operator.user, "scripts", acting_user="tests").raw)


@pytest.fixture
def olivia(cast: Cast) -> APIClient:
    return logged_in(cast.operator)


@pytest.fixture
def pending(cast, project) -> PendingConfirmation:
    return ask(cast.caretaker, project)


@pytest.fixture
def verified(cast, project) -> Contract:
    return carried_out(cast.caretaker, cast.other_operator, project)


def error(response) -> tuple[int, str]:
    return response.status_code, response.json()["code"]


def refused_rows(kind: str) -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(kind=kind, outcome__startswith="refused").order_by("seq")
    return [(row.outcome, row.called_by) for row in rows]


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# --- confirmations ---------------------------------------------------------------------------------


def test_an_operator_lists_pending_confirmations(cast, operator, project, pending):
    do_deny_confirmation(ask(cast.caretaker, project, name="other").pk, acting_user=cast.other_operator.user)

    response = operator.get(CONFIRMATIONS, {"state": "pending"})

    assert response.status_code == 200
    assert response.json() == {
        "confirmations": [
            {
                "id": str(pending.pk),
                "memorable_id": pending.memorable_id,
                "state": "pending",
                "tool": "project.write.add_variable",
                "label": "add variable zz to LineMain",
                "project": "steps",
                "principal": "carla",
                "client_label": "carla-client",
                "session": "session-of-carla",
                "requires_typed_id": False,
                "created_at": iso(pending.created_at),
                "expires_at": iso(pending.expires_at),
                "decided_by": None,
                "decided_at": None,
            }
        ],
        "next": None,
    }


def test_confirmation_pages_follow_next_to_the_end_keeping_the_state_filter(cast, olivia, project):
    asked = [ask(cast.caretaker, project, name=f"v{number}") for number in range(5)]
    do_deny_confirmation(asked[2].pk, acting_user=cast.other_operator.user)

    seen, url = [], f"{CONFIRMATIONS}?state=pending&limit=2"
    while url:
        body = olivia.get(url).json()
        seen += [row["id"] for row in body["confirmations"]]
        url = body["next"]
        assert url is None or "state=pending" in url

    expected = sorted((c for c in asked if c.pk != asked[2].pk), key=lambda c: (c.created_at, c.pk))
    assert seen == [str(c.pk) for c in expected]


def test_a_confirmations_page_costs_the_same_queries_whatever_its_size(cast, olivia, project):
    for number in range(20):
        ask(cast.caretaker, project, name=f"v{number}")
    counts = []
    for limit in (1, 20):
        with CaptureQueriesContext(connection) as queries:
            assert len(olivia.get(CONFIRMATIONS, {"limit": limit}).json()["confirmations"]) == limit
        counts.append(len(queries))

    assert counts[0] == counts[1]


@pytest.mark.parametrize(
    "query", [{"state": "waiting"}, {"after": "not-a-uuid"}, {"after": str(uuid.uuid4())}, {"limit": "0"}, {"q": "x"}]
)
def test_bad_confirmation_list_parameters_are_400_naming_the_parameter(olivia, query):
    response = olivia.get(CONFIRMATIONS, query)

    assert error(response) == (400, "FORGE_ERR_BAD_PARAMETER")
    assert next(iter(query)) in response.json()["detail"]


def test_listing_expires_what_is_past_its_time(olivia, pending):
    expire(pending)

    listed = olivia.get(CONFIRMATIONS).json()["confirmations"]

    assert [row["state"] for row in listed] == ["expired"]


def test_an_operator_reads_a_confirmation_with_its_question_arguments_and_preview(operator, pending):
    response = operator.get(f"{CONFIRMATIONS}/{pending.pk}")

    body = response.json()
    assert response.status_code == 200
    assert body["question"] == "Add the local variable zz : INT to LineMain?"
    assert body["arguments"]["operation"]["name"] == "zz"
    assert body["preview"]["changed_ids"] == ["pou/LineMain/zz"]
    assert (body["outcome"], body["contract"], body["key_memorable_id"]) == ({}, None, "")


def test_an_unknown_confirmation_is_404(olivia, project):
    for response in (
        olivia.get(f"{CONFIRMATIONS}/{uuid.uuid4()}"),
        olivia.post(f"{CONFIRMATIONS}/{uuid.uuid4()}/approve"),
        olivia.post(f"{CONFIRMATIONS}/{uuid.uuid4()}/deny"),
    ):
        assert error(response) == (404, "FORGE_ERR_NOT_FOUND")


def test_approving_carries_the_change_out_and_answers_its_contract(operator, pending, project):
    response = operator.post(f"{CONFIRMATIONS}/{pending.pk}/approve")

    body = response.json()
    contract = Contract.objects.get(confirmation_id=pending.pk)
    assert response.status_code == 200
    assert (body["state"], body["decided_by"], body["contract"]) == ("executed", "olivia", str(contract.pk))
    assert body["outcome"]["result"]["contract_memorable_id"] == contract.memorable_id
    assert contract.state == S.VERIFIED
    assert b'name="zz"' in project_file_of(project).read_bytes()


def test_approving_after_the_project_changed_answers_the_failure_with_target_drift(olivia, pending, project):
    change_behind_its_back(project)

    response = olivia.post(f"{CONFIRMATIONS}/{pending.pk}/approve", {}, format="json")

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["outcome"]["error"]) == ("failed", "FORGE_ERR_TARGET_DRIFT")


def test_a_confirmation_that_requires_it_needs_the_typed_memorable_id(cast, olivia, project):
    asked = ask(cast.caretaker, project, requires_typed_id=True)
    url = f"{CONFIRMATIONS}/{asked.pk}/approve"

    missing = olivia.post(url)
    wrong = olivia.post(url, {"typed_id": "wrong-words-typed-here"}, format="json")
    asked.refresh_from_db()
    assert asked.state == C.PENDING
    right = olivia.post(url, {"typed_id": asked.memorable_id.upper()}, format="json")

    assert error(missing) == error(wrong) == (400, "FORGE_ERR_TYPED_ID_MISMATCH")
    assert right.status_code == 200 and right.json()["state"] == "executed"


@pytest.mark.parametrize("body", [{"typed_id": 4}, {"typed_id": "x", "force": True}, ["x"]])
def test_an_approval_body_other_than_typed_id_is_400_and_changes_nothing(olivia, pending, body):
    response = olivia.post(f"{CONFIRMATIONS}/{pending.pk}/approve", body, format="json")

    pending.refresh_from_db()
    assert error(response) == (400, "FORGE_ERR_BAD_PARAMETER")
    assert '{"typed_id": "word-word-word-word"}' in response.json()["detail"]
    assert pending.state == C.PENDING


def test_a_form_encoded_approval_is_415(olivia, pending):
    response = olivia.post(f"{CONFIRMATIONS}/{pending.pk}/approve", "typed_id=x", content_type="text/plain")

    pending.refresh_from_db()
    assert response.status_code == 415
    assert pending.state == C.PENDING


def test_denying_answers_the_denied_confirmation_with_the_reason(operator, pending):
    response = operator.post(f"{CONFIRMATIONS}/{pending.pk}/deny", {"reason": "not now"}, format="json")

    body = response.json()
    assert response.status_code == 200
    assert (body["state"], body["decided_by"]) == ("denied", "olivia")
    assert (body["outcome"]["error"], body["outcome"]["operator_note"]) == ("FORGE_ERR_CONFIRMATION_DENIED", "not now")


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_second_decision_is_409_and_changes_nothing(cast, olivia, pending, decision):
    do_deny_confirmation(pending.pk, acting_user=cast.other_operator.user)

    response = olivia.post(f"{CONFIRMATIONS}/{pending.pk}/{decision}")

    pending.refresh_from_db()
    assert error(response) == (409, "FORGE_ERR_ALREADY_DECIDED")
    assert response.json()["detail"] == "This confirmation was already decided: it is denied."
    assert (pending.state, pending.decided_by.get_username()) == (C.DENIED, "oscar")


def test_deciding_an_expired_confirmation_is_409(olivia, pending):
    expire(pending)

    response = olivia.post(f"{CONFIRMATIONS}/{pending.pk}/approve")

    pending.refresh_from_db()
    assert error(response) == (409, "FORGE_ERR_EXPIRED")
    assert pending.state == C.EXPIRED


def test_deciding_without_the_permission_is_403_and_audited(cast, pending):
    withdraw_from_operators("decide_confirmation")

    response = logged_in(cast.operator).post(f"{CONFIRMATIONS}/{pending.pk}/deny")

    pending.refresh_from_db()
    assert error(response) == (403, "FORGE_ERR_PERMISSION_DENIED")
    assert "decide_confirmation" in response.json()["detail"]
    assert pending.state == C.PENDING
    assert refused_rows(EventKind.CONFIRMATION_DECIDED) == [("refused: deny without permission", "olivia")]


# --- contracts -------------------------------------------------------------------------------------


def test_an_operator_lists_contracts_in_a_state(operator, verified, project):
    stuck = left_in_reconciliation(project, at="before_write")

    response = operator.get(CONTRACTS, {"state": "RECONCILIATION"})

    assert response.status_code == 200
    assert [row["id"] for row in response.json()["contracts"]] == [str(stuck.pk)]
    assert response.json()["contracts"][0]["memorable_id"] == stuck.memorable_id


def test_contract_pages_follow_next_to_the_end(olivia, cast, project):
    made = [carried_out(cast.caretaker, cast.other_operator, project, name=f"v{number}") for number in range(3)]

    first = olivia.get(CONTRACTS, {"limit": 2}).json()
    second = olivia.get(first["next"]).json()

    assert [row["id"] for row in first["contracts"] + second["contracts"]] == [str(c.pk) for c in made]
    assert second["next"] is None


def test_an_operator_reads_a_contract_with_its_events(operator, verified):
    response = operator.get(f"{CONTRACTS}/{verified.pk}")

    body = response.json()
    assert response.status_code == 200
    assert (body["state"], body["post_fingerprint"], body["evidence"]) == ("VERIFIED", verified.post_fingerprint, None)
    assert body["confirmation"] == str(verified.confirmation_id)
    assert [(e["version"], e["from_state"], e["to_state"]) for e in body["events"]] == [
        (1, "", "PREPARING"),
        (2, "PREPARING", "PREPARED"),
        (3, "PREPARED", "EXECUTING"),
        (4, "EXECUTING", "VERIFIED"),
    ]


def test_a_contract_in_reconciliation_comes_with_the_evidence(olivia, project):
    stuck = left_in_reconciliation(project, at="before_verified")

    evidence = olivia.get(f"{CONTRACTS}/{stuck.pk}").json()["evidence"]

    assert evidence["finding"] == "result"
    assert (evidence["matches_before"], evidence["matches_result"]) == (False, True)
    assert evidence["current_fingerprint"] == plcopen.fingerprint(project_file_of(project).read_bytes())
    assert evidence["text"].startswith("The target matches the intended result")
    assert (evidence["reconciles"], evidence["conclusions"]) == (
        "change",
        {"applied": "VERIFIED", "not_applied": "FAILED", "rolled_back_by_hand": "ROLLED_BACK"},
    )


def test_an_interrupted_rollback_concluded_not_applied_returns_to_verified(olivia, verified):
    stuck = rollback_left_in_reconciliation(verified)

    evidence = olivia.get(f"{CONTRACTS}/{stuck.pk}").json()["evidence"]
    response = olivia.post(f"{CONTRACTS}/{stuck.pk}/resolve", {"conclusion": "not_applied"}, format="json")

    assert (evidence["reconciles"], evidence["finding"]) == ("rollback", "before")
    assert evidence["conclusions"] == {
        "applied": "ROLLED_BACK",
        "not_applied": "VERIFIED",
        "rolled_back_by_hand": "ROLLED_BACK",
    }
    assert response.json()["state"] == "VERIFIED"


def test_an_unknown_contract_is_404(olivia, project):
    unknown = uuid.uuid4()
    for response in (
        olivia.get(f"{CONTRACTS}/{unknown}"),
        olivia.post(f"{CONTRACTS}/{unknown}/rollback", {"typed_id": "a-b-c-d"}, format="json"),
        olivia.post(f"{CONTRACTS}/{unknown}/resolve", {"conclusion": "applied"}, format="json"),
    ):
        assert error(response) == (404, "FORGE_ERR_NOT_FOUND")


def test_a_tampered_contract_is_409_and_never_a_500(olivia, verified):
    tamper(verified)

    read = olivia.get(f"{CONTRACTS}/{verified.pk}")
    rolled = olivia.post(f"{CONTRACTS}/{verified.pk}/rollback", {"typed_id": verified.memorable_id}, format="json")

    for response in (read, rolled):
        assert error(response) == (409, "FORGE_ERR_CONTRACT_TAMPERED")
        assert "was changed outside Forge" in response.json()["detail"]


def test_rolling_back_restores_the_file(operator, verified, project):
    response = operator.post(f"{CONTRACTS}/{verified.pk}/rollback", {"typed_id": verified.memorable_id}, format="json")

    assert response.status_code == 200
    assert response.json()["state"] == "ROLLED_BACK"
    assert plcopen.fingerprint(project_file_of(project).read_bytes()) == verified.precondition_fingerprint


def test_a_rollback_after_the_file_changed_is_409_target_drift_and_audited(olivia, verified, project):
    change_behind_its_back(project)
    theirs = project_file_of(project).read_bytes()

    response = olivia.post(f"{CONTRACTS}/{verified.pk}/rollback", {"typed_id": verified.memorable_id}, format="json")

    verified.refresh_from_db()
    assert error(response) == (409, "FORGE_ERR_TARGET_DRIFT")
    assert verified.state == S.VERIFIED
    assert project_file_of(project).read_bytes() == theirs
    assert refused_rows(EventKind.CONTRACT_TRANSITION) == [("refused: rollback, target_drift", "olivia")]


@pytest.mark.parametrize(("body", "code"), [({"typed_id": "a-b-c-d"}, "TYPED_ID_MISMATCH"), ({}, "BAD_PARAMETER")])
def test_a_rollback_without_the_right_typed_id_is_400(olivia, verified, body, code):
    response = olivia.post(f"{CONTRACTS}/{verified.pk}/rollback", body, format="json")

    verified.refresh_from_db()
    assert error(response) == (400, f"FORGE_ERR_{code}")
    assert verified.state == S.VERIFIED


def test_rolling_back_a_contract_that_is_not_verified_is_409(olivia, project):
    stuck = left_in_reconciliation(project, at="before_write")

    response = olivia.post(f"{CONTRACTS}/{stuck.pk}/rollback", {"typed_id": stuck.memorable_id}, format="json")

    assert error(response) == (409, "FORGE_ERR_WRONG_STATE")


def test_a_rollback_without_the_permission_is_403_and_audited(cast, verified):
    withdraw_from_operators("resolve_contract")

    response = logged_in(cast.operator).post(
        f"{CONTRACTS}/{verified.pk}/rollback", {"typed_id": verified.memorable_id}, format="json"
    )

    verified.refresh_from_db()
    assert error(response) == (403, "FORGE_ERR_PERMISSION_DENIED")
    assert verified.state == S.VERIFIED
    assert refused_rows(EventKind.CONTRACT_TRANSITION) == [("refused: rollback without permission", "olivia")]


@pytest.mark.parametrize(
    ("at", "conclusion", "state"),
    [
        ("before_verified", "applied", "VERIFIED"),
        ("before_write", "not_applied", "FAILED"),
        ("before_write", "rolled_back_by_hand", "ROLLED_BACK"),
    ],
)
def test_each_conclusion_resolves_a_reconciliation_and_is_audited(operator, project, at, conclusion, state):
    stuck = left_in_reconciliation(project, at=at)

    response = operator.post(f"{CONTRACTS}/{stuck.pk}/resolve", {"conclusion": conclusion}, format="json")

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["detail"]) == (state, f"resolved:{conclusion}")
    audited = AuditEvent.objects.filter(kind=EventKind.CONTRACT_TRANSITION).order_by("-seq").first()
    assert (audited.outcome, audited.called_by) == (state, "olivia")


@pytest.mark.parametrize("body", [{"conclusion": "maybe"}, {}, {"conclusion": "applied", "by": "me"}])
def test_a_conclusion_other_than_the_three_is_400(olivia, project, body):
    stuck = left_in_reconciliation(project, at="before_write")

    response = olivia.post(f"{CONTRACTS}/{stuck.pk}/resolve", body, format="json")

    stuck.refresh_from_db()
    assert error(response) == (400, "FORGE_ERR_BAD_PARAMETER")
    assert "rolled_back_by_hand" in response.json()["detail"]
    assert stuck.state == S.RECONCILIATION


def test_resolving_a_contract_not_in_reconciliation_is_409(olivia, verified):
    response = olivia.post(f"{CONTRACTS}/{verified.pk}/resolve", {"conclusion": "applied"}, format="json")

    assert error(response) == (409, "FORGE_ERR_WRONG_STATE")


# --- who gets in -----------------------------------------------------------------------------------


def every_endpoint(confirmation: PendingConfirmation, contract: Contract) -> list[tuple[str, str, dict | None]]:
    return [
        ("get", CONFIRMATIONS, None),
        ("get", f"{CONFIRMATIONS}/{confirmation.pk}", None),
        ("post", f"{CONFIRMATIONS}/{confirmation.pk}/approve", {}),
        ("post", f"{CONFIRMATIONS}/{confirmation.pk}/deny", {}),
        ("get", CONTRACTS, None),
        ("get", f"{CONTRACTS}/{contract.pk}", None),
        ("post", f"{CONTRACTS}/{contract.pk}/rollback", {"typed_id": contract.memorable_id}),
        ("post", f"{CONTRACTS}/{contract.pk}/resolve", {"conclusion": "applied"}),
    ]


def call(client: APIClient, method: str, url: str, body: dict | None):
    return client.get(url) if method == "get" else client.post(url, body, format="json")


def assert_nothing_decided(confirmation: PendingConfirmation, contract: Contract) -> None:
    confirmation.refresh_from_db()
    contract.refresh_from_db()
    assert (confirmation.state, contract.state) == (C.PENDING, S.VERIFIED)


def test_every_endpoint_refuses_a_client_token_even_an_operators_with_403(cast, pending, verified):
    for member in (cast.operator, cast.caretaker):
        for method, url, body in every_endpoint(pending, verified):
            response = call(with_bearer(member.raw_token), method, url, body)
            assert error(response) == (403, "FORGE_ERR_PERMISSION_DENIED"), (member.user, method, url)
            assert "Client tokens are for MCP clients" in response.json()["detail"]
    assert_nothing_decided(pending, verified)


def test_every_endpoint_without_credentials_is_401(cast, pending, verified):
    for method, url, body in every_endpoint(pending, verified):
        response = call(APIClient(), method, url, body)
        assert error(response) == (401, "FORGE_ERR_NOT_AUTHENTICATED"), (method, url)
    assert_nothing_decided(pending, verified)


def test_a_console_login_that_is_not_an_operators_is_403(cast, pending, verified):
    for method, url, body in every_endpoint(pending, verified):
        assert call(logged_in(cast.caretaker), method, url, body).status_code == 403, (method, url)
    assert_nothing_decided(pending, verified)


def test_a_decision_on_a_console_login_with_a_forged_csrf_token_is_403(cast, pending, verified):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(cast.operator.user)
    browser.cookies["csrftoken"] = "a" * 32

    approved = browser.post(
        f"{CONFIRMATIONS}/{pending.pk}/approve", "{}", content_type="application/json", HTTP_X_CSRFTOKEN="b" * 32
    )
    rolled = browser.post(
        f"{CONTRACTS}/{verified.pk}/rollback",
        f'{{"typed_id": "{verified.memorable_id}"}}',
        content_type="application/json",
        HTTP_X_CSRFTOKEN="b" * 32,
    )

    for response in (approved, rolled):
        assert error(response) == (403, "FORGE_ERR_PERMISSION_DENIED")
        assert "CSRF" in response.json()["detail"]
    assert_nothing_decided(pending, verified)


def test_a_decision_on_a_console_login_with_the_csrf_token_goes_through(cast, pending):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(cast.operator.user)
    browser.cookies["csrftoken"] = "a" * 32

    response = browser.post(
        f"{CONFIRMATIONS}/{pending.pk}/deny", "{}", content_type="application/json", HTTP_X_CSRFTOKEN="a" * 32
    )

    pending.refresh_from_db()
    assert response.status_code == 200
    assert pending.state == C.DENIED
