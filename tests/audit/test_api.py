"""The audit log's HTTP API: events for operators only, checkpoints and proofs for every client, and
proofs that verify with `audit.merkle` against roots a checkpoint note signs."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from access.services import do_revoke_token
from audit import merkle
from audit.checkpoint import parse_and_verify
from audit.models import AuditCheckpoint, AuditEvent, AuditTreeNode, EventKind
from audit.services import DatabaseNodeStore, do_make_checkpoint, format_ts, record, tree_size
from console.operator_tokens import do_create_operator_token
from forge_core.canonical import canonical_json
from tests.conftest import Cast, Member

EVENTS = "/api/audit/events"
CHECKPOINT = "/api/audit/checkpoint"
INCLUSION = "/api/audit/proof/inclusion"
CONSISTENCY = "/api/audit/proof/consistency"


def client_of(member: Member) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {member.raw_token}")
    return client


@pytest.fixture
def operator(cast: Cast) -> APIClient:
    """Olivia through an operator token (made before the test records anything): the events are the operator
    API's."""
    client = APIClient()
    raw = do_create_operator_token(cast.operator.user, "audit reader", acting_user="tests").raw
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def tool_calls(count: int, **fields: str) -> list[AuditEvent]:
    return [record(EventKind.TOOL_CALL, tool="read_pou", outcome="ok", **fields) for _ in range(count)]


def signed_at(count: int) -> AuditCheckpoint:
    """Append events until the log holds `count`, then sign a checkpoint there."""
    tool_calls(count - tree_size())
    made = do_make_checkpoint()
    assert made is not None and made.size == count
    return made


def b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def served_key(body: dict[str, Any]) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(b64(body["public_key"]["ed25519_public_key"]))


def error_code(response) -> str:
    return response.json()["code"]


# --- events ----------------------------------------------------------------------------------------


def test_operator_reads_events_as_the_canonical_rows_the_tree_hashes(cast: Cast, operator: APIClient) -> None:
    made = tool_calls(3, called_by="olivia", session="s-1")
    response = operator.get(EVENTS, {"seq_after": made[0].seq - 1})
    assert response.status_code == 200
    rows = response.json()["events"]
    assert [row["seq"] for row in rows] == [event.seq for event in made]
    stored = {node.index: bytes(node.hash) for node in AuditTreeNode.objects.filter(level=0)}
    for row in rows:
        assert merkle.leaf_hash(canonical_json(row).encode()) == stored[row["seq"] - 1]


def test_events_are_filtered_by_kind_tool_caller_session_and_project(cast: Cast, operator: APIClient) -> None:
    wanted = record(
        EventKind.TOOL_CALL, tool="write_pou", called_by="olivia", session="s-2", project="plant", outcome="ok"
    )
    record(EventKind.TOOL_CALL, tool="write_pou", called_by="olivia", session="s-2", project="other", outcome="ok")
    record(EventKind.TOOL_CALL, tool="read_pou", called_by="olivia", session="s-2", project="plant", outcome="ok")
    record(EventKind.CARETAKER_ACTION, tool="write_pou", called_by="olivia", session="s-2", project="plant")
    filters = {"kind": "tool_call", "tool": "write_pou", "called_by": "olivia", "session": "s-2", "project": "plant"}
    response = operator.get(EVENTS, filters)
    assert [row["seq"] for row in response.json()["events"]] == [wanted.seq]


def test_events_are_filtered_by_a_time_window_from_since_up_to_before_until(cast: Cast, operator: APIClient) -> None:
    made = tool_calls(5)
    since, until = made[1].ts, made[3].ts
    response = operator.get(EVENTS, {"since": format_ts(since), "until": format_ts(until)})
    expected = [event.seq for event in AuditEvent.objects.filter(ts__gte=since, ts__lt=until)]
    assert [row["seq"] for row in response.json()["events"]] == expected
    assert made[1].seq in expected and made[3].seq not in expected


def test_events_pages_follow_next_to_the_end_keeping_the_filters(cast: Cast, operator: APIClient) -> None:
    made = tool_calls(5, called_by="paged")
    client = operator
    url, seen = f"{EVENTS}?called_by=paged&limit=2", []
    for _ in range(5):
        body = client.get(url).json()
        assert len(body["events"]) <= 2
        seen += [row["seq"] for row in body["events"]]
        if body["next"] is None:
            break
        assert "called_by=paged" in body["next"]
        url = body["next"]
    assert seen == [event.seq for event in made]
    assert body["next"] is None


