"""Issuance end to end in-process: a peer, a one-time code, a CSR, the caretaker's approval, the executor
writing the signed roster and CRL; then revocation and rotation. Checked with openssl where it matters."""

from __future__ import annotations

import base64
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from caretaker import ca, roster, services, store, trust
from caretaker.models import EnrollmentCode, Peer, PeerState, Revocation
from tests.caretaker.conftest import csr_for, new_key

pytestmark = pytest.mark.django_db


def issue(active, name: str = "alice@team", key=None):
    services.do_create_peer(name, role="author", endpoint="https://alice-ws.factory:7531", actor="cora")
    code = services.do_mint_code(name, actor="cora").raw
    key = key or new_key()
    proposal = services.propose_issuance(csr_for(key, common_name="root"), code=code, requested_by="alice-client")
    outcome = services.carry_out_now(proposal, user=active.caretaker, typed_id=proposal.key_memorable_id)
    assert outcome.verified, outcome
    return key, proposal, outcome


def published(settings) -> store.Published:
    return store.read_published(settings.FORGE_ROSTER_DIR)


def test_an_approved_request_issues_a_certificate_that_openssl_verifies_and_signs_the_roster(
    active, settings, tmp_path
):
    _key, proposal, outcome = issue(active)
    certificate = x509.load_pem_x509_certificate(outcome.settled["certificate"].encode())
    assert certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "alice@team"
    assert outcome.settled["memorable_id"] == proposal.key_memorable_id
    (tmp_path / "leaf.pem").write_text(outcome.settled["certificate"])
    done = subprocess.run(
        ["openssl", "verify", "-CAfile", str(settings.FORGE_CA_DIR / "ca.crt"), str(tmp_path / "leaf.pem")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    files = published(settings)
    checked = roster.verify_roster(
        files.peers_toml, files.revoked_toml, trusted=trust.trusted_certificates(), now=certificate.not_valid_before_utc
    )
    assert checked.meta.sequence_number == 1
    assert [(p.name, p.fingerprint_sha256) for p in checked.peers] == [("alice@team", ca.cert_fingerprint(certificate))]
    peer = Peer.objects.get(name="alice@team")
    assert peer.state == PeerState.ACTIVE and peer.serial == proposal.intent["serial"]


def test_a_code_works_once(active):
    issue(active)
    code = EnrollmentCode.objects.get()
    assert code.used_at is not None
    services.do_create_peer("bob@team", role="author", actor="cora")
    raw = services.do_mint_code("bob@team", actor="cora").raw
    services.propose_issuance(csr_for(new_key()), code=raw, requested_by="bob")
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_issuance(csr_for(new_key()), code=raw, requested_by="bob")
    assert "used already" in refused.value.message


def test_revocation_puts_the_serial_in_revoked_toml_and_a_crl_openssl_verifies(active, settings, tmp_path):
    issue(active)
    peer = Peer.objects.get(name="alice@team")
    proposal = services.propose_revocation("alice@team", "laptop lost", requested_by="cora")
    outcome = services.carry_out_now(proposal, user=active.caretaker, typed_id=peer.key_memorable_id)
    assert outcome.verified
    files = published(settings)
    (tmp_path / "crl.pem").write_bytes(files.crl_pem)
    done = subprocess.run(
        [
            "openssl",
            "crl",
            "-in",
            str(tmp_path / "crl.pem"),
            "-CAfile",
            str(settings.FORGE_CA_DIR / "ca.crt"),
            "-noout",
            "-verify",
            "-text",
        ],
        capture_output=True,
        text=True,
    )
    assert "verify OK" in done.stdout + done.stderr
    assert peer.serial.upper() in done.stdout.replace(":", "").upper()
    assert Revocation.objects.get().serial == peer.serial
    assert Peer.objects.get(name="alice@team").state == PeerState.REVOKED
    checked = roster.verify_file(
        files.revoked_toml,
        trusted=trust.trusted_certificates(),
        now=x509.load_pem_x509_crl(files.crl_pem).last_update_utc,
    )
    assert checked is not None


def test_rotation_issues_the_new_certificate_and_revokes_the_old(active):
    old_key, _, first = issue(active)
    new = new_key("ec")
    csr = csr_for(new)
    info = ca.inspect_csr(csr)
    proof = base64.b64encode(old_key.sign(services.rotation_challenge(info))).decode()
    proposal = services.propose_rotation("alice@team", csr, proof, requested_by="alice")
    outcome = services.carry_out_now(proposal, user=active.caretaker, typed_id=proposal.key_memorable_id)
    assert outcome.verified
    assert outcome.settled["revoked_serial"] == first.settled["serial"]
    assert Peer.objects.get().serial == proposal.intent["serial"] != first.settled["serial"]


def test_rotation_without_the_current_key_is_refused(active):
    issue(active)
    csr = csr_for(new_key())
    stranger = new_key()
    proof = base64.b64encode(stranger.sign(services.rotation_challenge(ca.inspect_csr(csr)))).decode()
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_rotation("alice@team", csr, proof, requested_by="mallory")
    assert refused.value.code == "FORGE_ERR_ROTATION_PROOF"


def test_a_wrong_typed_id_issues_nothing(active, settings):
    services.do_create_peer("alice@team", role="author", actor="cora")
    code = services.do_mint_code("alice@team", actor="cora").raw
    proposal = services.propose_issuance(csr_for(new_key()), code=code, requested_by="alice")
    with pytest.raises(services.CaretakerRefusal):
        services.carry_out_now(proposal, user=active.caretaker, typed_id="abandon-abandon-abandon-abandon")
    assert published(settings).empty
    assert Peer.objects.get().state == PeerState.ENROLLING


def test_certificates_issued_are_in_pem_of_the_public_bytes(active):
    _, _, outcome = issue(active)
    certificate = x509.load_pem_x509_certificate(outcome.settled["certificate"].encode())
    assert certificate.public_bytes(Encoding.PEM).decode() == outcome.settled["certificate"]


def test_an_issuance_concluded_applied_after_a_crash_records_the_certificate(active, settings):
    from confirmations import executor
    from confirmations.models import ContractState

    services.do_create_peer("alice@team", role="author", actor="cora")
    code = services.do_mint_code("alice@team", actor="cora").raw
    key = new_key()
    proposal = services.propose_issuance(csr_for(key), code=code, requested_by="alice")
    contract = executor.prepare(
        capability_name="team.roster",
        method=proposal.method,
        target=proposal.target,
        intent=proposal.intent,
        idempotency_key="crash-then-applied",
        approval={"authority": "test"},
        actor="cora",
        expected_fingerprint=proposal.base_fingerprint,
        expected_result=proposal.result_digest,
    )

    def crash(step: str) -> None:
        if step == "before_verified":
            raise RuntimeError("the process died here")

    contract = executor.execute(contract, actor="cora", step=crash)
    assert contract.state == ContractState.RECONCILIATION
    assert Peer.objects.get().state == PeerState.ENROLLING  # the roster is written, the tables not yet

    executor.resolve(contract, "applied", actor="cora")

    peer = Peer.objects.get()
    assert peer.state == PeerState.ACTIVE and peer.serial == proposal.intent["serial"]
    files = published(settings)
    assert (
        roster.verify_roster(
            files.peers_toml,
            files.revoked_toml,
            trusted=trust.trusted_certificates(),
            now=roster.datetime.now(roster.UTC),
        )
        .peers[0]
        .name
        == "alice@team"
    )


def test_the_roster_is_signed_again_once_a_third_of_its_validity_is_left(active, settings):
    from datetime import timedelta

    from django.utils import timezone

    issue(active)
    assert services.refresh_roster_if_due() is None  # freshly signed: nothing due
    settings.FORGE_ROSTER_VALIDITY_DAYS = 30
    later = timezone.now() + timedelta(days=21)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "_now", lambda: later.replace(microsecond=0))
        outcome = services.refresh_roster_if_due()
    assert outcome is not None and outcome.verified
    assert services.accepted().sequence == 2


def test_the_roster_is_not_signed_again_while_the_caretaker_is_off(active, settings):
    from datetime import timedelta

    from django.utils import timezone

    from caretaker import activation

    issue(active)
    activation.do_deactivate(active.caretaker)
    later = timezone.now() + timedelta(days=29)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "_now", lambda: later.replace(microsecond=0))
        assert services.refresh_roster_if_due() is None
    assert services.accepted().sequence == 1


def test_no_code_is_minted_for_a_peer_that_has_a_certificate(active):
    issue(active)
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.do_mint_code("alice@team", actor="cora")
    assert "team.rotate_cert" in refused.value.message
    assert EnrollmentCode.objects.count() == 1


def test_an_expired_code_is_refused_and_nothing_is_proposed(active):
    from datetime import timedelta

    from django.utils import timezone

    services.do_create_peer("alice@team", role="author", actor="cora")
    minted = services.do_mint_code("alice@team", actor="cora")
    EnrollmentCode.objects.filter(pk=minted.code.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_issuance(csr_for(new_key()), code=minted.raw, requested_by="alice")

    assert refused.value.code == "FORGE_ERR_ENROLLMENT_CODE" and "expired" in refused.value.message
    assert EnrollmentCode.objects.get().used_at is None
    assert Peer.objects.get().state == PeerState.ENROLLING


def test_an_unknown_code_is_refused(active):
    services.do_create_peer("alice@team", role="author", actor="cora")
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_issuance(csr_for(new_key()), code="fenr_not-a-code", requested_by="mallory")
    assert "unknown" in refused.value.message
