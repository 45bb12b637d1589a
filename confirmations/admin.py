"""Console screens for pending confirmations and recovery contracts (DESIGN section 14).

Pending confirmations: a live list (a new one appears without a reload; see base_site.html) with a
countdown to expiry, and a page per confirmation with its question, preview and arguments, where an
operator approves (typing the memorable ID when the tool requires it) or denies. Contracts: a list
filtered by state, and a page per contract with its fingerprints and state events, the rollback form
of a VERIFIED contract (typed memorable ID) and the reconciliation form of one in RECONCILIATION, with
what the target looks like now. Every decision goes through the `do_*` functions of
`confirmations.services`, which check the permission and audit; these views parse, call and say what
happened. Reading either screen expires what is due first, so nothing past its time shows as pending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from confirmations import executor, sealing
from confirmations.console import (
    conclusion_choices,
    contract_link,
    countdown,
    decision_message,
    pretty_json,
    preview_sections,
    resolution_message,
    rollback_message,
    with_memorable_id,
)
from confirmations.models import ConfirmationState, Contract, ContractState, PendingConfirmation
from confirmations.services import (
    INTEGRITY_MESSAGE,
    RESOLVE_PERMISSION,
    do_approve_confirmation,
    do_deny_confirmation,
    do_resolve_contract,
    do_rollback_contract,
    expire_due,
    is_authentic,
    may_decide,
    reconciles,
    reconciliation_evidence,
    tampered_refusal,
    visible_to,
)
from forge_core.console import ReadOnlyModelAdmin, refused, signed_in
from forge_core.errors import AuditUnavailable, Refusal

log = logging.getLogger(__name__)

NOT_AUDITED = "Nothing was done: the audit log could not be written (see the server log)."
# The preview's key for the change POU by POU, shown as a view of its own rather than as a section.
CHANGE_VIEW = "change_view"

Done = TypeVar("Done", PendingConfirmation, Contract)
Describe = Callable[[Done], tuple[int, str]]  # the message level and text that say how a decision went


class MemorableIdSearch(admin.ModelAdmin):
    """Search that also finds a record by its memorable ID (or its first words), which is not stored."""

    def get_search_results(self, request: HttpRequest, queryset, search_term: str):
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        matching = with_memorable_id(queryset, search_term)
        if matching:
            found = found | queryset.filter(pk__in=matching)
        return found, may_have_duplicates


@admin.register(PendingConfirmation)
class PendingConfirmationAdmin(MemorableIdSearch, ReadOnlyModelAdmin):
    # What to decide on first (which one, its state, the time left), then who asks for what.
    list_display = (
        "memorable",
        "state",
        "expires",
        "tool",
        "project",
        "principal_name",
        "client_label",
    )
    list_display_links = ("memorable",)
    list_filter = ("state", "tool", "project")
    list_select_related = ("principal",)
    search_fields = ("tool", "project", "label", "client_label", "session_id", "principal__username")
    date_hierarchy = "created_at"

    @admin.display(description="memorable ID")
    def memorable(self, confirmation: PendingConfirmation) -> str:
        return format_html('<strong class="memorable-id">{}</strong>', confirmation.memorable_id)

    @admin.display(description="principal", ordering="principal__username")
    def principal_name(self, confirmation: PendingConfirmation) -> str:
        return confirmation.principal.get_username()

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, confirmation: PendingConfirmation) -> str:
        return countdown(confirmation.expires_at, confirmation.state)

    def get_queryset(self, request: HttpRequest):
        # Only what concerns projects the operator may view: the list, the search and the pages alike.
        return visible_to(request.user).select_related("principal")

    def get_urls(self):
        decide = self.admin_site.admin_view(self.decide_view)
        return [
            path("<path:object_id>/decide/", decide, name="confirmations_pendingconfirmation_decide"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        _expire_due(request)
        return super().changelist_view(request, {"title": "Pending confirmations", **(extra_context or {})})

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        _expire_due(request)
        confirmation = self.get_object(request, unquote(object_id))
        if confirmation is None:
            # A ModelAdmin method the stubs leave out: the admin's own "does not exist" message and redirect.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_view_permission(request, confirmation):
            return HttpResponseRedirect(reverse("admin:index"))
        contract = Contract.objects.filter(confirmation=confirmation).first()
        context = {
            **self.admin_site.each_context(request),
            "title": f"Confirmation {confirmation.memorable_id}",
            "subtitle": confirmation.tool,
            "opts": self.opts,
            "original": confirmation,
            "has_view_permission": True,
            "confirmation": confirmation,
            "pending": confirmation.state == ConfirmationState.PENDING,
            "may_decide": may_decide(request.user, confirmation),
            "typed_id_of_key": bool(confirmation.key_memorable_id),
            "countdown": countdown(confirmation.expires_at, confirmation.state),
            "arguments": pretty_json(confirmation.arguments),
            "preview": preview_sections(
                {key: value for key, value in confirmation.preview.items() if key != CHANGE_VIEW}
            ),
            "change_view": _change_view(confirmation.preview),
            "outcome": pretty_json(confirmation.outcome) if confirmation.outcome else "",
            "contract": contract,
            "contract_link": contract_link(str(contract.pk), contract.memorable_id) if contract else "",
            "tampered": "" if is_authentic(confirmation) else INTEGRITY_MESSAGE,
        }
        return TemplateResponse(request, "admin/confirmations/pendingconfirmation/detail.html", context)

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: decision=approve (with typed_id when required) or decision=deny (with an optional reason)."""
        page = reverse("admin:confirmations_pendingconfirmation_change", args=[object_id])
        if request.method != "POST":
            return HttpResponseRedirect(page)
        decision = request.POST.get("decision")
        if decision not in ("approve", "deny"):
            self.message_user(request, "Choose approve or deny; nothing was decided.", messages.ERROR)
            return HttpResponseRedirect(page)

        def decide() -> PendingConfirmation:
            if decision == "approve":
                typed_id = request.POST.get("typed_id", "")
                return do_approve_confirmation(
                    unquote(object_id), acting_user=signed_in(request.user), typed_id=typed_id
                )
            reason = request.POST.get("reason", "")
            return do_deny_confirmation(unquote(object_id), acting_user=signed_in(request.user), reason=reason)

        return carried_out(
            self,
            request,
            decide,
            decision_message,
            page=page,
            listing=reverse("admin:confirmations_pendingconfirmation_changelist"),
            doing=f"deciding confirmation {object_id}",
        )


