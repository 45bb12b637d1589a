"""The caretaker's manage.py commands: caretaker_init_ca creates the CA once, roster_sign signs the next
sequence through the executor, roster_verify checks roster files as a member would (without the database),
and roster_accept considers a roster signed elsewhere. Each refusal exits 1 with its reason."""

from __future__ import annotations

import io
import re
import stat
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from caretaker import ca, roster, services, store, trust
from caretaker.models import AcceptedRoster
from caretaker.randomart import key_art
from tests.caretaker.rosters import (
    NOW,
    Elsewhere,
    tampered_meta,
    tampered_peer,
    without_signature,
    write_pair,
)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as failed:
        run(*args)
    return failed.value


# caretaker_init_ca


@pytest.mark.django_db
def test_init_ca_creates_a_0600_key_and_prints_the_fingerprint_memorable_id_and_randomart(team, settings):
    out = run("caretaker_init_ca", "--common-name", "Cora's Team CA")

    key_path, cert_path = settings.FORGE_CA_DIR / "ca.key", settings.FORGE_CA_DIR / "ca.crt"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    assert team_ca.common_name == "Cora's Team CA" and team_ca.key_type == "ed25519"
    art = key_art(team_ca.certificate)
    assert team_ca.fingerprint_sha256 in out
    assert f"Memorable ID: {art.memorable_id}" in out
    assert art.randomart in out and art.randomart.startswith("+--[ED25519 256]--+")
    assert [entry.fingerprint_sha256 for entry in trust.trusted()] == [team_ca.fingerprint_sha256]
    assert AuditEvent.objects.filter(tool="ca.create", outcome="created", called_by__startswith="manage.py:").exists()
    assert cert_path.exists()


@pytest.mark.django_db
def test_init_ca_a_second_time_is_refused_with_exit_1_and_the_ca_unchanged(team, settings):
    run("caretaker_init_ca")
    before = {name: (settings.FORGE_CA_DIR / name).read_bytes() for name in ("ca.key", "ca.crt")}

    error = refused("caretaker_init_ca", "--key-type", "ed25519")

    assert error.returncode == 1
    assert "already exists" in str(error) and "never overwritten" in str(error)
    assert {name: (settings.FORGE_CA_DIR / name).read_bytes() for name in before} == before


@pytest.mark.django_db
def test_init_ca_with_a_common_name_too_long_is_refused_and_creates_nothing(team, settings):
    error = refused("caretaker_init_ca", "--common-name", "x" * 65)

    assert error.returncode == 1 and "1 to 64 characters" in str(error)
    assert not (settings.FORGE_CA_DIR / "ca.key").exists()


# roster_sign


@pytest.mark.django_db
def test_roster_sign_signs_the_next_sequence_each_time_through_the_executor(active, settings):
    assert "Signed roster sequence 1 " in run("roster_sign")
    assert "Signed roster sequence 2 " in run("roster_sign")

    published = store.read_published(settings.FORGE_ROSTER_DIR)
    checked = roster.verify_roster(
        published.peers_toml, published.revoked_toml, trusted=trust.trusted_certificates(), now=datetime.now(UTC)
    )
    assert checked.meta.sequence_number == 2
    accepted = services.accepted()
    assert accepted is not None and accepted.sequence == 2 and accepted.digest == checked.digest
    actors = set(AuditEvent.objects.filter(tool="roster.accepted").values_list("called_by", flat=True))
    assert len(actors) == 1 and re.fullmatch(r"manage\.py:\S.*", actors.pop())


@pytest.mark.django_db
def test_roster_sign_without_an_active_caretaker_exits_1_saying_what_is_missing(team, settings):
    run("caretaker_init_ca")  # the CA is there; the runtime flag and the acceptance are not

    error = refused("roster_sign")

    assert error.returncode == 1
    assert "needs an active team caretaker" in str(error)
    assert "Switch the caretaker on" in str(error)
    assert store.read_published(settings.FORGE_ROSTER_DIR).empty
    assert not AcceptedRoster.objects.exists()