def test_events_page_holds_50_by_default(cast: Cast, operator: APIClient) -> None:
    tool_calls(51 - tree_size())
    body = operator.get(EVENTS).json()
    assert [row["seq"] for row in body["events"]] == list(range(1, 51))
    assert body["next"] is not None


def test_events_page_costs_the_same_queries_whatever_its_size(cast: Cast) -> None:
    tool_calls(20)
    client = APIClient()
    client.force_login(cast.operator.user)
    counts = []
    for limit in (1, 20):
        with CaptureQueriesContext(connection) as queries:
            assert len(client.get(EVENTS, {"limit": limit}).json()["events"]) == limit
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.mark.parametrize(
    "query",
    [
        {"kind": "tool-call"},
        {"since": "yesterday"},
        {"until": "2026-01-31T09:30:00 01:00"},
        {"seq_after": "-1"},
        {"seq_after": "1.5"},
        {"limit": "0"},
        {"limit": "201"},
        {"limit": "ten"},
        {"knd": "tool_call"},
    ],
)
def test_bad_event_filters_are_400_with_what_to_send(cast: Cast, operator: APIClient, query: dict[str, str]) -> None:
    response = operator.get(EVENTS, query)
    assert response.status_code == 400
    assert error_code(response) == "FORGE_ERR_BAD_PARAMETER"
    assert next(iter(query)) in response.json()["detail"]


def test_a_filter_given_twice_is_400(cast: Cast, operator: APIClient) -> None:
    response = operator.get(f"{EVENTS}?tool=a&tool=b")
    assert response.status_code == 400
    assert error_code(response) == "FORGE_ERR_BAD_PARAMETER"


def test_events_are_refused_to_a_client_token_even_when_its_owner_is_an_operator(cast: Cast) -> None:
    response = client_of(cast.operator).get(EVENTS)
    assert response.status_code == 403
    assert error_code(response) == "FORGE_ERR_PERMISSION_DENIED"
    assert "Client tokens are for MCP clients" in response.json()["detail"]


def test_events_are_refused_to_a_token_whose_owner_is_not_an_operator(cast: Cast) -> None:
    response = client_of(cast.caretaker).get(EVENTS)
    assert response.status_code == 403
    assert error_code(response) == "FORGE_ERR_PERMISSION_DENIED"


def test_events_are_refused_to_staff_outside_the_operators_group(cast: Cast) -> None:
    staff = get_user_model().objects.create_user(username="stella", is_staff=True)
    client = APIClient()
    client.force_login(staff)
    assert client.get(EVENTS).status_code == 403


def test_events_are_served_to_an_operator_logged_in_to_the_console(cast: Cast) -> None:
    client = APIClient()
    client.force_login(cast.other_operator.user)
    assert client.get(EVENTS).status_code == 200


@pytest.mark.parametrize("path", [EVENTS, CHECKPOINT, f"{INCLUSION}?seq=1&size=1"])
def test_request_without_credentials_is_401_naming_the_bearer_scheme(cast: Cast, path: str) -> None:
    response = APIClient().get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="forge-mcp"'
    assert error_code(response) == "FORGE_ERR_NOT_AUTHENTICATED"
    assert "Authorization: Bearer" in response.json()["detail"]


def test_unknown_bearer_token_is_401_and_audited(cast: Cast) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer fmcp_not-a-real-token")
    response = client.get(CHECKPOINT)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="forge-mcp"'
    assert error_code(response) == "FORGE_ERR_AUTHENTICATION_FAILED"
    refused = AuditEvent.objects.order_by("-seq").first()
    assert (refused.kind, refused.outcome, refused.arguments) == ("auth_refused", "bad_token", {"path": CHECKPOINT})


def test_revoked_token_is_401(cast: Cast) -> None:
    do_revoke_token(cast.caretaker.token, acting_user="olivia")
    assert client_of(cast.caretaker).get(CHECKPOINT).status_code == 401


# --- checkpoint ------------------------------------------------------------------------------------


def test_checkpoint_note_verifies_with_the_public_key_served_beside_it(cast: Cast) -> None:
    signed_at(8)
    body = client_of(cast.caretaker).get(CHECKPOINT).json()
    checked = parse_and_verify(
        body["note"], body["public_key"]["key_name"], served_key(body), origin=body["public_key"]["origin"]
    )
    assert (checked.size, checked.root) == (body["size"], b64(body["root"])) == (8, merkle.root(8, DatabaseNodeStore()))


