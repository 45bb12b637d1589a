"""What the caretaker does (DESIGN section 10): create the team CA, register peers, mint enrollment codes,
propose certificates from CSRs, revocations and rotations, sign the roster, accept rosters signed elsewhere,
and export the team's setup.

Changes to the roster are never made here directly. A member's request (`team.request_cert`) becomes a
`Proposal`, which the MCP edge turns into a pending confirmation the caretaker approves by typing the key's
memorable ID; a caretaker acting in the console decides on the spot and the change is carried out at once
(`forge_core.execution`). Either way the one executor writes the roster under a recovery contract through
`caretaker.capability`, and what the caretaker reviewed is what is written: the proposal's result digest is
the SHA-256 the executor checks.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from audit.models import EventKind
from audit.services import record
from caretaker import activation, ca, roster, store, trust
from caretaker.capability import ACCEPT, ISSUE, REVOKE, ROTATE, SIGN, TARGET, RosterCapability
from caretaker.models import AcceptedRoster, EnrollmentCode, Peer, PeerState, Revocation, Role, RosterConflict
from caretaker.randomart import key_art
from forge_core import execution
from forge_core.errors import Refusal
from forge_core.live import notify_console
from forge_core.tokens import mint_token, token_digest

CODE_PREFIX = "fenr_"
PEER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$")
CLOCK_SKEW = timedelta(minutes=5)


class CaretakerRefusal(Refusal):
    def __init__(self, code: str, message: str, *, status: int = 400, **details: Any) -> None:
        super().__init__(code, message, status=status, **details)


def _now() -> datetime:
    return timezone.now().astimezone(UTC).replace(microsecond=0)


def _audit(tool: str, outcome: str, actor: str, **arguments: Any) -> None:
    record(EventKind.CARETAKER_ACTION, tool=tool, arguments=arguments, outcome=outcome, called_by=actor)


# --- the CA ---------------------------------------------------------------------------------------------


def do_create_ca(key_type: str, *, actor: str, common_name: str = "Forge Team CA") -> ca.TeamCa:
    """Create the team CA under FORGE_CA_DIR and trust it; an existing CA is never overwritten."""
    if key_type not in ca.KEY_TYPES:
        raise CaretakerRefusal(
            "FORGE_ERR_INVALID_KEY_TYPE", f"Choose a key type of {', '.join(ca.KEY_TYPES)}; {key_type!r} is none."
        )
    key_pem, cert_pem = ca.create_ca(key_type, common_name=common_name)
    try:
        ca.write_ca(settings.FORGE_CA_DIR, key_pem, cert_pem)
    except ca.CaExists:
        with transaction.atomic():
            _audit("ca.create", "refused: exists", actor, folder=str(settings.FORGE_CA_DIR))
        raise CaretakerRefusal(
            "FORGE_ERR_CA_EXISTS",
            f"A team CA already exists in {settings.FORGE_CA_DIR}; it is never overwritten. Move it away first "
            "if you really mean to start a new one (every certificate it issued stops being trusted).",
            status=409,
        ) from None
    team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    with transaction.atomic():
        _audit(
            "ca.create",
            "created",
            actor,
            key_type=key_type,
            serial=format(team_ca.certificate.serial_number, "x"),
            fingerprint_sha256=team_ca.fingerprint_sha256,
        )
    trust.install(cert_pem, actor=actor, why="the caretaker's own CA")
    notify_console("caretaker")
    return team_ca


def ca_description() -> dict[str, Any] | None:
    try:
        team_ca = ca.load_ca(settings.FORGE_CA_DIR)
    except ca.CaUnavailable:
        return None
    return {
        "subject": team_ca.certificate.subject.rfc4514_string(),
        "key_type": team_ca.key_type,
        "fingerprint_sha256": team_ca.fingerprint_sha256,
        "not_after": team_ca.certificate.not_valid_after_utc.isoformat(),
        "certificate": (settings.FORGE_CA_DIR / "ca.crt").read_text(),
        **key_art(team_ca.certificate).as_dict(),
    }


# --- peers and enrollment codes -------------------------------------------------------------------------


def _clean_endpoint(endpoint: str) -> str:
    endpoint = endpoint.strip()
    if not endpoint:
        return ""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("https", "http") or not parts.hostname or len(endpoint) > 300:
        raise CaretakerRefusal(
            "FORGE_ERR_INVALID_PEER", "The endpoint must be a URL such as https://alice-ws.factory:7531, or empty."
        )
    return endpoint


def do_create_peer(name: str, *, role: str, endpoint: str = "", actor: str) -> Peer:
    """Register a member the caretaker approves: its certificate's subject and SAN will come from here."""
    name = name.strip()
    if not PEER_NAME.match(name):
        raise CaretakerRefusal(
            "FORGE_ERR_INVALID_PEER",
            "A peer name is 1-100 letters, digits and . _ @ + -, starting with a letter or digit (e.g. alice@team).",
        )
    if role not in Role.values:
        raise CaretakerRefusal("FORGE_ERR_INVALID_PEER", f"The role must be one of {', '.join(Role.values)}.")
    clean = _clean_endpoint(endpoint)
    with transaction.atomic():
        if Peer.objects.filter(name=name).exists():
            raise CaretakerRefusal("FORGE_ERR_PEER_EXISTS", f"There is a peer {name} already.", status=409)
        peer = Peer.objects.create(name=name, role=role, endpoint=clean, created_by=actor[:150])
        _audit("peer.create", "created", actor, peer=name, role=role, endpoint=clean)
        notify_console("caretaker")
    return peer


