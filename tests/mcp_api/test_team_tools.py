"""The team tools over MCP, in-process: hidden and refused with FORGE_ERR_NOT_CARETAKER naming the missing
condition while the caretaker is inactive (each of the four conditions missing on its own), announced to open
streams when the caretaker is switched on or off, and a certificate request carried from a one-time code and a
CSR through the caretaker's typed approval to the certificate editor.confirm hands back.

Every call goes through the ASGI application as a stateless (2026-07-28) request; the caretaker's CA, roster
and trust store live in the test's own folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from django.contrib.auth.models import User

from caretaker import activation, ca, sealing, services, store
from caretaker.models import ACCEPTANCE_SENTENCE, Activation, EnrollmentCode, Peer, PeerState
from caretaker.randomart import key_art
from confirmations.models import ConfirmationState, PendingConfirmation
from confirmations.services import DecisionRefused, do_approve_confirmation
from mcp_api.revisions import CLIENT_CAPABILITIES_META_KEY
from tests.caretaker.conftest import csr_for, new_key
from tests.mcp_api.helpers import (
    Response,
    allow_project,
    envelope,
    mcp_headers,
    open_session,
    open_stream,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.serving_tls import serving_tls

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

CARETAKER_TOOLS = ["team.export_setup", "team.request_cert", "team.revoke_peer", "team.rotate_cert"]
ARGUMENTS = {
    "team.request_cert": {"enrollment_code": "fenr_unknown", "csr": "not a csr"},
    "team.revoke_peer": {"peer": "alice@team", "reason": "laptop lost"},
    "team.rotate_cert": {"peer": "alice@team", "csr": "not a csr", "proof": "AAAA"},
    "team.export_setup": {},
}
PEER = "alice@team"


# --- the team and the calls ------------------------------------------------------------------------------


@pytest.fixture
def cora(team) -> User:
    """Override mode on, the caretaker's folders in this test's tmp_path, and Cora, who may act as caretaker
    and decide confirmations (no CA yet, not switched on): the team of tests/conftest.py."""
    return team.caretaker


@pytest.fixture
def active(cora) -> User:
    """The caretaker active: an Ed25519 team CA and the sentence typed by Cora."""
    services.do_create_ca("ed25519", actor="cora")
    activation.do_activate(cora, ACCEPTANCE_SENTENCE)
    assert activation.is_caretaker()
    return cora


def handle_for(token: str) -> str:
    """A stateless session handle for this token (no project: the team tools name none)."""
    return allow_project(token, "")


async def call(token: str, tool: str, arguments: dict[str, Any]) -> Response:
    body = stateless_rpc("tools/call", {"name": tool, "arguments": arguments})
    return await send("POST", "/mcp", headers=stateless_headers(token, "tools/call", name=tool), body=body)


def structured(response: Response) -> tuple[dict[str, Any], bool]:
    assert response.status == 200, response.body
    result = response.json()["result"]
    return result["structuredContent"], result["isError"]


async def tool_names(token: str) -> list[str]:
    response = await send(
        "POST", "/mcp", headers=stateless_headers(token, "tools/list"), body=stateless_rpc("tools/list")
    )
    assert response.status == 200, response.body
    return [tool["name"] for tool in response.json()["result"]["tools"]]


@database_sync_to_async
def enroll(name: str = PEER) -> str:
    """A peer registered by the caretaker and its one-time enrollment code (raw, as shown once)."""
    services.do_create_peer(name, role="author", endpoint="https://alice-ws.factory:7531", actor="cora")
    return services.do_mint_code(name, actor="cora").raw


async def request_cert(token: str, handle: str, code: str, csr: str) -> tuple[dict[str, Any], bool]:
    arguments = {"enrollment_code": code, "csr": csr, "session_handle": handle}
    return structured(await call(token, "team.request_cert", arguments))


async def confirm(token: str, handle: str, pending_id: str) -> tuple[dict[str, Any], bool]:
    return structured(await call(token, "editor.confirm", {"pending_id": pending_id, "session_handle": handle}))


@database_sync_to_async
def approve(pending_id: str, user: User, typed_id: str) -> PendingConfirmation:
    return do_approve_confirmation(pending_id, acting_user=user, typed_id=typed_id)


@database_sync_to_async
def stored(pending_id: str) -> PendingConfirmation:
    return PendingConfirmation.objects.get(pk=pending_id)


@database_sync_to_async
def count_confirmations() -> int:
    return PendingConfirmation.objects.count()


@database_sync_to_async
def peer_state(name: str = PEER) -> tuple[str, str]:
    peer = Peer.objects.get(name=name)
    return peer.state, peer.serial


@database_sync_to_async
def code_used(raw: str) -> bool:
    from forge_core.tokens import token_digest

    return EnrollmentCode.objects.get(digest=token_digest(raw)).used_at is not None


def roster_published() -> bool:
    from django.conf import settings

    return not store.read_published(settings.FORGE_ROSTER_DIR).empty


# --- the four conditions, each missing on its own ----------------------------------------------------------


def reseal(row: Activation) -> None:
    """Store the activation row as Forge itself would (sealed), with whatever the test set on it."""
    row.seal = sealing.seal(row.seal_parts())
    row.save()


def override_off(settings, cora: User) -> None:
    settings.FORGE_OVERRIDE_SECURITIES = False


def flag_off(settings, cora: User) -> None:
    # The acceptance stays recorded; only the runtime flag is off.
    row = Activation.objects.get(pk=1)
    row.enabled = False
    reseal(row)


def switched_on_without_acceptance(settings, cora: User) -> None:
    row = Activation.objects.get(pk=1)
    row.accepted_by, row.accepted_at, row.sentence = None, None, ""
    reseal(row)


def sentence_not_exact(settings, cora: User) -> None:
    row = Activation.objects.get(pk=1)
    row.sentence = ACCEPTANCE_SENTENCE.lower()
    reseal(row)


def ca_missing(settings, cora: User) -> None:
    (settings.FORGE_CA_DIR / "ca.key").unlink()
    (settings.FORGE_CA_DIR / "ca.crt").unlink()


def ca_key_replaced(settings, cora: User) -> None:
    other = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key_path: Path = settings.FORGE_CA_DIR / "ca.key"
    replacement = key_path.with_name("ca.key.new")
    replacement.write_bytes(other)
    os.chmod(replacement, 0o600)
    os.replace(replacement, key_path)


MISSING_ALONE: dict[str, tuple[Callable[..., None], str, str]] = {
    "override off": (override_off, "override", "FORGE_OVERRIDE_SECURITIES=1"),
    "flag off": (flag_off, "flag", "Switch the caretaker on"),
    "switched on without acceptance": (switched_on_without_acceptance, "acceptance", ACCEPTANCE_SENTENCE),
    "sentence not exact": (sentence_not_exact, "acceptance", ACCEPTANCE_SENTENCE),
    "CA missing": (ca_missing, "ca", "There is no team CA"),
    "CA key not matching": (ca_key_replaced, "ca", "do not belong together"),
}


@pytest.mark.parametrize("case", MISSING_ALONE, ids=list(MISSING_ALONE))
async def test_each_condition_missing_alone_hides_and_refuses_the_caretaker_tools_naming_it(
    case, cast, active, settings
):
    take_away, key, words = MISSING_ALONE[case]
    await database_sync_to_async(take_away)(settings, active)
    unmet = [c.key for c in await database_sync_to_async(activation.conditions)() if not c.met]
    assert unmet == [key]
    token = cast.operator.raw_token

    names = await tool_names(token)

    assert "team.list_peers" in names
    assert [name for name in names if name in CARETAKER_TOOLS] == []
    for tool in CARETAKER_TOOLS:
        answer, is_error = structured(await call(token, tool, ARGUMENTS[tool]))
        assert is_error, (tool, answer)
        assert answer["error"] == "FORGE_ERR_NOT_CARETAKER", (tool, answer)
        assert len(answer["missing"]) == 1, (tool, answer["missing"])
        assert words in answer["missing"][0], (tool, answer["missing"])
    assert await count_confirmations() == 0


async def test_a_tampered_activation_row_counts_as_never_switched_on(cast, active):
    await database_sync_to_async(Activation.objects.filter(pk=1).update)(accepted_by=cast.operator.user)
    token = cast.operator.raw_token

    answer, is_error = structured(await call(token, "team.export_setup", {}))

    assert is_error and answer["error"] == "FORGE_ERR_NOT_CARETAKER"
    assert [m.split(" ")[0] for m in answer["missing"]] == ["Switch", "Type"]
    assert "team.export_setup" not in await tool_names(token)


async def test_an_active_caretaker_lists_the_team_tools(cast, active):
    names = await tool_names(cast.operator.raw_token)

    assert sorted(name for name in names if name in CARETAKER_TOOLS) == CARETAKER_TOOLS


async def test_team_list_peers_answers_any_token_while_the_caretaker_is_inactive(cast, cora):
    await database_sync_to_async(services.do_create_peer)(PEER, role="author", actor="cora")

    answer, is_error = structured(await call(cast.caretaker.raw_token, "team.list_peers", {}))

    assert not is_error, answer
    assert answer["caretaker_active"] is False
    assert [(p["name"], p["state"], p["revoked"]) for p in answer["peers"]] == [(PEER, "enrolling", False)]


# --- switching the caretaker on and off tells open streams ---------------------------------------------------


async def test_activation_and_deactivation_each_send_tools_list_changed_to_an_open_stream(cast, cora):
    await database_sync_to_async(services.do_create_ca)("ed25519", actor="cora")
    token = cast.operator.raw_token
    session_id = await open_session(token)

    async with open_stream("GET", "/mcp", headers=mcp_headers(token, session_id=session_id)) as stream:
        await stream.first_chunk()
        await database_sync_to_async(activation.do_activate)(cora, ACCEPTANCE_SENTENCE)
        on = await stream.next_event()
        listed_on = await tool_names(token)
        await database_sync_to_async(activation.do_deactivate)(cora)
        off = await stream.next_event()
        listed_off = await tool_names(token)

    assert on.json()["method"] == "notifications/tools/list_changed"
    assert off.json()["method"] == "notifications/tools/list_changed"
    assert "team.request_cert" in listed_on
    assert "team.request_cert" not in listed_off


# --- a certificate request: code and CSR, the caretaker's typed approval, the outcome ---------------------------


async def test_a_request_becomes_a_confirmation_approved_by_the_keys_memorable_id_and_confirm_gives_the_certificate(
    cast, active
):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    code = await enroll()
    key = new_key()
    art = key_art(key.public_key())

    proposed, is_error = await request_cert(token, handle, code, csr_for(key, common_name="root"))

    assert is_error and proposed["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", proposed
    assert proposed["memorable_id"] == art.memorable_id
    pending = await stored(proposed["pending_id"])
    assert (pending.state, pending.capability, pending.project) == (ConfirmationState.PENDING, "team.roster", "")
    assert pending.requires_typed_id and pending.key_memorable_id == art.memorable_id
    assert pending.preview["randomart"] == art.randomart
    assert await code_used(code)
    assert await peer_state() == (PeerState.ENROLLING, "")
    assert not await database_sync_to_async(roster_published)()
    waiting, is_error = await confirm(token, handle, proposed["pending_id"])
    assert not is_error and waiting["state"] == "pending"

    decided = await approve(proposed["pending_id"], active, art.memorable_id.upper().replace("-", " "))
    outcome, is_error = await confirm(token, handle, proposed["pending_id"])

    assert decided.state == ConfirmationState.EXECUTED
    assert not is_error and outcome["state"] == "executed", outcome
    result = outcome["result"]
    certificate = x509.load_pem_x509_certificate(result["certificate"].encode())
    assert certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == PEER
    assert certificate.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    ) == key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert (result["memorable_id"], result["randomart"]) == (art.memorable_id, art.randomart)
    assert result["key_fingerprint"] == art.fingerprint
    assert result["serial"] == format(certificate.serial_number, "x")
    assert await peer_state() == (PeerState.ACTIVE, result["serial"])
    assert await database_sync_to_async(roster_published)()


@pytest.mark.parametrize("typed", ["", "wrong-words-typed-here", "confirmation's own id"])
async def test_a_wrong_typed_id_is_refused_and_nothing_is_issued(typed, cast, active):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    proposed, _ = await request_cert(token, handle, await enroll(), csr_for(new_key()))
    pending = await stored(proposed["pending_id"])
    if typed == "confirmation's own id":
        typed = pending.memorable_id
        assert typed != pending.key_memorable_id

    with pytest.raises(DecisionRefused) as refused:
        await approve(proposed["pending_id"], active, typed)

    assert refused.value.reason == "typed_id_mismatch"
    assert (await stored(proposed["pending_id"])).state == ConfirmationState.PENDING
    assert await peer_state() == (PeerState.ENROLLING, "")
    assert not await database_sync_to_async(roster_published)()


async def test_a_request_from_a_tasks_client_answers_a_task_that_completes_with_the_certificate(cast, active):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    key = new_key()
    arguments = {"enrollment_code": await enroll(), "csr": csr_for(key), "session_handle": handle}
    capabilities = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    meta = envelope(**{CLIENT_CAPABILITIES_META_KEY: capabilities})
    headers = stateless_headers(token, "tools/call", name="team.request_cert")
    body = stateless_rpc("tools/call", {"name": "team.request_cert", "arguments": arguments}, meta=meta)

    task = (await send("POST", "/mcp", headers=headers, body=body)).json()["result"]
    pending = await database_sync_to_async(PendingConfirmation.objects.get)()
    await approve(str(pending.id), active, key_art(key.public_key()).memorable_id)
    get = stateless_rpc("tasks/get", {"taskId": task["taskId"]}, meta=meta)
    done = (await send("POST", "/mcp", headers=stateless_headers(token, "tasks/get"), body=get)).json()["result"]

    assert task["resultType"] == "task" and task["status"] == "working"
    assert done["status"] == "completed"
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["state"] == "executed"
    assert done["result"]["structuredContent"]["result"]["memorable_id"] == key_art(key.public_key()).memorable_id


async def test_an_operator_who_may_not_act_as_caretaker_cannot_approve(cast, active):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    key = new_key()
    proposed, _ = await request_cert(token, handle, await enroll(), csr_for(key))
    olivia = cast.operator.user
    assert await database_sync_to_async(olivia.has_perm)("confirmations.decide_confirmation")

    with pytest.raises(DecisionRefused) as refused:
        await approve(proposed["pending_id"], olivia, key_art(key.public_key()).memorable_id)

    assert refused.value.reason == "permission_denied"
    assert "act_as_caretaker" in refused.value.message
    assert (await stored(proposed["pending_id"])).state == ConfirmationState.PENDING
    assert await peer_state() == (PeerState.ENROLLING, "")


async def test_a_code_works_once(cast, active):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    code = await enroll()
    first, _ = await request_cert(token, handle, code, csr_for(new_key()))

    again, is_error = await request_cert(token, handle, code, csr_for(new_key()))

    assert first["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert is_error and again["error"] == "FORGE_ERR_ENROLLMENT_CODE"
    assert "used already" in again["message"]
    assert await count_confirmations() == 1


# --- bad CSRs: refused with their reason, nothing issued, the code kept ------------------------------------------


def _with_extension(extension: x509.ExtensionType, *, critical: bool) -> str:
    key = new_key()
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "whoever")]))
        .add_extension(extension, critical=critical)
        .sign(key, None)
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()


def bad_self_signature() -> str:
    der = bytearray(x509.load_pem_x509_csr(csr_for(new_key()).encode()).public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01  # the last byte of the Ed25519 signature
    return x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM).decode()


def rsa_2048() -> str:
    return csr_for(rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ca_requested() -> str:
    return _with_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)


def extra_eku() -> str:
    return _with_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
    )


def dsa_key() -> str:
    key = dsa.generate_private_key(key_size=2048)
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "whoever")]))
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()


BAD_CSRS: dict[str, Callable[[], str]] = {
    "bad_signature": bad_self_signature,
    "weak_key": rsa_2048,
    "ca_requested": ca_requested,
    "extra_eku": extra_eku,
    "unsupported_key": dsa_key,
}


@pytest.mark.parametrize("reason", BAD_CSRS)
async def test_a_bad_csr_is_refused_with_its_reason_issues_nothing_and_keeps_the_code(reason, cast, active):
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    code = await enroll()

    refused, is_error = await request_cert(token, handle, code, BAD_CSRS[reason]())

    assert is_error and refused["error"] == "FORGE_ERR_INVALID_CSR", refused
    assert refused["reason"] == reason
    assert await count_confirmations() == 0
    assert not await code_used(code)
    assert await peer_state() == (PeerState.ENROLLING, "")
    assert not await database_sync_to_async(roster_published)()
    retried, _ = await request_cert(token, handle, code, csr_for(new_key()))
    assert retried["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED", retried


async def test_a_request_refused_at_the_pending_cap_keeps_the_code(cast, active, settings):
    settings.FORGE_MAX_PENDING_PER_TOKEN = 1
    token = cast.operator.raw_token
    handle = await database_sync_to_async(handle_for)(token)
    first, _ = await request_cert(token, handle, await enroll(), csr_for(new_key()))
    code = await enroll("bob@team")

    refused, is_error = await request_cert(token, handle, code, csr_for(new_key()))

    assert first["error"] == "FORGE_ERR_CONFIRMATION_REQUIRED"
    assert is_error and refused["error"] == "FORGE_ERR_LIMIT_REACHED", refused
    assert not await code_used(code)
    assert await count_confirmations() == 1


# --- server_info: the trust store with fingerprint art ---------------------------------------------------------


async def test_server_info_lists_the_trusted_ca_with_its_memorable_id_and_randomart(cast, active, settings):
    certificate = (await database_sync_to_async(ca.load_ca)(settings.FORGE_CA_DIR)).certificate
    art = key_art(certificate)

    answer, is_error = structured(await call(cast.caretaker.raw_token, "server_info", {}))

    assert not is_error
    assert answer["caretaker"] == {"active": True}
    [entry] = answer["trust_store_cas"]
    assert entry["fingerprint_sha256"] == ca.cert_fingerprint(certificate)
    assert (entry["memorable_id"], entry["randomart"]) == (art.memorable_id, art.randomart)
    assert entry["randomart"].splitlines()[0].startswith("+--[ED25519 256]")


async def test_export_setup_gives_the_https_certificate_to_check_the_server_by_while_tls_is_served(
    cast, active, tmp_path
):
    without, _ = structured(await call(cast.operator.raw_token, "team.export_setup", {}))
    with serving_tls(tmp_path / "server-secrets", port=8443) as certificate:
        served, _ = structured(await call(cast.operator.raw_token, "team.export_setup", {}))

    assert without["server_certificate"] == ""
    assert "serves no HTTPS yet" in without["client_configuration"]["files"]
    assert served["server_certificate"] == certificate.cert_path.read_text()
    assert served["server_memorable_id"] == key_art(certificate.certificate).memorable_id
    assert "--cacert forge-server.crt" in served["client_configuration"]["curl"]
    assert "https://SERVER:8443/mcp" in served["client_configuration"]["mcp_stdio"]