# roster_verify: files only, no database (a member runs it on a laptop)


@pytest.fixture
def verifying(settings, tmp_path) -> Elsewhere:
    """A team CA whose certificate is the only one in the trust store (written as a file, no database)."""
    team_ca = Elsewhere.create("Forge Team CA")
    settings.FORGE_TRUST_DIR = tmp_path / "trust"
    settings.FORGE_TRUST_DIR.mkdir()
    (settings.FORGE_TRUST_DIR / "team.pem").write_bytes(team_ca.pem)
    return team_ca


def test_roster_verify_accepts_a_pair_in_either_order_and_says_what_it_holds(verifying, tmp_path):
    peers, revoked = write_pair(tmp_path / "r", verifying.sign(7, peers=("alice@team", "bob@team")))
    expires = (NOW + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fingerprint = roster.certificate_fingerprint(verifying.certificate)

    for order in ((peers, revoked), (revoked, peers)):
        out = run("roster_verify", *map(str, order))
        assert out.startswith(f"OK sequence 7, signed by Forge Team CA (CA {fingerprint}), expires {expires}")
        assert "2 peers, 0 revoked" in out


def test_roster_verify_accepts_one_file_on_its_own(verifying, tmp_path):
    peers, revoked = write_pair(tmp_path / "r", verifying.sign(3))

    assert run("roster_verify", str(peers)).startswith("OK sequence 3, signed by Forge Team CA")
    assert "0 revoked" in run("roster_verify", str(revoked))


@pytest.mark.parametrize(
    ("attack", "reason"),
    [
        (lambda team, other: tampered_peer(team.sign(4)), "bad_signature"),
        (lambda team, other: tampered_meta(team.sign(4)), "bad_signature"),
        (lambda team, other: other.sign(4), "untrusted_ca"),
        (lambda team, other: team.sign(4, signed=NOW - timedelta(days=10), days=2), "expired"),
        (lambda team, other: without_signature(team.sign(4)), "missing_signature"),
        (
            lambda team, other: roster.Roster(
                team.sign(5).meta, (), (), team.sign(5).peers_toml, team.sign(4).revoked_toml
            ),
            "mixed",
        ),
    ],
    ids=["tampered-peer", "tampered-meta", "other-ca", "expired", "no-signature", "mixed-pair"],
)
def test_roster_verify_exits_1_with_the_reason_for_each_bad_roster(verifying, tmp_path, attack, reason):
    peers, revoked = write_pair(tmp_path / "r", attack(verifying, Elsewhere.create("Forge Team CA")))

    error = refused("roster_verify", str(peers), str(revoked))

    assert error.returncode == 1
    assert str(error).startswith(f"REFUSED ({reason}): ")


def test_roster_verify_refuses_a_malformed_file(verifying, tmp_path):
    junk = tmp_path / "peers.toml"
    junk.write_text("[meta\nsequence_number = 1\n")

    error = refused("roster_verify", str(junk))

    assert error.returncode == 1 and str(error).startswith("REFUSED (malformed): ")


def test_roster_verify_with_trust_checks_against_the_given_ca_files_only(verifying, tmp_path):
    other = Elsewhere.create("Other Team CA")
    (tmp_path / "other.pem").write_bytes(other.pem)
    (tmp_path / "team.pem").write_bytes(verifying.pem)
    from_other = write_pair(tmp_path / "other", other.sign(9))
    from_team = write_pair(tmp_path / "team", verifying.sign(9))

    out = run("roster_verify", *map(str, from_other), "--trust", str(tmp_path / "other.pem"))
    assert out.startswith("OK sequence 9, signed by Other Team CA")
    # --trust replaces the trust store: the store's own CA no longer counts.
    error = refused("roster_verify", *map(str, from_team), "--trust", str(tmp_path / "other.pem"))
    assert error.returncode == 1 and str(error).startswith("REFUSED (untrusted_ca): ")
    both = ("--trust", str(tmp_path / "other.pem"), "--trust", str(tmp_path / "team.pem"))
    assert run("roster_verify", *map(str, from_team), *both).startswith("OK sequence 9, signed by Forge Team CA")


def test_roster_verify_with_an_unreadable_or_non_pem_trust_file_exits_2(verifying, tmp_path):
    peers, _ = write_pair(tmp_path / "r", verifying.sign(1))
    (tmp_path / "not.pem").write_text("hello")

    missing = refused("roster_verify", str(peers), "--trust", str(tmp_path / "absent.pem"))
    not_pem = refused("roster_verify", str(peers), "--trust", str(tmp_path / "not.pem"))
    absent_file = refused("roster_verify", str(tmp_path / "absent.toml"))

    assert (missing.returncode, not_pem.returncode, absent_file.returncode) == (2, 2, 2)
    assert "cannot read it" in str(missing) and "not a PEM certificate" in str(not_pem)


def test_roster_verify_with_an_empty_trust_store_says_how_to_trust_a_ca(settings, tmp_path):
    settings.FORGE_TRUST_DIR = tmp_path / "empty"
    peers, revoked = write_pair(tmp_path / "r", Elsewhere.create().sign(1))

    error = refused("roster_verify", str(peers), str(revoked))

    assert error.returncode == 1 and "--trust ca.crt" in str(error)


# roster_accept


@pytest.fixture
def other_ca(team) -> Elsewhere:
    """Another caretaker's CA, trusted here."""
    other = Elsewhere.create()
    trust.install(other.pem, actor="cora", why="the other site's CA")
    return other


@pytest.mark.django_db
def test_roster_accept_takes_a_newer_roster_then_says_same_then_refuses_an_older_one(other_ca, settings, tmp_path):
    newer = other_ca.sign(5)
    files = write_pair(tmp_path / "five", newer)

    assert run("roster_accept", *map(str, files)).startswith("accepted: Roster 5 accepted.")
    assert run("roster_accept", *map(str, files)).startswith("same: ")
    error = refused("roster_accept", *map(str, write_pair(tmp_path / "three", other_ca.sign(3))))

    assert error.returncode == 1 and "refused" in str(error)
    accepted = services.accepted()
    assert accepted is not None and (accepted.sequence, accepted.digest) == (5, newer.digest)
    assert store.read_published(settings.FORGE_ROSTER_DIR).peers_toml == newer.peers_toml


@pytest.mark.django_db
def test_roster_accept_incoming_considers_the_pairs_waiting_there(other_ca, settings):
    incoming = settings.FORGE_ROSTER_DIR / store.INCOMING
    write_pair(incoming, other_ca.sign(2), stem="site-b.")

    out = run("roster_accept", "--incoming")

    assert out.startswith("accepted: Roster 2 accepted.")
    assert sorted(path.name.split("-", 1)[1] for path in (incoming / "done").iterdir()) == [
        "site-b.peers.toml",
        "site-b.revoked.toml",
        "site-b.verdict.txt",
    ]
    assert "No complete pair" in run("roster_accept", "--incoming")


@pytest.mark.django_db
def test_roster_accept_of_an_untrusted_roster_exits_1_and_accepts_nothing(team, tmp_path):
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("roster_accept", *map(str, write_pair(tmp_path, Elsewhere.create().sign(1))), stdout=out)

    assert failed.value.returncode == 1
    assert out.getvalue().startswith("refused: ")
    assert services.accepted() is None


def test_roster_accept_needs_either_incoming_or_two_files(tmp_path):
    assert refused("roster_accept").returncode == 2
    assert refused("roster_accept", "--incoming", str(tmp_path / "a")).returncode == 2
    assert refused("roster_accept", str(tmp_path / "a")).returncode == 2