@dataclass(frozen=True)
class MintedCode:
    raw: str  # shown once, never stored
    code: EnrollmentCode


def do_mint_code(peer_name: str, *, actor: str) -> MintedCode:
    """A one-time enrollment code for a peer: shown once, stored as a digest, valid FORGE_ENROLLMENT_CODE_HOURS."""
    peer = Peer.objects.filter(name=peer_name).first()
    if peer is None:
        raise CaretakerRefusal("FORGE_ERR_NOT_FOUND", f"There is no peer {peer_name!r}.", status=404)
    if peer.state == PeerState.REVOKED:
        raise CaretakerRefusal(
            "FORGE_ERR_INVALID_PEER", f"{peer.name} is revoked; register the member again under a new name."
        )
    if peer.state == PeerState.ACTIVE:
        raise CaretakerRefusal(
            "FORGE_ERR_INVALID_PEER",
            f"{peer.name} has a certificate already, so a code would not be accepted: the member renews it with "
            "team.rotate_cert (a lost key: revoke it and register the member under a new name).",
            status=409,
        )
    minted = mint_token(CODE_PREFIX)
    with transaction.atomic():
        code = EnrollmentCode.objects.create(
            peer=peer,
            digest=minted.digest,
            prefix=minted.shown,
            created_by=actor[:150],
            expires_at=timezone.now() + timedelta(hours=settings.FORGE_ENROLLMENT_CODE_HOURS),
        )
        _audit(
            "enrollment.mint", "minted", actor, peer=peer.name, code=minted.shown, expires=code.expires_at.isoformat()
        )
        notify_console("caretaker")
    return MintedCode(minted.raw, code)


