"""Whatever a client sends as a CSR, an enrollment code or a rotation proof, the answer is a refusal that says
what to do (a CaretakerRefusal), never another exception, and nothing is proposed or consumed."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caretaker import services
from caretaker.models import EnrollmentCode, Peer, PeerState
from tests.caretaker.conftest import csr_for, new_key

pytestmark = pytest.mark.django_db

PEM_LIKE = st.builds(
    lambda label, body: f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n",
    st.sampled_from(["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST", "CERTIFICATE", "PUBLIC KEY", "X"]),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n", max_size=400),
)
GARBAGE = st.one_of(st.text(max_size=300), PEM_LIKE, st.binary(max_size=300).map(lambda b: b.decode("latin-1")))


@pytest.fixture
def enrolling(active):
    services.do_create_peer("alice@team", role="author", actor="cora")
    return services.do_mint_code("alice@team", actor="cora").raw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(csr=GARBAGE)
def test_any_csr_text_is_refused_with_a_reason_and_the_code_kept(enrolling, csr):
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_issuance(csr, code=enrolling, requested_by="fuzz")
    assert refused.value.code == "FORGE_ERR_INVALID_CSR" and refused.value.message
    assert EnrollmentCode.objects.get().used_at is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.text(max_size=200))
def test_any_code_text_is_refused(enrolling, code):
    if code.strip() == enrolling:
        return
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_issuance(csr_for(new_key()), code=code, requested_by="fuzz")
    assert refused.value.code == "FORGE_ERR_ENROLLMENT_CODE"
    assert Peer.objects.get().state == PeerState.ENROLLING


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(proof=st.one_of(st.text(max_size=200), st.binary(max_size=120).map(lambda b: base64.b64encode(b).decode())))
def test_any_rotation_proof_but_the_right_one_is_refused(active, proof):
    if not Peer.objects.filter(name="alice@team").exists():
        services.do_create_peer("alice@team", role="author", actor="cora")
        code = services.do_mint_code("alice@team", actor="cora").raw
        proposal = services.propose_issuance(csr_for(new_key()), code=code, requested_by="alice")
        assert services.carry_out_now(proposal, user=active.caretaker, typed_id=proposal.key_memorable_id).verified
    with pytest.raises(services.CaretakerRefusal) as refused:
        services.propose_rotation("alice@team", csr_for(new_key()), proof, requested_by="fuzz")
    assert refused.value.code == "FORGE_ERR_ROTATION_PROOF"
