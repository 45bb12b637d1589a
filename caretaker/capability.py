"""The executor's adapter for the team roster (capability `team.roster`, target kind `team_roster`).

Every change to who the team trusts (a certificate issued, revoked or rotated, the roster signed again, a
roster signed by another caretaker accepted) is carried out by the one executor under a recovery contract,
through this class. The target is the published roster (`caretaker.store`: peers.toml, revoked.toml and the
CRL, replaced together); `forward` computes the next roster as a pure function of the current one and the
intent. An intent holds everything that would otherwise vary (the certificate's serial and validity, the
roster's `signed_ts` and `expires`), and Ed25519 and RSA PKCS#1 v1.5 signatures are deterministic, so the
certificate the caretaker approved is exactly the one written. `settle` records the outcome in the caretaker's
tables inside the executor's transaction: the peer's certificate, the revocation, the accepted roster.

A roster is never rolled back (`reversible = False`): un-revoking a certificate by restoring an older file
would hand trust back silently and older sequence numbers are refused as replays everywhere else. A change is
undone by a new roster (issue again, revoke).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from audit.models import EventKind
from audit.services import record
from caretaker import activation, ca, roster, sealing, store, trust
from caretaker.models import AcceptedRoster, Peer, PeerState, Revocation
from caretaker.randomart import key_art
from forge_core.capabilities import IntentRefused, Observation, Step, TargetMissing
from forge_core.live import notify_trust_changed

ISSUE = "issue_certificate"
REVOKE = "revoke_certificate"
ROTATE = "rotate_certificate"
SIGN = "sign_roster"
ACCEPT = "accept_roster"
METHODS = (ISSUE, REVOKE, ROTATE, SIGN, ACCEPT)
TARGET = {"roster": "team"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


class RosterCapability:
    name = "team.roster"
    target_kind = "team_roster"
    reversible = False
    decide_permission = activation.CARETAKER_PERMISSION

    def identity(self, target: Mapping[str, Any]) -> dict[str, Any]:
        if dict(target) != TARGET:
            raise TargetMissing("the only roster target is the team's roster")
        return {"roster": "team", "folder": str(settings.FORGE_ROSTER_DIR)}

    def read(self, identity: Mapping[str, Any]) -> Observation:
        if identity.get("folder") != str(settings.FORGE_ROSTER_DIR):
            raise TargetMissing("the roster folder changed since this was prepared (FORGE_ROSTER_DIR)")
        try:
            bundle = store.read_published(settings.FORGE_ROSTER_DIR).bundle()
        except store.StoreUnreadable as exc:
            raise TargetMissing(str(exc)) from None
        return Observation(content=bundle, fingerprint=store.fingerprint(bundle))

    def fingerprint(self, content: bytes) -> str:
        return store.fingerprint(content)

    def forward(self, identity: Mapping[str, Any], method: str, current: bytes, intent: Mapping[str, Any]) -> bytes:
        if method not in METHODS:
            raise IntentRefused(f"the roster has no method {method!r}")
        # Accepting a roster another caretaker signed is what every server does; signing one takes a caretaker.
        if method != ACCEPT and not activation.is_caretaker():
            raise IntentRefused("this server is no longer an active caretaker: " + " ".join(activation.missing()))
        try:
            return next_roster(current, method, intent).bundle()
        except (ca.CaUnavailable, ca.CsrRefused, roster.RosterRefused, store.StoreUnreadable) as exc:
            raise IntentRefused(f"the roster cannot be changed: {exc}") from None
        except (KeyError, ValueError, TypeError) as exc:
            raise IntentRefused(f"the change no longer applies ({type(exc).__name__}: {exc})") from None

    def write(self, identity: Mapping[str, Any], content: bytes, step: Step) -> None:
        published = store.Published.from_bundle(content)
        store.publish(settings.FORGE_ROSTER_DIR, published, sequence=_sequence_of(published), step=step)

    def settle(
        self,
        identity: Mapping[str, Any],
        fingerprint: str,
        *,
        actor: str,
        label: str,
        method: str,
        intent: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        if intent is None:
            raise IntentRefused("a roster is never rolled back; sign a new one instead")
        published = store.read_published(settings.FORGE_ROSTER_DIR)
        accepted = remember_accepted(published, source=intent.get("source") or f"signed here ({method})", actor=actor)
        result: dict[str, Any] = {"roster_sequence": accepted.sequence}
        notify_trust_changed()  # a peer's open stream checks its certificate against the new roster at once
        if method in (REVOKE, ROTATE):
            result.update(_settle_revocation(intent, actor=actor))
        if method in (ISSUE, ROTATE):
            result.update(_settle_issuance(intent, actor=actor))
        return result


# --- computing the next roster (pure, given the CA and the trust store) ----------------------------------


def _sequence_of(published: store.Published) -> int:
    if published.empty:
        return 0
    return roster.verify_roster(
        published.peers_toml, published.revoked_toml, trusted=trust.roster_signers(), now=EPOCH
    ).meta.sequence_number


def base_roster(published: store.Published) -> roster.Roster | None:
    """The roster a change builds on: the published one, checked against the trust store (whatever its age:
    it is about to be signed again), or None before the first."""
    if published.empty:
        return None
    return roster.verify_roster(published.peers_toml, published.revoked_toml, trusted=trust.roster_signers(), now=EPOCH)


def issued_certificate(team_ca: ca.TeamCa, intent: Mapping[str, Any]) -> bytes:
    """The certificate an issuance intent describes: the same bytes every time (deterministic signatures)."""
    peer = intent["peer"]
    return ca.issue_certificate(
        team_ca,
        ca.inspect_csr(intent["csr_pem"].encode()),
        common_name=peer["name"],
        serial=int(intent["serial"], 16),
        not_before=_at(intent["not_before"]),
        days=int(intent["days"]),
        dns_names=tuple(intent.get("dns_names", ())),
        uris=tuple(intent.get("uris", ())),
    )


def next_roster(current: bytes, method: str, intent: Mapping[str, Any]) -> store.Published:
    published = store.Published.from_bundle(current)
    if method == ACCEPT:
        # Checked again here (services checked it, and its sequence, before proposing it): only a roster
        # that verifies against the trust store as it is now is written.
        incoming = store.Published.from_bundle(intent["files"].encode())
        roster.verify_roster(
            incoming.peers_toml, incoming.revoked_toml, trusted=trust.roster_signers(), now=_at(intent["checked_at"])
        )
        return store.Published(incoming.peers_toml, incoming.revoked_toml, published.crl_pem)
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    base = base_roster(published)
    peers = {(p.name, p.fingerprint_sha256): p for p in (base.peers if base else ())}
    revoked = {r.serial: r for r in (base.revoked if base else ())}
    signed_ts = _at(intent["signed_ts"])
    if method in (REVOKE, ROTATE):
        old = intent["revoke"]
        peers.pop((old["name"], old["fingerprint_sha256"]), None)
        revoked[old["serial"]] = roster.Revoked(
            name=old["name"],
            fingerprint_sha256=old["fingerprint_sha256"],
            serial=old["serial"],
            reason=old["reason"],
            revoked_ts=intent["signed_ts"],
        )
    if method in (ISSUE, ROTATE):
        peer = intent["peer"]
        certificate = ca.x509.load_pem_x509_certificate(issued_certificate(team_ca, intent))
        for key in [k for k in peers if k[0] == peer["name"]]:
            del peers[key]
        entry = roster.Peer(
            name=peer["name"],
            fingerprint_sha256=ca.cert_fingerprint(certificate),
            role=peer["role"],
            endpoint=peer.get("endpoint", ""),
        )
        peers[(entry.name, entry.fingerprint_sha256)] = entry
    signed = roster.sign_roster(
        list(peers.values()),
        list(revoked.values()),
        sequence_number=(base.meta.sequence_number if base else 0) + 1,
        signed_ts=signed_ts,
        expires=_at(intent["expires"]),
        ca_key=team_ca.key,
        ca_certificate=team_ca.certificate,
    )
    crl = ca.sign_crl(
        team_ca,
        [(int(r.serial, 16), _at(r.revoked_ts)) for r in signed.revoked],
        this_update=signed_ts,
        next_update=_at(intent["expires"]),
        crl_number=signed.meta.sequence_number,
    )
    return store.Published(signed.peers_toml, signed.revoked_toml, crl)


# --- settling: the caretaker's tables follow the written roster ------------------------------------------


def remember_accepted(published: store.Published, *, source: str, actor: str) -> AcceptedRoster:
    """Record `published` as the roster accepted last (sealed), inside the caller's transaction."""
    checked = roster.verify_roster(
        published.peers_toml, published.revoked_toml, trusted=trust.roster_signers(), now=EPOCH
    )
    with transaction.atomic():
        row = AcceptedRoster.objects.select_for_update().filter(pk=1).first() or AcceptedRoster(pk=1)
        row.sequence = checked.meta.sequence_number
        row.digest = checked.digest
        row.ca_fingerprint = checked.meta.ca_fingerprint_sha256
        row.expires = checked.meta.expires
        row.source = source[:200]
        row.accepted_at = datetime.now(UTC)
        row.seal = sealing.seal(row.seal_parts())
        row.save()
        record(
            EventKind.CARETAKER_ACTION,
            tool="roster.accepted",
            arguments={
                "sequence_number": row.sequence,
                "digest": row.digest,
                "ca_fingerprint_sha256": row.ca_fingerprint,
                "source": row.source,
            },
            outcome="accepted",
            called_by=actor,
        )
    return row