def _redeem(raw_code: str, *, used_for: str) -> Peer:
    """The peer a one-time code was minted for; the code is used up (in the caller's transaction)."""
    code = (
        EnrollmentCode.objects.select_for_update()
        .select_related("peer")
        .filter(digest=token_digest(raw_code.strip()))
        .first()
    )
    if code is None or not raw_code.strip().startswith(CODE_PREFIX):
        raise CaretakerRefusal(
            "FORGE_ERR_ENROLLMENT_CODE",
            "That enrollment code is unknown. Ask your caretaker for a new one.",
            status=403,
        )
    if code.used_at is not None:
        raise CaretakerRefusal(
            "FORGE_ERR_ENROLLMENT_CODE",
            "That enrollment code was used already; a code works once. Ask your caretaker for a new one.",
            status=403,
        )
    if code.expires_at <= timezone.now():
        raise CaretakerRefusal(
            "FORGE_ERR_ENROLLMENT_CODE",
            "That enrollment code has expired. Ask your caretaker for a new one.",
            status=403,
        )
    code.used_at, code.used_for = timezone.now(), used_for[:100]
    code.save(update_fields=["used_at", "used_for"])
    return code.peer


# --- proposals: what the caretaker reviews, and exactly what will be written -----------------------------


@dataclass(frozen=True)
class Proposal:
    """A roster change ready for review: the question, the preview, and what the executor will be given."""

    tool: str
    method: str
    question: str
    preview: dict[str, Any]
    intent: dict[str, Any]
    base_fingerprint: str
    result_digest: str
    label: str
    key_memorable_id: str = ""
    target: dict[str, Any] = field(default_factory=lambda: dict(TARGET))


def stamp(moment: datetime) -> str:
    """A UTC time as the roster files write it (YYYY-MM-DDTHH:MM:SSZ)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _roster_times(now: datetime) -> dict[str, str]:
    return {"signed_ts": stamp(now), "expires": stamp(now + timedelta(days=settings.FORGE_ROSTER_VALIDITY_DAYS))}


def _proposal(
    tool: str,
    method: str,
    intent: dict[str, Any],
    *,
    question: str,
    label: str,
    preview: dict[str, Any],
    key_memorable_id: str = "",
) -> Proposal:
    """Compute the result now, as the executor will: its digest binds the caretaker's approval."""
    adapter = RosterCapability()
    identity = adapter.identity(TARGET)
    observed = adapter.read(identity)
    result = adapter.forward(identity, method, observed.content, intent)
    after = store.Published.from_bundle(result)
    checked = roster.verify_roster(after.peers_toml, after.revoked_toml, trusted=trust.roster_signers(), now=_now())
    preview = {
        **preview,
        "roster": {
            "sequence_number": checked.meta.sequence_number,
            "peers": len(checked.peers),
            "revoked": len(checked.revoked),
            "expires": checked.meta.expires,
        },
        "result_sha256": adapter.fingerprint(result),
    }
    return Proposal(
        tool=tool,
        method=method,
        question=question,
        preview=preview,
        intent=intent,
        base_fingerprint=observed.fingerprint,
        result_digest=adapter.fingerprint(result),
        label=label,
        key_memorable_id=key_memorable_id,
    )


def _csr(csr_pem: str) -> ca.CsrInfo:
    try:
        return ca.inspect_csr(csr_pem)
    except ca.CsrRefused as exc:
        raise CaretakerRefusal("FORGE_ERR_INVALID_CSR", str(exc), reason=exc.reason) from None


def _issuance_intent(peer: Peer, csr: ca.CsrInfo, now: datetime) -> dict[str, Any]:
    host = urlsplit(peer.endpoint).hostname if peer.endpoint else None
    return {
        "peer": {"name": peer.name, "role": peer.role, "endpoint": peer.endpoint},
        "csr_pem": csr.pem.decode(),
        "serial": format(ca.random_serial(), "x"),
        "not_before": stamp(now - CLOCK_SKEW),
        "days": settings.FORGE_CERT_DAYS,
        "dns_names": [host] if host else [],
        "uris": [],
        **_roster_times(now),
    }


def _key_preview(csr: ca.CsrInfo) -> dict[str, Any]:
    art = key_art(csr.csr)
    return {
        "key_type": art.key_type,
        "bits": art.bits,
        "key_fingerprint": art.fingerprint,
        "memorable_id": art.memorable_id,
        "randomart": art.randomart,
    }


