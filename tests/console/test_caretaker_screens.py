"""The caretaker's console screens (console.caretaker_screens) and REST API (console.caretaker_api): each screen
renders for a caretaker and is refused to an operator without the caretaker's permission; each action does
what it says, on disk, in the database and in the audit log; a wrong sentence or a wrong typed memorable ID
changes nothing. Cora is the caretaker (tests/caretaker/conftest.py); Olivia an operator."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from cryptography import x509
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent, EventKind
from caretaker import activation, ca, roster, services, store, trust
from caretaker.capability import RosterCapability
from caretaker.models import ACCEPTANCE_SENTENCE, EnrollmentCode, Peer, PeerState, Revocation, RosterConflict
from caretaker.randomart import key_art
from confirmations.models import ConfirmationState, PendingConfirmation
from confirmations.services import do_create_confirmation
from forge_core.tokens import token_digest
from tests.caretaker.conftest import csr_for, new_key

pytestmark = pytest.mark.django_db

SCREEN = reverse("admin:caretaker")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page_text(response) -> str:
    return html.unescape(response.content.decode())


def shown_messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


def caretaker_rows(tool: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.CARETAKER_ACTION, tool=tool).order_by("seq"))


def add_peer(name: str = "alice@team") -> Peer:
    return services.do_create_peer(name, role="author", endpoint="https://alice-ws.factory:7531", actor="cora")


def issued(team, name: str = "alice@team") -> Peer:
    add_peer(name)
    proposal = services.propose_issuance(csr_for(new_key()), peer_name=name, requested_by="cora")
    assert services.carry_out_now(proposal, user=team.caretaker, typed_id=proposal.key_memorable_id).verified
    return Peer.objects.get(name=name)


def team_request(cast, name: str = "alice@team") -> tuple[PendingConfirmation, services.Proposal]:
    """A member's client asked for a certificate with a one-time code, as team.request_cert does."""
    add_peer(name)
    code = services.do_mint_code(name, actor="cora").raw
    proposal = services.propose_issuance(csr_for(new_key()), code=code, requested_by="dana")
    confirmation = do_create_confirmation(
        tool=proposal.tool,
        arguments={"peer": name},
        question=f"dana asks: {proposal.question}",
        preview={**proposal.preview, "result": {}},
        principal=cast.caretaker.user,
        session_id="s-1",
        client_label="dana-client",
        project="",
        capability=RosterCapability.name,
        method=proposal.method,
        target=proposal.target,
        intent=proposal.intent,
        base_fingerprint=proposal.base_fingerprint,
        result_digest=proposal.result_digest,
        label=proposal.label,
        requires_typed_id=True,
        key_memorable_id=proposal.key_memorable_id,
    )
    return confirmation, proposal


@pytest.fixture
def operator_caretaker(cast, team):
    """Olivia, an operator, also given the caretaker's permission (for the operator API)."""
    user = cast.operator.user
    user.user_permissions.add(Permission.objects.get(codename="act_as_caretaker"))
    return type(user).objects.get(pk=user.pk)


# --- rendering and who may see it ---------------------------------------------------------------------------


def test_the_screen_shows_the_four_conditions_with_what_to_do(team):
    response = signed_in(team.caretaker).get(SCREEN)
    assert response.status_code == 200
    text = page_text(response)
    for title in ("Override mode at start", "Runtime flag", "Responsibility accepted", "Team CA"):
        assert title in text
    assert ACCEPTANCE_SENTENCE in text
    assert "There is no team CA" in text and 'id="create-ca"' in text
    assert [c.key for c in response.context["conditions"] if not c.met] == ["flag", "acceptance", "ca"]


