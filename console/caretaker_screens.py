"""The caretaker's console screens (DESIGN section 10): activation, the team CA, peers and their enrollment codes,
issuance from a CSR, revocation, the roster and the trust store.

`/console/caretaker/` is one live page in sections: the four conditions of activation with what to do about each
and the switch (the sentence typed exactly, or one click to switch off); the team CA with its fingerprint art, or
the form that creates it; the peers with state, serial, expiry and their key's memorable ID and randomart, each
with its actions; the enrollment codes; the team requests waiting for the caretaker (they are decided on the
confirmation page, by typing the key's memorable ID); the roster as published, its signature checked against the
trust store as the page is read, its conflicts and downloads; and the trust store. Issuing from a pasted or
uploaded CSR goes through a review page that shows the key's art: the approval posts the CSR again and is
re-proposed, and it is refused unless the memorable ID typed is that of the key being certified.

Every view here parses, checks that the user may act as caretaker (`caretaker.activation.may_act`), calls one
function of `caretaker` (which audits) and says what happened; they are mounted on the console's site
(`console.site.ConsoleSite`), behind its login. `/crl.pem` (`public_crl`) serves the CRL without login.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from caretaker import activation, ca, roster, services, store, trust
from caretaker.models import ACCEPTANCE_SENTENCE, EnrollmentCode, Peer, Role, RosterConflict
from caretaker.randomart import key_art
from confirmations.models import ConfirmationState
from confirmations.services import visible_to
from forge_core.console import refused, signed_in
from forge_core.errors import AuditUnavailable, Refusal
from forge_core.execution import Outcome

log = logging.getLogger(__name__)

EXPIRING_DAYS = 14
LIST_SHOWN = 200
CODES_SHOWN = 50
MAX_UPLOAD_BYTES = 64 * 1024
ROSTER_FILES = {"peers.toml": "application/toml", "revoked.toml": "application/toml", "crl.pem": "application/pkix-crl"}
NOT_AUDITED = "Nothing was done: the audit log could not be written (see the server log)."
NOT_CARETAKER = Refusal(
    "FORGE_ERR_PERMISSION_DENIED",
    "Only a caretaker uses the caretaker screens: ask an administrator for the 'Can run the team certificate "
    "authority' permission.",
    status=403,
)
TEAM_CAPABILITY = "team.roster"


class CaretakerScreens:
    """The views, bound to the console's admin site (for its login, its frame and its each_context)."""

    def __init__(self, site: admin.AdminSite) -> None:
        self.site = site

    @property
    def urls(self) -> list[URLPattern]:
        wrap = self.site.admin_view

        def post(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            return wrap(require_POST(view))

        return [
            path("caretaker/", wrap(self.screen_view), name="caretaker"),
            path("caretaker/activate/", post(self.activate_view), name="caretaker_activate"),
            path("caretaker/deactivate/", post(self.deactivate_view), name="caretaker_deactivate"),
            path("caretaker/ca/", post(self.create_ca_view), name="caretaker_create_ca"),
            path("caretaker/peers/", post(self.add_peer_view), name="caretaker_add_peer"),
            path("caretaker/peers/<str:name>/code/", post(self.mint_code_view), name="caretaker_mint_code"),
            path("caretaker/peers/<str:name>/revoke/", post(self.revoke_view), name="caretaker_revoke"),
            path("caretaker/peers/<str:name>/issue/", wrap(self.issue_view), name="caretaker_issue"),
            path("caretaker/peers/<str:name>/issue/review/", post(self.review_view), name="caretaker_issue_review"),
            path("caretaker/peers/<str:name>/issue/approve/", post(self.approve_view), name="caretaker_issue_approve"),
            path("caretaker/roster/sign/", post(self.sign_view), name="caretaker_sign"),
            path("caretaker/roster/upload/", post(self.upload_roster_view), name="caretaker_upload_roster"),
            path("caretaker/roster/<str:file_name>", wrap(self.roster_file_view), name="caretaker_roster_file"),
            path(
                "caretaker/conflicts/<int:conflict_id>/clear/",
                post(self.clear_conflict_view),
                name="caretaker_clear_conflict",
            ),
            path("caretaker/trust/", post(self.trust_add_view), name="caretaker_trust_add"),
            path("caretaker/trust/remove/", post(self.trust_remove_view), name="caretaker_trust_remove"),
        ]

    # --- reading ---------------------------------------------------------------------------------------

    def screen_view(self, request: HttpRequest) -> HttpResponse:
        if not _may_act(request):
            return _home()
        context = {**self.site.each_context(request), "title": "Team caretaker", **screen(request)}
        return TemplateResponse(request, "admin/caretaker/screen.html", context)

    def issue_view(self, request: HttpRequest, name: str) -> HttpResponse:
        if not _may_act(request):
            return _home()
        peer = Peer.objects.filter(name=name).first()
        if peer is None:
            messages.error(request, f"There is no peer {name!r}.")
            return _screen()
        context = {**self.site.each_context(request), "title": f"Issue a certificate to {peer.name}", "peer": peer}
        return TemplateResponse(request, "admin/caretaker/issue.html", context)

    def roster_file_view(self, request: HttpRequest, file_name: str) -> HttpResponse:
        if not _may_act(request):
            return _home()
        return _roster_file(file_name)

    # --- activation and the CA --------------------------------------------------------------------------

    def activate_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            activation.do_activate(signed_in(request.user), request.POST.get("sentence", ""))
            if activation.is_caretaker():
                return "The caretaker is on: this server acts as the team's certificate authority."
            return "The flag is on and the responsibility accepted; the conditions still missing are listed."

        return _act(request, "activating the caretaker", act)

    def deactivate_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            activation.do_deactivate(signed_in(request.user))
            return "The caretaker is off: team requests are refused until someone switches it on again."

        return _act(request, "deactivating the caretaker", act)

    def create_ca_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            team_ca = services.do_create_ca(request.POST.get("key_type", ""), actor=_actor(request))
            art = key_art(team_ca.certificate)
            return f"Team CA created ({team_ca.key_type}); its memorable ID is {art.memorable_id}."

        return _act(request, "creating the team CA", act)

    # --- peers --------------------------------------------------------------------------------------------

    def add_peer_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            peer = services.do_create_peer(
                request.POST.get("name", ""),
                role=request.POST.get("role", ""),
                endpoint=request.POST.get("endpoint", ""),
                actor=_actor(request),
            )
            return f"Peer {peer.name} added: mint an enrollment code for it, or issue from a CSR."

        return _act(request, "adding a peer", act)

    def mint_code_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """The raw code is in this one response only: it is stored as a digest and never shown again."""
        if not _may_act(request):
            return _home()
        try:
            minted = services.do_mint_code(name, actor=_actor(request))
        except AuditUnavailable:
            log.exception("minting an enrollment code for %s: the audit row could not be written", name)
            messages.error(request, NOT_AUDITED)
            return _screen()
        except Refusal as refusal:
            refused(request, refusal)
            return _screen()
        context = {
            **self.site.each_context(request),
            "title": f"Enrollment code for {minted.code.peer.name}",
            "raw": minted.raw,
            "code": minted.code,
        }
        # The admin's views are never cached (no-store), so the code stays in this one response.
        return TemplateResponse(request, "admin/caretaker/code.html", context)

    def revoke_view(self, request: HttpRequest, name: str) -> HttpResponse:
        def act() -> str:
            proposal = services.propose_revocation(name, request.POST.get("reason", ""), requested_by=_actor(request))
            outcome = services.carry_out_now(
                proposal, user=signed_in(request.user), typed_id=request.POST.get("typed_id", "")
            )
            return _outcome_message(
                outcome, f"Revoked the certificate of {name} (serial {proposal.intent['revoke']['serial']})"
            )

        return _act(request, f"revoking {name}", act)

    # --- issuance from a CSR ------------------------------------------------------------------------------

    def review_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """The CSR's key as the caretaker must compare it with the member: type, size, fingerprint art."""
        if not _may_act(request):
            return _home()
        csr_pem = _posted_csr(request)
        try:
            proposal = services.propose_issuance(csr_pem, peer_name=name, requested_by=_actor(request))
        except AuditUnavailable:
            log.exception("reviewing a CSR for %s: the audit row could not be written", name)
            messages.error(request, NOT_AUDITED)
            return HttpResponseRedirect(reverse("admin:caretaker_issue", args=[name]))
        except Refusal as refusal:
            refused(request, refusal)
            return HttpResponseRedirect(reverse("admin:caretaker_issue", args=[name]))
        context = {
            **self.site.each_context(request),
            "title": f"Review the request of {name}",
            "peer_name": name,
            "csr_pem": csr_pem,
            "proposal": proposal,
            "key": proposal.preview,
        }
        return TemplateResponse(request, "admin/caretaker/review.html", context)

    def approve_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Proposed again from the CSR the review page carried: the approval binds the key that page showed."""

        def act() -> str:
            proposal = services.propose_issuance(_posted_csr(request), peer_name=name, requested_by=_actor(request))
            if proposal.preview["key_fingerprint"] != request.POST.get("key_fingerprint", ""):
                raise Refusal(
                    "FORGE_ERR_NOT_REVIEWED",
                    "The request posted is not the one the review page showed; review it again.",
                    status=400,
                )
            outcome = services.carry_out_now(
                proposal, user=signed_in(request.user), typed_id=request.POST.get("typed_id", "")
            )
            return _outcome_message(
                outcome,
                f"Issued a certificate to {name} (serial {proposal.intent['serial']}) for key {proposal.key_memorable_id}",
            )

        return _act(request, f"issuing a certificate to {name}", act)

    # --- the roster ---------------------------------------------------------------------------------------

    def sign_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            proposal = services.propose_signing(requested_by=_actor(request))
            outcome = services.carry_out_now(proposal, user=signed_in(request.user))
            return _outcome_message(
                outcome, f"Signed the roster again (sequence {proposal.preview['roster']['sequence_number']})"
            )

        return _act(request, "signing the roster", act)

    def upload_roster_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            peers, revoked = _upload(request, "peers"), _upload(request, "revoked")
            verdict = services.consider_roster(peers, revoked, source="console upload", actor=_actor(request))
            if verdict.outcome in ("accepted", "same"):
                return verdict.message
            raise Refusal(f"FORGE_ERR_ROSTER_{verdict.outcome.upper()}", f"{verdict.outcome}: {verdict.message}")

        return _act(request, "considering an uploaded roster", act)

    def clear_conflict_view(self, request: HttpRequest, conflict_id: int) -> HttpResponse:
        def act() -> str:
            conflict = services.do_clear_conflict(conflict_id, actor=_actor(request))
            return f"Cleared the conflict at sequence {conflict.sequence}; sign a newer roster to settle it."

        return _act(request, "clearing a roster conflict", act)

    # --- the trust store ----------------------------------------------------------------------------------

    def trust_add_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            entry = trust.install(_upload(request, "certificate"), actor=_actor(request), why="uploaded in the console")
            return f"Trusted {entry.subject} (memorable ID {key_art(entry.certificate).memorable_id})."

        return _act(request, "adding a CA to the trust store", act)

    def trust_remove_view(self, request: HttpRequest) -> HttpResponse:
        def act() -> str:
            file_name = request.POST.get("file_name", "")
            trust.remove(file_name, actor=_actor(request))
            return f"Removed {file_name} from the trust store: rosters its CA signed are no longer accepted."

        return _act(request, "removing a CA from the trust store", act)


# --- what the screen shows ----------------------------------------------------------------------------------


def screen(request: HttpRequest) -> dict[str, Any]:
    """Everything the caretaker screen renders, section by section."""
    expiring = {peer.name for peer in services.expiring_soon(EXPIRING_DAYS)}
    peers = services.list_peers()[:LIST_SHOWN]
    for peer in peers:
        peer["expiring"] = peer["name"] in expiring
    return {
        "conditions": activation.conditions(),
        "is_caretaker": activation.is_caretaker(),
        "activation": activation.current(),
        "sentence": ACCEPTANCE_SENTENCE,
        "team_ca": services.ca_description(),
        "key_types": ca.KEY_TYPES,
        "roles": Role.values,
        "peers": peers,
        "expiring_days": EXPIRING_DAYS,
        "codes": list(EnrollmentCode.objects.select_related("peer")[:CODES_SHOWN]),
        "now": timezone.now(),
        "requests": list(
            visible_to(request.user)
            .filter(capability=TEAM_CAPABILITY, state=ConfirmationState.PENDING, expires_at__gt=timezone.now())
            .select_related("principal")
            .order_by("created_at")[:LIST_SHOWN]
        ),
        "roster": roster_state(),
        "conflicts": list(RosterConflict.objects.filter(cleared_at__isnull=True)[:LIST_SHOWN]),
        "trusted": [entry.describe() for entry in trust.trusted()],
    }


def roster_state() -> dict[str, Any]:
    """The published roster as read now: its sequence, CA, expiry, and whether its signatures verify against the
    trust store (with the reason when they do not)."""
    accepted = services.accepted()
    state: dict[str, Any] = {"accepted": accepted, "published": False, "ok": False, "problem": "", "meta": None}
    try:
        published = store.read_published(settings.FORGE_ROSTER_DIR)
    except store.StoreUnreadable as exc:
        state["problem"] = str(exc)
        return state
    if published.empty:
        state["problem"] = "Nothing is published yet: the first issuance (or Sign again) publishes the roster."
        return state
    state["published"] = True
    try:
        checked = roster.verify_roster(
            published.peers_toml,
            published.revoked_toml,
            trusted=trust.trusted_certificates(),
            now=timezone.now(),
        )
    except roster.RosterRefused as exc:
        state["problem"] = f"{exc.reason}: {exc}"
        return state
    state.update(ok=True, meta=checked.meta, peers=len(checked.peers), revoked=len(checked.revoked))
    return state


def expiring_certificates() -> list[Peer]:
    """The dashboard's panel: active certificates that expire within EXPIRING_DAYS."""
    return services.expiring_soon(EXPIRING_DAYS)


# --- the one state change these screens own --------------------------------------------------------------


# --- the public CRL ---------------------------------------------------------------------------------------


def public_crl(request: HttpRequest) -> HttpResponse:
    """GET /crl.pem, without login: the CRL the team CA signed last (DESIGN section 10)."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    return _roster_file("crl.pem")


# --- small pieces -----------------------------------------------------------------------------------------


def _may_act(request: HttpRequest) -> bool:
    if activation.may_act(request.user):
        return True
    refused(request, NOT_CARETAKER)
    return False


def _home() -> HttpResponse:
    return HttpResponseRedirect(reverse("admin:index"))


def _screen() -> HttpResponse:
    return HttpResponseRedirect(reverse("admin:caretaker"))


def _actor(request: HttpRequest) -> str:
    return signed_in(request.user).get_username()


def _act(request: HttpRequest, doing: str, act: Callable[[], str]) -> HttpResponse:
    """Carry out one caretaker action posted from the screen and say how it went, back on the screen."""
    if not _may_act(request):
        return _home()
    try:
        done = act()
    except AuditUnavailable:
        log.exception("%s from the console: the audit row could not be written", doing)
        messages.error(request, NOT_AUDITED)
    except Refusal as refusal:
        refused(request, refusal)
    else:
        messages.success(request, done)
    return _screen()


def _outcome_message(outcome: Outcome, done: str) -> str:
    if not outcome.verified:
        raise Refusal(
            "FORGE_ERR_NOT_VERIFIED",
            f"Not carried out as asked: contract {outcome.memorable_id} is {outcome.state} ({outcome.detail}).",
        )
    return f"{done}: contract {outcome.memorable_id} is verified and the roster is signed again."


def _posted_csr(request: HttpRequest) -> str:
    """The CSR from the form: an uploaded file wins over the pasted text."""
    uploaded = request.FILES.get("csr_file")
    if uploaded is not None and uploaded.size:
        # Cut at the limit: a longer file is no CSR, and the CSR check refuses what is left as unreadable.
        return uploaded.read(MAX_UPLOAD_BYTES).decode("utf-8", "replace")
    return request.POST.get("csr", "")


def _upload(request: HttpRequest, field: str) -> bytes:
    uploaded = request.FILES.get(field)
    if uploaded is None or not uploaded.size:
        raise Refusal("FORGE_ERR_MISSING_FILE", f"Choose the {field} file to upload; nothing was done.", status=400)
    if uploaded.size > MAX_UPLOAD_BYTES:
        raise Refusal("FORGE_ERR_FILE_TOO_LARGE", f"The {field} file is larger than 64 KiB; nothing was done.")
    return uploaded.read()


def _roster_file(file_name: str) -> HttpResponse:
    if file_name not in ROSTER_FILES:
        raise Http404("The roster has peers.toml, revoked.toml and crl.pem.")
    try:
        data = store.read_published(settings.FORGE_ROSTER_DIR).files()[file_name]
    except store.StoreUnreadable as exc:
        return HttpResponse(f"{exc}\n", status=503, content_type="text/plain; charset=utf-8")
    if not data:
        raise Http404("Nothing is published yet.")
    response = HttpResponse(data, content_type=ROSTER_FILES[file_name])
    response["Content-Disposition"] = f'attachment; filename="{file_name}"'
    return response