def propose_issuance(
    csr_pem: str, *, code: str | None = None, peer_name: str | None = None, requested_by: str
) -> Proposal:
    """A certificate for a peer from its CSR: with a one-time `code` (a member's client), or for `peer_name`
    (the caretaker in the console), exactly one of them. Refused, with nothing changed, for a bad CSR, a code
    that is unknown (an empty one too), used or expired, or a peer that has a certificate already (that is
    team.rotate_cert)."""
    if (code is None) == (peer_name is None):
        raise TypeError("propose_issuance takes either a code or a peer name")
    activation.require_caretaker("Issuing a certificate")
    csr = _csr(csr_pem)
    with transaction.atomic():
        if code is not None:
            peer = _redeem(code, used_for=f"request by {requested_by}")
        else:
            found = Peer.objects.filter(name=peer_name).first()
            if found is None:
                raise CaretakerRefusal("FORGE_ERR_NOT_FOUND", f"There is no peer {peer_name!r}.", status=404)
            peer = found
        if peer.state != PeerState.ENROLLING:
            raise CaretakerRefusal(
                "FORGE_ERR_INVALID_PEER",
                f"{peer.name} is {peer.state}: an active peer renews with team.rotate_cert; a revoked one is "
                "registered again under a new name.",
                status=409,
            )
        key = _key_preview(csr)
        intent = _issuance_intent(peer, csr, _now())
        proposal = _proposal(
            "team.request_cert",
            ISSUE,
            intent,
            question=f"Issue a client certificate to {peer.name} ({peer.role}) for the {key['key_type']} "
            f"{key['bits']}-bit key {key['memorable_id']}?",
            label=f"certificate for {peer.name}",
            preview={"peer": intent["peer"], "serial": intent["serial"], "days": intent["days"], **key},
            key_memorable_id=key["memorable_id"],
        )
        _audit(
            "certificate.request",
            "proposed",
            requested_by,
            peer=peer.name,
            serial=intent["serial"],
            key_fingerprint=key["key_fingerprint"],
        )
    return proposal


def _active_peer(name: str) -> Peer:
    peer = Peer.objects.filter(name=name).first()
    if peer is None:
        raise CaretakerRefusal(
            "FORGE_ERR_NOT_FOUND", f"There is no peer {name!r}. team.list_peers lists them.", status=404
        )
    if peer.state != PeerState.ACTIVE or not peer.serial:
        raise CaretakerRefusal(
            "FORGE_ERR_INVALID_PEER", f"{peer.name} has no active certificate ({peer.state}).", status=409
        )
    return peer


def propose_revocation(peer_name: str, reason: str, *, requested_by: str) -> Proposal:
    activation.require_caretaker("Revoking a certificate")
    peer = _active_peer(peer_name)
    reason = " ".join(reason.split())[:200] or "unspecified"
    intent = {
        "revoke": {
            "name": peer.name,
            "serial": peer.serial,
            "fingerprint_sha256": peer.fingerprint_sha256,
            "reason": reason,
        },
        **_roster_times(_now()),
    }
    return _proposal(
        "team.revoke_peer",
        REVOKE,
        intent,
        question=f"Revoke the certificate of {peer.name} (serial {peer.serial}, key {peer.key_memorable_id})?",
        label=f"revoke {peer.name}",
        preview={"revoke": intent["revoke"], "key_memorable_id": peer.key_memorable_id},
        key_memorable_id=peer.key_memorable_id,
    )


def rotation_challenge(csr: ca.CsrInfo) -> bytes:
    """What a peer signs with its current key to rotate: the new CSR's DER bytes."""
    from cryptography.hazmat.primitives.serialization import Encoding

    return b"forge-rotate-cert:" + csr.csr.public_bytes(Encoding.DER)