def test_an_operator_without_the_caretaker_permission_is_refused_every_screen_and_action(cast, team):
    client = signed_in(cast.operator.user)
    response = client.get(SCREEN, follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:index")
    assert any("Only a caretaker" in message for message in shown_messages(response))
    client.post(reverse("admin:caretaker_activate"), {"sentence": ACCEPTANCE_SENTENCE})
    client.post(reverse("admin:caretaker_create_ca"), {"key_type": "ed25519"})
    client.post(reverse("admin:caretaker_add_peer"), {"name": "mallory@team", "role": "author"})
    assert activation.current() is None
    assert not (team.folder / "secrets" / "team-ca" / "ca.key").exists()
    assert not Peer.objects.exists()
    assert client.get(reverse("admin:caretaker_roster_file", args=["peers.toml"])).status_code == 302


def test_the_dashboard_lists_certificates_expiring_within_14_days_for_a_caretaker(active, cast):
    peer = issued(active)
    Peer.objects.filter(pk=peer.pk).update(expires_at=timezone.now() + timedelta(days=3))
    text = page_text(signed_in(active.caretaker).get(reverse("admin:index")))
    assert 'id="expiring-certificates"' in text and "alice@team" in text and peer.serial in text
    assert 'id="caretaker-panel"' not in page_text(signed_in(cast.operator.user).get(reverse("admin:index")))


# --- activation --------------------------------------------------------------------------------------------


def test_activating_with_the_exact_sentence_makes_the_server_caretaker_and_audits_who(team):
    services.do_create_ca("ed25519", actor="cora")
    response = signed_in(team.caretaker).post(
        reverse("admin:caretaker_activate"), {"sentence": ACCEPTANCE_SENTENCE}, follow=True
    )
    assert activation.is_caretaker()
    assert any("caretaker is on" in message for message in shown_messages(response))
    assert caretaker_rows("caretaker.activate")[-1].called_by == "cora"
    assert caretaker_rows("caretaker.activate")[-1].outcome == "activated"


def test_a_wrong_sentence_changes_nothing_and_says_what_to_type(team):
    services.do_create_ca("ed25519", actor="cora")
    response = signed_in(team.caretaker).post(
        reverse("admin:caretaker_activate"), {"sentence": "I accept team-ca responsibility"}, follow=True
    )
    assert not activation.is_caretaker() and activation.current() is None
    assert any(ACCEPTANCE_SENTENCE in message for message in shown_messages(response))
    assert caretaker_rows("caretaker.activate")[-1].outcome == "refused: sentence"


def test_deactivating_is_one_post_and_is_audited(active):
    signed_in(active.caretaker).post(reverse("admin:caretaker_deactivate"))
    assert not activation.is_caretaker()
    assert caretaker_rows("caretaker.deactivate")[-1].called_by == "cora"


# --- the CA ------------------------------------------------------------------------------------------------


def test_creating_the_ca_from_the_screen_writes_it_and_shows_its_art(team, settings):
    client = signed_in(team.caretaker)
    client.post(reverse("admin:caretaker_create_ca"), {"key_type": "ed25519"})
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    art = key_art(team_ca.certificate)
    text = page_text(client.get(SCREEN))
    assert art.memorable_id in text and art.randomart in text and team_ca.fingerprint_sha256 in text
    assert caretaker_rows("ca.create")[-1].outcome == "created"


def test_a_second_ca_is_refused_and_the_first_kept(team, settings):
    client = signed_in(team.caretaker)
    client.post(reverse("admin:caretaker_create_ca"), {"key_type": "ed25519"})
    first = (settings.FORGE_CA_DIR / "ca.crt").read_bytes()
    response = client.post(reverse("admin:caretaker_create_ca"), {"key_type": "rsa4096"}, follow=True)
    assert any("never overwritten" in message for message in shown_messages(response))
    assert (settings.FORGE_CA_DIR / "ca.crt").read_bytes() == first


# --- peers, codes, issuance, revocation ------------------------------------------------------------------


def test_adding_a_peer_lists_it_and_audits(team):
    client = signed_in(team.caretaker)
    client.post(reverse("admin:caretaker_add_peer"), {"name": "bob@team", "role": "reviewer", "endpoint": ""})
    assert Peer.objects.get().role == "reviewer"
    assert "bob@team" in page_text(client.get(SCREEN))
    assert caretaker_rows("peer.create")[-1].called_by == "cora"


def test_a_minted_code_is_shown_once_and_stored_as_its_digest(team):
    add_peer()
    client = signed_in(team.caretaker)
    response = client.post(reverse("admin:caretaker_mint_code", args=["alice@team"]))
    raw = re.search(r'id="raw-code">(fenr_[^<]+)<', response.content.decode()).group(1)
    assert "no-store" in response["Cache-Control"]
    code = EnrollmentCode.objects.get()
    assert code.digest == token_digest(raw) and raw not in code.prefix + code.digest
    assert raw not in client.get(SCREEN).content.decode()
    assert caretaker_rows("enrollment.mint")[-1].called_by == "cora"


def test_issuing_from_a_pasted_csr_shows_the_key_then_issues_on_the_typed_memorable_id(active, settings):
    add_peer()
    client = signed_in(active.caretaker)
    csr = csr_for(new_key("rsa3072"))
    art = key_art(csr.encode())
    review = client.post(reverse("admin:caretaker_issue_review", args=["alice@team"]), {"csr": csr})
    text = page_text(review)
    assert review.status_code == 200
    assert art.memorable_id in text and art.randomart in text and "RSA (3072 bits)" in text
    approve = reverse("admin:caretaker_issue_approve", args=["alice@team"])
    form = {"csr": csr, "key_fingerprint": art.fingerprint}

    client.post(approve, {**form, "typed_id": "wrong-words-typed-here"})
    assert Peer.objects.get().state == PeerState.ENROLLING
    assert store.read_published(settings.FORGE_ROSTER_DIR).empty

    response = client.post(approve, {**form, "typed_id": art.memorable_id.upper()}, follow=True)
    peer = Peer.objects.get()
    assert peer.state == PeerState.ACTIVE and peer.key_memorable_id == art.memorable_id
    assert any("Issued a certificate" in message for message in shown_messages(response))
    certificate = x509.load_pem_x509_certificate(peer.certificate_pem.encode())
    assert key_art(certificate).fingerprint == art.fingerprint


def test_an_uploaded_csr_is_reviewed_like_a_pasted_one(active):
    add_peer()
    csr = csr_for(new_key("ec"))
    review = signed_in(active.caretaker).post(
        reverse("admin:caretaker_issue_review", args=["alice@team"]),
        {"csr": "", "csr_file": SimpleUploadedFile("alice.csr", csr.encode())},
    )
    assert key_art(csr.encode()).memorable_id in page_text(review)


def test_an_approval_for_another_key_than_the_reviewed_one_issues_nothing(active):
    add_peer()
    reviewed, swapped = csr_for(new_key()), csr_for(new_key())
    swapped_id = key_art(swapped.encode()).memorable_id
    response = signed_in(active.caretaker).post(
        reverse("admin:caretaker_issue_approve", args=["alice@team"]),
        {"csr": swapped, "key_fingerprint": key_art(reviewed.encode()).fingerprint, "typed_id": swapped_id},
        follow=True,
    )
    assert Peer.objects.get().state == PeerState.ENROLLING
    assert any("not the one the review page showed" in message for message in shown_messages(response))


def test_a_bad_csr_is_refused_on_review_with_its_reason(active):
    add_peer()
    response = signed_in(active.caretaker).post(
        reverse("admin:caretaker_issue_review", args=["alice@team"]), {"csr": csr_for(new_key("rsa2048"))}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("admin:caretaker_issue", args=["alice@team"])
    assert any("3072" in message for message in shown_messages(response))


def test_revoking_needs_the_key_memorable_id_and_then_publishes_the_serial(active, settings):
    peer = issued(active)
    client = signed_in(active.caretaker)
    revoke = reverse("admin:caretaker_revoke", args=["alice@team"])
    client.post(revoke, {"reason": "laptop lost", "typed_id": "not-the-right-words"})
    assert Peer.objects.get().state == PeerState.ACTIVE and not Revocation.objects.exists()
    client.post(revoke, {"reason": "laptop lost", "typed_id": peer.key_memorable_id})
    assert Peer.objects.get().state == PeerState.REVOKED
    assert Revocation.objects.get().serial == peer.serial
    published = store.read_published(settings.FORGE_ROSTER_DIR)
    assert peer.serial in published.revoked_toml.decode()


# --- team requests and the confirmation page ---------------------------------------------------------------


def test_a_team_request_is_listed_and_its_page_shows_the_key_art(active, cast, operator_caretaker):
    confirmation, proposal = team_request(cast)
    client = signed_in(operator_caretaker)
    assert confirmation.memorable_id in page_text(client.get(SCREEN))
    page = page_text(client.get(reverse("admin:confirmations_pendingconfirmation_change", args=[confirmation.pk])))
    assert 'id="key-art"' in page
    assert proposal.preview["randomart"] in page and proposal.preview["key_fingerprint"] in page
    assert f"Type the memorable ID of the key ({proposal.key_memorable_id})" in page


def test_a_team_request_is_approved_on_its_page_only_with_the_key_memorable_id(active, cast):
    confirmation, proposal = team_request(cast)
    client = signed_in(active.caretaker)
    decide = reverse("admin:confirmations_pendingconfirmation_decide", args=[confirmation.pk])
    client.post(decide, {"decision": "approve", "typed_id": confirmation.memorable_id})
    assert PendingConfirmation.objects.get().state == ConfirmationState.PENDING
    client.post(decide, {"decision": "approve", "typed_id": proposal.key_memorable_id})
    assert PendingConfirmation.objects.get().state == ConfirmationState.EXECUTED
    assert Peer.objects.get().state == PeerState.ACTIVE


def test_a_team_request_is_approved_over_the_rest_api_by_the_key_memorable_id(active, cast, operator_caretaker):
    confirmation, proposal = team_request(cast)
    client = signed_in(operator_caretaker)
    url = f"/api/confirmations/{confirmation.pk}/approve"
    wrong = client.post(url, {"typed_id": "wrong-words-typed-here"}, content_type="application/json")
    assert wrong.status_code == 400 and Peer.objects.get().state == PeerState.ENROLLING
    right = client.post(url, {"typed_id": proposal.key_memorable_id}, content_type="application/json")
    assert right.status_code == 200, right.content
    assert right.json()["state"] == ConfirmationState.EXECUTED
    assert Peer.objects.get().state == PeerState.ACTIVE


# --- the roster --------------------------------------------------------------------------------------------


def test_the_roster_section_verifies_the_published_files_and_signs_again(active, settings):
    issued(active)
    client = signed_in(active.caretaker)
    state = client.get(SCREEN).context["roster"]
    assert state["ok"] and state["meta"].sequence_number == 1
    client.post(reverse("admin:caretaker_sign"))
    state = client.get(SCREEN).context["roster"]
    assert state["ok"] and state["meta"].sequence_number == 2


def test_a_tampered_published_roster_shows_the_reason(active, settings):
    issued(active)
    peers_file = (settings.FORGE_ROSTER_DIR / "peers.toml").resolve()
    peers_file.chmod(0o644)
    peers_file.write_bytes(peers_file.read_bytes().replace(b"alice@team", b"mallory@te"))
    state = signed_in(active.caretaker).get(SCREEN).context["roster"]
    assert not state["ok"] and state["problem"]


def test_the_roster_files_download_and_the_crl_is_public(active, settings):
    issued(active)
    published = store.read_published(settings.FORGE_ROSTER_DIR)
    client = signed_in(active.caretaker)
    for name, data in published.files().items():
        response = client.get(reverse("admin:caretaker_roster_file", args=[name]))
        assert response.status_code == 200 and response.content == data
    anonymous = Client().get("/crl.pem")
    assert anonymous.status_code == 200 and anonymous.content == published.crl_pem
    x509.load_pem_x509_crl(anonymous.content)
    assert client.get(reverse("admin:caretaker_roster_file", args=["ca.key"])).status_code == 404


def test_an_uploaded_roster_gets_a_verdict_and_conflicts_can_be_cleared(active, settings):
    issued(active)
    published = store.read_published(settings.FORGE_ROSTER_DIR)
    client = signed_in(active.caretaker)
    response = client.post(
        reverse("admin:caretaker_upload_roster"),
        {
            "peers": SimpleUploadedFile("peers.toml", published.peers_toml),
            "revoked": SimpleUploadedFile("revoked.toml", published.revoked_toml),
        },
        follow=True,
    )
    assert any("accepted" in message.lower() for message in shown_messages(response))
    conflict = RosterConflict.objects.create(
        sequence=1, accepted_digest="a" * 64, candidate_digest="b" * 64, source="x"
    )
    assert "Conflicts" in page_text(client.get(SCREEN))
    client.post(reverse("admin:caretaker_clear_conflict", args=[conflict.pk]))
    conflict.refresh_from_db()
    assert conflict.cleared_by == "cora" and conflict.cleared_at is not None
    assert caretaker_rows("roster.conflict_clear")[-1].called_by == "cora"


def test_a_roster_signed_by_an_untrusted_ca_is_refused_with_its_reason(active, settings):
    key_pem, cert_pem = ca.create_ca("ed25519", common_name="Elsewhere CA")
    folder = active.folder / "elsewhere"
    ca.write_ca(folder, key_pem, cert_pem)
    other = ca.load_ca(folder)
    now = timezone.now().replace(microsecond=0)
    signed = roster.sign_roster(
        [],
        [],
        ca_key=other.key,
        ca_certificate=other.certificate,
        sequence_number=5,
        signed_ts=now,
        expires=now + timedelta(days=1),
    )
    response = signed_in(active.caretaker).post(
        reverse("admin:caretaker_upload_roster"),
        {"peers": SimpleUploadedFile("p", signed.peers_toml), "revoked": SimpleUploadedFile("r", signed.revoked_toml)},
        follow=True,
    )
    assert any(message.startswith("refused") for message in shown_messages(response))
    assert services.accepted() is None or services.accepted().sequence != 5


# --- the trust store ---------------------------------------------------------------------------------------


def test_a_ca_certificate_is_uploaded_to_the_trust_store_and_removed(active):
    _key, cert_pem = ca.create_ca("ed25519", common_name="Partner CA")
    client = signed_in(active.caretaker)
    client.post(reverse("admin:caretaker_trust_add"), {"certificate": SimpleUploadedFile("partner.pem", cert_pem)})
    entry = next(e for e in trust.trusted() if "Partner CA" in e.subject)
    assert key_art(entry.certificate).memorable_id in page_text(client.get(SCREEN))
    client.post(reverse("admin:caretaker_trust_remove"), {"file_name": entry.file_name})
    assert all("Partner CA" not in e.subject for e in trust.trusted())
    assert [row.tool for row in caretaker_rows("trust.remove")] == ["trust.remove"]


# --- the REST API ------------------------------------------------------------------------------------------


def test_the_api_lists_and_adds_peers_and_mints_a_code_once(active, operator_caretaker):
    client = signed_in(operator_caretaker)
    created = client.post(
        "/api/caretaker/peers", {"name": "bob@team", "role": "reviewer"}, content_type="application/json"
    )
    assert created.status_code == 201 and created.json()["state"] == "enrolling"
    listed = client.get("/api/caretaker/peers").json()["peers"]
    assert [peer["name"] for peer in listed] == ["bob@team"]
    minted = client.post("/api/caretaker/peers/bob@team/codes")
    assert minted.status_code == 201
    assert EnrollmentCode.objects.get().digest == token_digest(minted.json()["code"])
    missing = client.post("/api/caretaker/peers/nobody/codes")
    assert missing.status_code == 404 and missing.json()["code"] == "FORGE_ERR_NOT_FOUND"


def test_the_api_refuses_an_operator_without_the_caretaker_permission_and_a_client_token(active, cast):
    refused = signed_in(cast.operator.user).get("/api/caretaker/peers")
    assert refused.status_code == 403 and refused.json()["code"] == "FORGE_ERR_PERMISSION_DENIED"
    by_token = Client().get("/api/caretaker/peers", headers={"Authorization": f"Bearer {cast.caretaker.raw_token}"})
    assert by_token.status_code == 403
    assert not Peer.objects.exists()


def test_the_api_refuses_a_body_with_unknown_fields_or_a_bad_name(active, operator_caretaker):
    client = signed_in(operator_caretaker)
    extra = client.post("/api/caretaker/peers", {"name": "x", "extra": 1}, content_type="application/json")
    assert extra.status_code == 400 and extra.json()["code"] == "FORGE_ERR_BAD_PARAMETER"
    bad_name = client.post("/api/caretaker/peers", {"name": "-no good-"}, content_type="application/json")
    assert bad_name.status_code == 400 and bad_name.json()["code"] == "FORGE_ERR_INVALID_PEER"
    assert not Peer.objects.exists()