def _settle_issuance(intent: Mapping[str, Any], *, actor: str) -> dict[str, Any]:
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    pem = issued_certificate(team_ca, intent)
    certificate = ca.x509.load_pem_x509_certificate(pem)
    art = key_art(certificate)
    peer = Peer.objects.select_for_update().get(name=intent["peer"]["name"])
    peer.state = PeerState.ACTIVE
    peer.serial = intent["serial"]
    peer.fingerprint_sha256 = ca.cert_fingerprint(certificate)
    peer.certificate_pem = pem.decode()
    peer.key_fingerprint, peer.key_memorable_id = art.fingerprint, art.memorable_id
    peer.issued_at = certificate.not_valid_before_utc
    peer.expires_at = certificate.not_valid_after_utc
    peer.approved_by = actor[:150]
    peer.save()
    record(
        EventKind.CARETAKER_ACTION,
        tool="certificate.issued",
        arguments={
            "peer": peer.name,
            "role": peer.role,
            "serial": peer.serial,
            "fingerprint_sha256": peer.fingerprint_sha256,
            "key_fingerprint": art.fingerprint,
            "expires": peer.expires_at.isoformat(),
        },
        outcome="issued",
        called_by=actor,
    )
    return {
        "peer": peer.name,
        "certificate": peer.certificate_pem,
        "serial": peer.serial,
        "fingerprint_sha256": peer.fingerprint_sha256,
        "not_after": peer.expires_at.isoformat(),
        **{f"key_{k}" if k in ("fingerprint",) else k: v for k, v in art.as_dict().items()},
    }


def _settle_revocation(intent: Mapping[str, Any], *, actor: str) -> dict[str, Any]:
    old = intent["revoke"]
    peer = Peer.objects.select_for_update().filter(name=old["name"]).first()
    Revocation.objects.create(
        peer=peer,
        name=old["name"],
        serial=old["serial"],
        fingerprint_sha256=old["fingerprint_sha256"],
        reason=old["reason"],
        revoked_at=_at(intent["signed_ts"]),
        revoked_by=actor[:150],
    )
    if peer is not None and peer.serial == old["serial"]:
        peer.state = PeerState.REVOKED
        peer.save(update_fields=["state"])
    record(
        EventKind.CARETAKER_ACTION,
        tool="certificate.revoked",
        arguments={
            "peer": old["name"],
            "serial": old["serial"],
            "fingerprint_sha256": old["fingerprint_sha256"],
            "reason": old["reason"],
        },
        outcome="revoked",
        called_by=actor,
    )
    return {"revoked_serial": old["serial"], "revoked_fingerprint_sha256": old["fingerprint_sha256"]}