def _check_possession(peer: Peer, csr: ca.CsrInfo, proof_b64: str) -> None:
    """The caller proves it holds the current certificate's key: a signature over the rotation challenge."""
    current = x509.load_pem_x509_certificate(peer.certificate_pem.encode())
    key = current.public_key()
    try:
        signature = base64.b64decode(proof_b64, validate=True)
        message = rotation_challenge(csr)
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(
                signature, message, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.AUTO), hashes.SHA256()
            )
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        else:
            raise InvalidSignature()
    except (InvalidSignature, ValueError):
        raise CaretakerRefusal(
            "FORGE_ERR_ROTATION_PROOF",
            "The proof does not verify with the current certificate's key. Sign 'forge-rotate-cert:' followed by "
            "the new CSR's DER bytes with the current private key (Ed25519; RSA-PSS-SHA256; ECDSA-SHA256) and pass "
            "it base64-encoded as proof.",
            status=403,
        ) from None


def propose_rotation(peer_name: str, csr_pem: str, proof_b64: str, *, requested_by: str) -> Proposal:
    """A peer replaces its certificate over its current one; the old one is revoked once the new is issued."""
    activation.require_caretaker("Rotating a certificate")
    peer = _active_peer(peer_name)
    csr = _csr(csr_pem)
    _check_possession(peer, csr, proof_b64)
    now = _now()
    key = _key_preview(csr)
    intent = {
        **_issuance_intent(peer, csr, now),
        "revoke": {
            "name": peer.name,
            "serial": peer.serial,
            "fingerprint_sha256": peer.fingerprint_sha256,
            "reason": "superseded",
        },
    }
    return _proposal(
        "team.rotate_cert",
        ROTATE,
        intent,
        question=f"Replace the certificate of {peer.name} (serial {peer.serial}) with one for the {key['key_type']} "
        f"{key['bits']}-bit key {key['memorable_id']}, revoking the old one?",
        label=f"rotate {peer.name}",
        preview={"peer": intent["peer"], "serial": intent["serial"], "replaces": intent["revoke"], **key},
        key_memorable_id=key["memorable_id"],
    )


def propose_signing(*, requested_by: str) -> Proposal:
    activation.require_caretaker("Signing the roster")
    intent = _roster_times(_now())
    return _proposal(
        "roster.sign", SIGN, intent, question="Sign the roster again?", label="roster signed again", preview={}
    )


# --- carrying out what a caretaker decided in the console ------------------------------------------------


def carry_out_now(proposal: Proposal, *, user: AbstractBaseUser, typed_id: str = "") -> execution.Outcome:
    """A caretaker in the console approves a proposal there and then (typing the key's memorable ID where one is
    involved); the executor carries it out. Refused unless the user may act as caretaker."""
    from caretaker.fingerprint import normalize_typed_id

    if not activation.may_act(user):
        raise CaretakerRefusal(
            "FORGE_ERR_PERMISSION_DENIED",
            "Only a caretaker may do this: ask an administrator for the 'Can run the team certificate authority' permission.",
            status=403,
        )
    if proposal.key_memorable_id and normalize_typed_id(typed_id) != proposal.key_memorable_id:
        raise CaretakerRefusal(
            "FORGE_ERR_TYPED_ID_MISMATCH", "Type the key's memorable ID exactly as shown to approve it.", status=400
        )
    actor = user.get_username()
    return _execute(proposal, authority="forge-console", actor=actor)


def _execute(proposal: Proposal, *, authority: str, actor: str) -> execution.Outcome:
    """Hand a proposal a person decided on the spot to the executor, bound to what it showed: the roster as it
    was read (base) and the result's digest."""
    return execution.carry_out(
        capability=RosterCapability.name,
        method=proposal.method,
        target=proposal.target,
        intent=proposal.intent,
        idempotency_key=f"{authority}:{secrets.token_hex(16)}",
        approval={"authority": authority, "approver": actor, "decided_at": _now().isoformat()},
        actor=actor,
        label=proposal.label,
        expected_fingerprint=proposal.base_fingerprint,
        expected_result=proposal.result_digest,
    )