def test_checkpoint_is_the_latest_signed(cast: Cast) -> None:
    signed_at(7)
    signed_at(9)
    assert client_of(cast.caretaker).get(CHECKPOINT).json()["size"] == 9


def test_checkpoint_before_any_is_signed_is_404(cast: Cast) -> None:
    response = client_of(cast.caretaker).get(CHECKPOINT)
    assert response.status_code == 404
    assert error_code(response) == "FORGE_ERR_NO_CHECKPOINT"
    assert "audit_checkpoint" in response.json()["detail"]


# --- proofs ----------------------------------------------------------------------------------------


def test_inclusion_proof_verifies_against_the_signed_root_for_every_event(cast: Cast) -> None:
    checkpoint = signed_at(13)
    client = client_of(cast.caretaker)
    key = served_key(client.get(CHECKPOINT).json())
    for seq in range(1, 14):
        body = client.get(INCLUSION, {"seq": seq, "size": 13}).json()
        signed = parse_and_verify(body["note"], "forge-mcp-audit", key)
        assert (body["seq"], body["leaf_index"], body["size"]) == (seq, seq - 1, 13)
        assert b64(body["root"]) == signed.root == bytes(checkpoint.root)
        proof = [b64(node) for node in body["proof"]]
        assert merkle.verify_inclusion(b64(body["leaf_hash"]), seq - 1, 13, proof, signed.root)


def test_inclusion_proof_is_for_the_event_the_operator_reads(cast: Cast, operator: APIClient) -> None:
    signed_at(6)
    row = operator.get(EVENTS, {"seq_after": 3, "limit": 1}).json()["events"][0]
    body = client_of(cast.caretaker).get(INCLUSION, {"seq": 4, "size": 6}).json()
    assert b64(body["leaf_hash"]) == merkle.leaf_hash(canonical_json(row).encode())


def test_consistency_proof_verifies_between_two_signed_roots(cast: Cast) -> None:
    old, new = signed_at(7), signed_at(21)
    body = client_of(cast.caretaker).get(CONSISTENCY, {"from": 7, "to": 21}).json()
    assert (body["from"], body["to"]) == (7, 21)
    assert (b64(body["root_from"]), b64(body["root_to"])) == (bytes(old.root), bytes(new.root))
    assert (body["note_from"], body["note_to"]) == (old.note, new.note)
    proof = [b64(node) for node in body["proof"]]
    assert merkle.verify_consistency(7, 21, bytes(old.root), bytes(new.root), proof)


@pytest.mark.parametrize(
    ("path", "query", "named"),
    [
        (INCLUSION, {"size": "8"}, "seq"),
        (INCLUSION, {"seq": "1"}, "size"),
        (INCLUSION, {"seq": "0", "size": "8"}, "seq"),
        (INCLUSION, {"seq": "one", "size": "8"}, "seq"),
        (INCLUSION, {"seq": "9", "size": "8"}, "9"),
        (INCLUSION, {"seq": "1", "size": "99999999999999999999"}, "size"),
        (INCLUSION, {"seq": "1", "size": "8", "index": "0"}, "index"),
        (CONSISTENCY, {"from": "8", "to": "8"}, "smaller"),
        (CONSISTENCY, {"from": "12", "to": "8"}, "smaller"),
        (CONSISTENCY, {"from": "0", "to": "8"}, "from"),
        (CONSISTENCY, {"from": "8"}, "to"),
        (CHECKPOINT, {"size": "8"}, "size"),
    ],
)
def test_bad_proof_parameters_are_400_with_what_to_send(cast: Cast, path: str, query: dict, named: str) -> None:
    signed_at(8)
    response = client_of(cast.caretaker).get(path, query)
    assert response.status_code == 400
    assert error_code(response) == "FORGE_ERR_BAD_PARAMETER"
    assert named in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "query"),
    [
        (INCLUSION, {"seq": "3", "size": "10"}),
        (CONSISTENCY, {"from": "8", "to": "10"}),
        (CONSISTENCY, {"from": "6", "to": "8"}),
    ],
)
def test_proof_at_a_size_no_checkpoint_signed_is_404(cast: Cast, path: str, query: dict) -> None:
    signed_at(8)
    tool_calls(2)
    response = client_of(cast.caretaker).get(path, query)
    assert response.status_code == 404
    assert error_code(response) == "FORGE_ERR_UNKNOWN_CHECKPOINT"
