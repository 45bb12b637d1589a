"""Team certificates as credentials (access.peers): every check a presented certificate must pass, each refusal
with its reason, and the client token a verified peer acts through. Real keys, a real team CA, rosters signed
and published by the caretaker's own functions."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.contrib.auth.models import User

from access import peers
from access.models import ClientToken
from access.services import authenticate_certificate, authenticate_token
from audit.models import AuditEvent, EventKind
from caretaker import ca, store, trust
from caretaker.models import AcceptedRoster
from tests.caretaker.conftest import csr_for, new_key
from tests.team_tls import Member, issue_here, revoke_here

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(active, tmp_path) -> Member:
    return issue_here(active.caretaker, tmp_path / "client", "alice@team")


def chain(member_or_pem: Member | bytes | str) -> list[str]:
    if isinstance(member_or_pem, Member):
        return [member_or_pem.cert_pem]
    return [member_or_pem.decode() if isinstance(member_or_pem, bytes) else member_or_pem]


def certificate_from_team_ca(*, not_before: datetime, days: int = 30, name: str = "mallory@team") -> bytes:
    """A certificate the trusted team CA signed directly, outside the caretaker's roster."""
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    return ca.issue_certificate(
        team_ca,
        ca.inspect_csr(csr_for(new_key("p256"), common_name=name).encode()),
        common_name=name,
        serial=ca.random_serial(),
        not_before=not_before,
        days=days,
    )


def refusal(chain_pem: list[str], **options) -> peers.CertificateRefused:
    with pytest.raises(peers.CertificateRefused) as refused:
        peers.verify(chain_pem, **options)
    return refused.value


# --- what passes ----------------------------------------------------------------------------------------


def test_a_peer_of_the_accepted_roster_is_certified_with_its_name_and_role(alice):
    peer = peers.verify(chain(alice))

    assert (peer.name, peer.role, peer.principal) == ("alice@team", "author", "peer:alice@team")
    assert peer.fingerprint_sha256 == alice.fingerprint_sha256


def test_a_peer_acts_through_a_client_token_of_its_own_owned_by_its_principal(alice):
    token = authenticate_certificate(chain(alice), "/mcp")

    assert token.owner.get_username() == "peer:alice@team"
    assert not token.owner.has_usable_password()
    assert list(token.owner.groups.values_list("name", flat=True)) == ["team:author"]
    assert token.digest == peers.certificate_digest(alice.fingerprint_sha256)
    assert authenticate_certificate(chain(alice), "/mcp").pk == token.pk  # made once


def test_no_bearer_value_finds_a_certificate_token(alice):
    token = authenticate_certificate(chain(alice), "/mcp")

    # A bearer value is looked up by the SHA-256 hex of what is presented, which never starts with "x509:".
    assert authenticate_token(token.digest) is None
    assert authenticate_token(f"fmcp_{token.digest}") is None
    assert not hashlib.sha256(token.digest.encode()).hexdigest().startswith(peers.DIGEST_PREFIX)


def test_the_role_group_follows_the_roster(alice):
    token = authenticate_certificate(chain(alice), "/mcp")
    observer = peers.CertifiedPeer("alice@team", "observer", alice.fingerprint_sha256, alice.serial, datetime.now(UTC))

    peers.token_for(observer)

    assert list(token.owner.groups.values_list("name", flat=True)) == ["team:observer"]
    assert peers.is_read_only(ClientToken.objects.get(pk=token.pk))


def test_a_bearer_token_is_never_read_only(cast):
    assert not peers.is_read_only(cast.operator.token)


# --- each refusal, with its reason ---------------------------------------------------------------------


def test_a_certificate_from_a_ca_not_in_the_trust_store_is_refused_as_unknown_ca(alice, tmp_path):
    other_key, other_cert = ca.create_ca("ed25519", common_name="Other Team CA")
    other = ca._team_ca_from_pem(other_key, other_cert, where="a test")
    foreign = ca.issue_certificate(
        other,
        ca.inspect_csr(csr_for(new_key("p256"), common_name="alice@team").encode()),
        common_name="alice@team",
        serial=ca.random_serial(),
        not_before=datetime.now(UTC) - timedelta(minutes=1),
        days=30,
    )

    assert refusal(chain(foreign)).reason == "unknown_ca"


def test_a_certificate_whose_ca_was_taken_out_of_the_trust_store_is_refused(alice, active):
    [own] = trust.trusted()
    trust.remove(own.file_name, actor="cora")

    assert refusal(chain(alice)).reason == "unknown_ca"


def test_a_certificate_of_the_trusted_ca_that_no_roster_lists_is_refused_as_unknown_peer(alice):
    stray = certificate_from_team_ca(not_before=datetime.now(UTC) - timedelta(minutes=1))

    assert refusal(chain(stray)).reason == "unknown_peer"


def test_an_expired_certificate_is_refused_as_expired(alice):
    old = certificate_from_team_ca(not_before=datetime.now(UTC) - timedelta(days=10), days=1)

    refused = refusal(chain(old))
    assert refused.reason == "expired"
    assert "rotate" in str(refused)