def do_sign_roster(*, actor: str) -> execution.Outcome:
    """Sign the roster again from this server's shell (`manage.py roster_sign`): whoever runs manage.py here
    can read the CA's folder already, so running the command is the decision; the executor carries it out as
    for the console. Refused (NotCaretaker, naming what is missing) unless this server is an active caretaker."""
    return _execute(propose_signing(requested_by=actor), authority="manage.py", actor=actor)


def refresh_roster_if_due(*, actor: str = "roster-refresh") -> execution.Outcome | None:
    """Sign the roster again when this server is the active caretaker, the accepted roster is its own and a
    third or less of its validity is left: members keep trusting a team whose roster nobody touched (a roster
    past `expires` is refused everywhere). None when nothing was due."""
    row = accepted()
    description = ca_description()
    if row is None or description is None or not activation.is_caretaker():
        return None
    if row.ca_fingerprint != description["fingerprint_sha256"]:
        return None  # another caretaker's roster: theirs to renew
    left = datetime.fromisoformat(row.expires) - _now()
    if left > timedelta(days=settings.FORGE_ROSTER_VALIDITY_DAYS) / 3:
        return None
    return _execute(propose_signing(requested_by=actor), authority="roster-refresh", actor=actor)


# --- rosters signed elsewhere ----------------------------------------------------------------------------


def accepted() -> AcceptedRoster | None:
    """The record of the roster accepted last, if there is one and it is what Forge sealed."""
    row = AcceptedRoster.objects.filter(pk=1).first()
    if row is None or not _is_authentic(row):
        return None
    return row


def _is_authentic(row: AcceptedRoster) -> bool:
    from caretaker import sealing

    return sealing.is_sealed(row.seal_parts(), row.seal)


TAMPERED_RECORD = (
    "The record of the last accepted roster was changed outside Forge (its seal does not match), so no roster is "
    "accepted until that is dealt with: compare the database with a backup; a caretaker signing the roster again "
    "(manage.py roster_sign) records a fresh one."
)


@dataclass(frozen=True)
class Verdict:
    outcome: str  # accepted, same, conflict, refused
    message: str
    sequence: int | None = None
    reason: str = ""


def consider_roster(peers_toml: bytes, revoked_toml: bytes, *, source: str, actor: str) -> Verdict:
    """A roster signed elsewhere (a file in incoming/, an upload): accepted and published only when it verifies
    against the trust store, is not expired, its files belong together and its sequence is higher than the last
    accepted; an equal sequence with other content is flagged as a conflict. Every verdict is audited."""
    now = _now()
    last = AcceptedRoster.objects.filter(pk=1).first()
    if last is not None and not _is_authentic(last):
        # Fail closed: an edited counter must not let an older roster back in.
        with transaction.atomic():
            _audit("roster.consider", "refused: tampered_record", actor, source=source)
        return Verdict("refused", TAMPERED_RECORD, reason="tampered_record")
    try:
        candidate = roster.verify_roster(peers_toml, revoked_toml, trusted=trust.roster_signers(), now=now)
        verdict = roster.evaluate(
            candidate, last_sequence=last.sequence if last else None, last_digest=last.digest if last else None
        )
    except roster.RosterRefused as refused:
        with transaction.atomic():
            _audit("roster.consider", f"refused: {refused.reason}", actor, source=source)
        return Verdict("refused", str(refused), reason=refused.reason)
    if verdict == "same":
        return Verdict("same", "This roster is the one accepted already.", candidate.meta.sequence_number)
    if verdict == "conflict":
        with transaction.atomic():
            RosterConflict.objects.get_or_create(
                sequence=candidate.meta.sequence_number,
                candidate_digest=candidate.digest,
                defaults={"accepted_digest": last.digest if last else "", "source": source[:200]},
            )
            _audit(
                "roster.consider",
                "conflict",
                actor,
                source=source,
                sequence_number=candidate.meta.sequence_number,
                digest=candidate.digest,
            )
            notify_console("caretaker")
        return Verdict(
            "conflict",
            f"Two different rosters carry sequence {candidate.meta.sequence_number}: flagged for the caretakers to "
            "resolve (sign a newer roster); neither replaces the other silently.",
            candidate.meta.sequence_number,
            reason="conflict",
        )
    files = store.Published(candidate.peers_toml, candidate.revoked_toml).bundle().decode()
    adapter = RosterCapability()
    observed = adapter.read(adapter.identity(TARGET))
    outcome = execution.carry_out(
        capability=RosterCapability.name,
        method=ACCEPT,
        target=TARGET,
        intent={"files": files, "checked_at": now.isoformat(), "source": source[:200]},
        idempotency_key=f"accept:{candidate.digest}:{secrets.token_hex(8)}",
        approval={"authority": "roster-signature", "ca_fingerprint_sha256": candidate.meta.ca_fingerprint_sha256},
        actor=actor,
        label=f"roster {candidate.meta.sequence_number} from {source}"[:200],
        expected_fingerprint=observed.fingerprint,
    )
    if not outcome.verified:
        return Verdict("refused", f"The roster could not be published ({outcome.detail}).", reason=outcome.detail)
    return Verdict("accepted", f"Roster {candidate.meta.sequence_number} accepted.", candidate.meta.sequence_number)