@admin.register(Contract)
class ContractAdmin(MemorableIdSearch, ReadOnlyModelAdmin):
    list_display = ("memorable", "label", "state", "detail", "updated_at")
    list_display_links = ("memorable",)
    list_filter = ("state", "capability", "method")
    search_fields = ("label", "detail", "target_digest", "capability")
    date_hierarchy = "created_at"

    @admin.display(description="memorable ID")
    def memorable(self, contract: Contract) -> str:
        return format_html('<strong class="memorable-id">{}</strong>', contract.memorable_id)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return super().changelist_view(request, {"title": "Recovery contracts", **(extra_context or {})})

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/rollback/", wrap(self.rollback_view), name="confirmations_contract_rollback"),
            path("<path:object_id>/resolve/", wrap(self.resolve_view), name="confirmations_contract_resolve"),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        contract = self.get_object(request, unquote(object_id))
        if contract is None:
            # A ModelAdmin method the stubs leave out: the admin's own "does not exist" message and redirect.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_view_permission(request, contract):
            return HttpResponseRedirect(reverse("admin:index"))
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": f"Contract {contract.memorable_id}",
            "subtitle": contract.label,
            "opts": self.opts,
            "original": contract,
            "has_view_permission": True,
            "contract": contract,
            "events": list(contract.events.order_by("version")),
            "may_resolve": request.user.has_perm(RESOLVE_PERMISSION),
            "conclusions": conclusion_choices(contract),
            "reconciles": reconciles(contract),
            "tampered": "",
            "evidence": None,
            "evidence_error": "",
        }
        try:
            executor.verify(contract)
            if contract.state == ContractState.RECONCILIATION:
                context["evidence"] = reconciliation_evidence(contract)
        except sealing.ContractTampered as exc:
            context["tampered"] = tampered_refusal(exc).message
        except executor.ExecutionRefused as exc:
            context["evidence_error"] = exc.message
        if contract.confirmation is not None:
            context["confirmation_url"] = reverse(
                "admin:confirmations_pendingconfirmation_change", args=[contract.confirmation_id]
            )
            # What the approval bound, from the confirmation's sealed preview (none from one edited since).
            if is_authentic(contract.confirmation):
                context["change_view"] = _change_view(contract.confirmation.preview)
        return TemplateResponse(request, "admin/confirmations/contract/detail.html", context)

    def rollback_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST typed_id: roll the contract back."""
        return self._act(
            request,
            object_id,
            lambda: do_rollback_contract(
                unquote(object_id), acting_user=signed_in(request.user), typed_id=request.POST.get("typed_id", "")
            ),
            rollback_message,
        )

    def resolve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST conclusion: applied, not_applied or rolled_back_by_hand."""
        conclusion = request.POST.get("conclusion", "")
        return self._act(
            request,
            object_id,
            lambda: do_resolve_contract(unquote(object_id), acting_user=signed_in(request.user), conclusion=conclusion),
            lambda contract: resolution_message(contract, conclusion),
        )

    def _act(
        self, request: HttpRequest, object_id: str, act: Callable[[], Contract], describe: Describe[Contract]
    ) -> HttpResponse:
        page = reverse("admin:confirmations_contract_change", args=[object_id])
        if request.method != "POST":
            return HttpResponseRedirect(page)
        return carried_out(
            self,
            request,
            act,
            describe,
            page=page,
            listing=reverse("admin:confirmations_contract_changelist"),
            doing=f"acting on contract {object_id}",
        )


def carried_out(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    act: Callable[[], Done],
    describe: Describe[Done],
    *,
    page: str,
    listing: str,
    doing: str,
) -> HttpResponse:
    """Carry out a decision posted from a record's page and say how it went, back on that page: what
    `describe` says of the record afterwards, the refusal's message (to the list when the record does not
    exist), or that nothing was done when the audit row could not be written (the cause to the server log)."""
    try:
        done = act()
    except AuditUnavailable:
        log.exception("%s from the console: the audit row could not be written", doing)
        model_admin.message_user(request, NOT_AUDITED, messages.ERROR)
        return HttpResponseRedirect(page)
    except Refusal as refusal:
        refused(request, refusal)
        return HttpResponseRedirect(listing if refusal.status == 404 else page)
    level, text = describe(done)
    model_admin.message_user(request, text, level)
    return HttpResponseRedirect(page)


def _change_view(preview: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The change POU by POU a project write's preview carries (`projects.review_diff`), sealed with it:
    what the page shows is what the approval binds, not a reading of the file as it is now."""
    found = preview.get(CHANGE_VIEW)
    return found if isinstance(found, Mapping) and isinstance(found.get("units"), list) else None


def _expire_due(request: HttpRequest) -> None:
    try:
        expire_due()
    except AuditUnavailable:
        # The page still shows what is stored; the expiry sweep will try again.
        log.exception("expiring due confirmations: the audit row could not be written")