def test_a_certificate_not_yet_valid_is_refused(alice):
    assert refusal(chain(alice), now=datetime.now(UTC) - timedelta(days=1)).reason == "not_yet_valid"


def test_a_certificate_revoked_in_the_roster_is_refused_as_revoked(alice, active):
    revoke_here(active.caretaker, "alice@team")

    refused = refusal(chain(alice))
    assert refused.reason == "revoked"
    assert "key lost" in str(refused)


def test_a_certificate_listed_only_in_the_crl_is_refused_as_revoked_crl(alice):
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    current = store.read_published(settings.FORGE_ROSTER_DIR)
    now = datetime.now(UTC)
    crl = ca.sign_crl(
        team_ca,
        [(int(alice.serial, 16), now)],
        this_update=now,
        next_update=now + timedelta(days=7),
        crl_number=99,
    )
    store.publish(settings.FORGE_ROSTER_DIR, store.Published(current.peers_toml, current.revoked_toml, crl), sequence=1)

    assert refusal(chain(alice)).reason == "revoked_crl"


def test_a_crl_no_trusted_ca_signed_refuses_every_certificate(alice):
    other_key, other_cert = ca.create_ca("ed25519", common_name="Forge Team CA")
    other = ca._team_ca_from_pem(other_key, other_cert, where="a test")
    current = store.read_published(settings.FORGE_ROSTER_DIR)
    now = datetime.now(UTC)
    forged = ca.sign_crl(other, [], this_update=now, next_update=now + timedelta(days=7), crl_number=1)
    store.publish(
        settings.FORGE_ROSTER_DIR, store.Published(current.peers_toml, current.revoked_toml, forged), sequence=1
    )

    assert refusal(chain(alice)).reason == "crl_unverified"


def test_without_an_accepted_roster_no_certificate_is_matched(active):
    stray = certificate_from_team_ca(not_before=datetime.now(UTC) - timedelta(minutes=1))

    assert refusal(chain(stray)).reason == "no_roster"


def test_roster_files_put_back_behind_the_accepted_one_are_not_trusted(alice, active):
    before = (settings.FORGE_ROSTER_DIR / store.CURRENT).readlink()
    revoke_here(active.caretaker, "alice@team")
    link = settings.FORGE_ROSTER_DIR / store.CURRENT
    link.unlink()
    link.symlink_to(before)  # the revocation rolled back on disk

    assert refusal(chain(alice)).reason == "roster_replayed"


def test_an_accepted_roster_record_edited_outside_forge_refuses_every_certificate(alice):
    AcceptedRoster.objects.filter(pk=1).update(sequence=0)

    assert refusal(chain(alice)).reason == "roster_record_tampered"


def test_an_expired_roster_refuses_every_certificate(alice):
    later = datetime.now(UTC) + timedelta(days=settings.FORGE_ROSTER_VALIDITY_DAYS + 1)

    # The certificate itself is still valid then (90 days); the roster is not.
    assert refusal(chain(alice), now=later).reason == "roster_expired"


def test_an_unreadable_chain_is_refused(active):
    assert refusal(["-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n"]).reason == "unreadable"
    assert refusal([]).reason == "unreadable"
    assert refusal(["x"] * (peers.MAX_CHAIN + 1)).reason == "unreadable"


def test_a_ca_certificate_presented_as_a_client_certificate_is_refused(alice):
    own = trust.trusted_certificates()[0]
    pem = own.public_bytes(serialization.Encoding.PEM)

    assert refusal(chain(pem)).reason == "not_client_certificate"


def test_a_refused_certificate_is_audited_as_an_attempt_with_its_reason(alice, active):
    revoke_here(active.caretaker, "alice@team")

    with pytest.raises(peers.CertificateRefused):
        authenticate_certificate(chain(alice), "/mcp")

    row = AuditEvent.objects.filter(kind=EventKind.AUTH_REFUSED).latest("seq")
    assert row.outcome == "bad_certificate: revoked"
    assert row.arguments["fingerprint_sha256"] == alice.fingerprint_sha256
    assert row.arguments["path"] == "/mcp"


def test_an_operator_revoking_the_certificate_token_refuses_the_certificate(alice):
    from access.services import do_revoke_token

    token = authenticate_certificate(chain(alice), "/mcp")
    do_revoke_token(token, acting_user="op")

    with pytest.raises(peers.CertificateRefused) as refused:
        authenticate_certificate(chain(alice), "/mcp")
    assert refused.value.reason == "access_revoked"


def test_a_disabled_peer_user_is_refused(alice):
    authenticate_certificate(chain(alice), "/mcp")
    User.objects.filter(username="peer:alice@team").update(is_active=False)

    with pytest.raises(peers.CertificateRefused) as refused:
        authenticate_certificate(chain(alice), "/mcp")
    assert refused.value.reason == "access_revoked"