def do_clear_conflict(conflict_id: int, *, actor: str) -> RosterConflict:
    """Mark a flagged roster conflict as seen and dealt with (audited); the rosters themselves are untouched."""
    with transaction.atomic():
        conflict = RosterConflict.objects.select_for_update().filter(pk=conflict_id, cleared_at__isnull=True).first()
        if conflict is None:
            raise CaretakerRefusal("FORGE_ERR_NOT_FOUND", "There is no open roster conflict with this id.", status=404)
        conflict.cleared_at, conflict.cleared_by = timezone.now(), actor[:150]
        conflict.save(update_fields=["cleared_at", "cleared_by"])
        record(
            EventKind.CARETAKER_ACTION,
            tool="roster.conflict_clear",
            arguments={
                "sequence_number": conflict.sequence,
                "accepted_digest": conflict.accepted_digest,
                "candidate_digest": conflict.candidate_digest,
            },
            outcome="cleared",
            called_by=actor,
        )
    return conflict


def consider_incoming(*, actor: str = "roster-watcher") -> list[Verdict]:
    """Pairs of peers.toml / revoked.toml dropped into FORGE_ROSTER_DIR/incoming/ (as `NAME.peers.toml` and
    `NAME.revoked.toml`, or plain `peers.toml` and `revoked.toml`): each pair considered once, then moved to
    incoming/done/ or incoming/refused/ with the verdict beside it."""
    incoming = settings.FORGE_ROSTER_DIR / store.INCOMING
    verdicts: list[Verdict] = []
    if not incoming.is_dir():
        return verdicts
    for peers_path in sorted(incoming.glob("*peers.toml")):
        stem = peers_path.name[: -len("peers.toml")]
        revoked_path = incoming / f"{stem}revoked.toml"
        if not revoked_path.exists():
            continue
        try:
            peers_bytes, revoked_bytes = peers_path.read_bytes(), revoked_path.read_bytes()
        except OSError:
            continue
        verdict = consider_roster(peers_bytes, revoked_bytes, source=f"incoming/{peers_path.name}", actor=actor)
        verdicts.append(verdict)
        bucket = incoming / ("done" if verdict.outcome in ("accepted", "same") else "refused")
        bucket.mkdir(exist_ok=True, mode=0o700)
        stamp = _now().strftime("%Y%m%dT%H%M%SZ")
        for path in (peers_path, revoked_path):
            path.rename(bucket / f"{stamp}-{path.name}")
        (bucket / f"{stamp}-{stem}verdict.txt").write_text(f"{verdict.outcome}: {verdict.message}\n")
    return verdicts


