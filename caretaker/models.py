"""The caretaker's records: its activation, the team's peers, enrollment codes, revocations and the roster
this server accepted (DESIGN section 10).

Certificates and roster files are public; what must stay secret (the CA key, the HMAC key that seals the
activation and the accepted roster) lives in files outside the database. A row someone edits behind
Forge's back therefore cannot activate the caretaker or roll the accepted roster back: both are sealed
(`caretaker.sealing`) and read as absent when the seal does not match.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

ACCEPTANCE_SENTENCE = "I accept Team-CA responsibility"


class Activation(models.Model):
    """The one row (pk 1) that says whether this server acts as the team's caretaker, and who accepted it."""

    enabled = models.BooleanField(default=False, help_text="The runtime flag, switched in the console.")
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    sentence = models.CharField(max_length=200, blank=True, help_text="What the activating user typed.")
    changed_at = models.DateTimeField(default=timezone.now)
    seal = models.CharField(max_length=64, blank=True)

    class Meta:
        permissions = [("act_as_caretaker", "Can run the team certificate authority")]

    def seal_parts(self) -> dict[str, Any]:
        return {
            "activation": self.pk,
            "enabled": self.enabled,
            "accepted_by": self.accepted_by_id,
            "accepted_at": self.accepted_at.isoformat() if self.accepted_at else "",
            "sentence": self.sentence,
            "changed_at": self.changed_at.isoformat(),
        }


class Role(models.TextChoices):
    AUTHOR = "author", "author"
    REVIEWER = "reviewer", "reviewer"
    OBSERVER = "observer", "observer"
    CARETAKER = "caretaker", "caretaker"


class PeerState(models.TextChoices):
    ENROLLING = "enrolling", "waiting for its first certificate"
    ACTIVE = "active", "active"
    REVOKED = "revoked", "revoked"


class Peer(models.Model):
    """A member of the team as the caretaker approved it: the certificate's subject and SAN come from here,
    never from what a CSR asks for."""

    name = models.CharField(max_length=100, unique=True, help_text="For example alice@team.")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.AUTHOR)
    endpoint = models.CharField(max_length=300, blank=True, help_text="Where the peer serves, if it does.")
    state = models.CharField(max_length=20, choices=PeerState.choices, default=PeerState.ENROLLING, db_index=True)
    serial = models.CharField(max_length=40, blank=True, help_text="The current certificate's serial (hex).")
    fingerprint_sha256 = models.CharField(max_length=95, blank=True, help_text="SHA-256 of the certificate.")
    certificate_pem = models.TextField(blank=True)
    key_fingerprint = models.CharField(max_length=60, blank=True, help_text="SHA256:... of the certified key.")
    key_memorable_id = models.CharField(max_length=100, blank=True)
    issued_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    approved_by = models.CharField(max_length=150, blank=True, help_text="Who approved the current certificate.")
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EnrollmentCode(models.Model):
    """A one-time code a member's client presents with its CSR; only its digest is stored."""

    peer = models.ForeignKey(Peer, on_delete=models.CASCADE, related_name="codes")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_for = models.CharField(max_length=100, blank=True, help_text="The request it was used for.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… for {self.peer.name}"


class Revocation(models.Model):
    """A certificate the caretaker revoked: it is in revoked.toml and the CRL from then on."""

    peer = models.ForeignKey(Peer, null=True, blank=True, on_delete=models.SET_NULL, related_name="revocations")
    name = models.CharField(max_length=100)
    serial = models.CharField(max_length=40, unique=True)
    fingerprint_sha256 = models.CharField(max_length=95)
    reason = models.CharField(max_length=200)
    revoked_at = models.DateTimeField()
    revoked_by = models.CharField(max_length=150)

    class Meta:
        ordering = ["-revoked_at"]

    def __str__(self) -> str:
        return f"{self.serial} ({self.name})"


class AcceptedRoster(models.Model):
    """The one row (pk 1) naming the roster this server accepted last: a file with a lower sequence is a
    replay, one with the same sequence and other content a conflict."""

    sequence = models.BigIntegerField(default=0)
    digest = models.CharField(max_length=64, blank=True)
    ca_fingerprint = models.CharField(max_length=95, blank=True)
    expires = models.CharField(max_length=40, blank=True)
    source = models.CharField(max_length=200, blank=True)
    accepted_at = models.DateTimeField(default=timezone.now)
    seal = models.CharField(max_length=64, blank=True)

    def seal_parts(self) -> dict[str, Any]:
        return {
            "roster": self.pk,
            "sequence": self.sequence,
            "digest": self.digest,
            "ca_fingerprint": self.ca_fingerprint,
            "expires": self.expires,
            "source": self.source,
            "accepted_at": self.accepted_at.isoformat(),
        }


class RosterConflict(models.Model):
    """Two rosters signed with one sequence number and different content: flagged, never resolved silently."""

    sequence = models.BigIntegerField()
    accepted_digest = models.CharField(max_length=64)
    candidate_digest = models.CharField(max_length=64)
    source = models.CharField(max_length=200)
    seen_at = models.DateTimeField(default=timezone.now)
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-seen_at"]
        constraints = [
            models.UniqueConstraint(fields=["sequence", "candidate_digest"], name="one_conflict_per_candidate")
        ]