# --- reading: peers, the setup a member needs ------------------------------------------------------------


def list_peers() -> list[dict[str, Any]]:
    """The team's peers as the caretaker knows them, with fingerprint art for each certified key."""
    revoked = set(Revocation.objects.values_list("serial", flat=True))
    peers = []
    for peer in Peer.objects.all()[:1000]:
        entry: dict[str, Any] = {
            "name": peer.name,
            "role": peer.role,
            "endpoint": peer.endpoint,
            "state": peer.state,
            "serial": peer.serial,
            "fingerprint_sha256": peer.fingerprint_sha256,
            "expires": peer.expires_at.isoformat() if peer.expires_at else None,
            "revoked": peer.state == PeerState.REVOKED or peer.serial in revoked,
        }
        if peer.certificate_pem:
            art = key_art(peer.certificate_pem.encode())
            entry.update(key_fingerprint=art.fingerprint, memorable_id=art.memorable_id, randomart=art.randomart)
        peers.append(entry)
    return peers


def expiring_soon(days: int = 14) -> list[Peer]:
    horizon = timezone.now() + timedelta(days=days)
    return list(Peer.objects.filter(state=PeerState.ACTIVE, expires_at__lte=horizon).order_by("expires_at"))


def export_setup(*, public_url: str = "", server_tls: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a member needs to join: the CA certificate, the signed roster files, the CRL, the certificate of this
    server's HTTPS listener when it serves one (`server_tls`: its port and certificate as the edge describes
    them), and client snippets."""
    activation.require_caretaker("Exporting the team setup")
    published = store.read_published(settings.FORGE_ROSTER_DIR)
    description = ca_description() or {}
    served = (server_tls or {}).get("certificate") or {}
    # The snippets name this server by FORGE_PUBLIC_URL; without it they say where to put the address.
    url = public_url.rstrip("/") or (f"https://SERVER:{server_tls['port']}" if server_tls else "https://SERVER:PORT")
    files = (
        "Save ca_certificate as team-ca.pem (it checks the roster), server_certificate as forge-server.crt (it checks "
        "this server: compare server_memorable_id with its operator), your certificate as client.crt and your key "
        "as client.key."
        if served
        else "Save ca_certificate as team-ca.pem, your certificate as client.crt and your key as client.key. This "
        "server serves no HTTPS yet (runmcp --tls-port): ask its operator for its certificate, as forge-server.crt."
    )
    return {
        "ca_certificate": description.get("certificate", ""),
        "ca_fingerprint_sha256": description.get("fingerprint_sha256", ""),
        "ca_memorable_id": description.get("memorable_id", ""),
        "ca_randomart": description.get("randomart", ""),
        "server_certificate": served.get("certificate", ""),
        "server_fingerprint_sha256": served.get("fingerprint_sha256", ""),
        "server_memorable_id": served.get("memorable_id", ""),
        "peers_toml": published.peers_toml.decode(),
        "revoked_toml": published.revoked_toml.decode(),
        "crl_pem": published.crl_pem.decode(),
        "client_configuration": {
            "files": files,
            "curl": "curl --cert client.crt --key client.key --cacert forge-server.crt -H 'Accept: application/json, "
            "text/event-stream' -H 'Content-Type: application/json' "
            f"""-d '{{"jsonrpc":"2.0","id":1,"method":"ping"}}' {url}/mcp""",
            "mcp_stdio": f"python manage.py mcp_stdio --url {url}/mcp --cert client.crt --key client.key "
            "--ca forge-server.crt",
            "verify_roster": "python manage.py roster_verify --trust team-ca.pem peers.toml revoked.toml",
            "server_url": public_url.rstrip("/") or "FORGE_PUBLIC_URL is not set on the server: use its address",
        },
    }
