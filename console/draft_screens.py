"""The console's working-draft screens (DESIGN section 14): the drafts waiting for review, and one draft's
review with its two decisions.

`/console/drafts/` lists the projects whose draft holds operations of live change groups, with their
groups, operations, conflicts and working revision, and follows the console feed (a client's stage
shows up without a reload). `/console/drafts/<slug>/` is the review: the diff of the accepted file against
the draft, what the draft adds, changes and removes, each live group with its author, rationale and
findings, and the Accept all and Discard forms. Both forms carry the working revision the page showed,
so what is decided is what was reviewed; `console.acceptance` refuses otherwise. These views parse,
call `console.acceptance` and say what happened; they are mounted on the console's site
(`console.site.ConsoleSite`), behind its login.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from confirmations.console import contract_link, preview_sections
from console.acceptance import (
    Accepted,
    DraftDecisionRefused,
    do_accept_draft,
    do_discard_draft,
    review,
    reviewable,
    rows,
    waiting,
)
from forge_core.console import refused
from forge_core.errors import AuditUnavailable
from projects.models import Project
from projects.rights import can_approve
from projects.services import ProjectUnavailable

log = logging.getLogger(__name__)

LIST_SHOWN = 200
NOT_AUDITED = "Nothing was done: the audit log could not be written (see the server log)."


class DraftScreens:
    """The views, bound to the console's admin site (for its login, its frame and its each_context)."""

    def __init__(self, site: admin.AdminSite) -> None:
        self.site = site

    @property
    def urls(self) -> list[URLPattern]:
        wrap = self.site.admin_view
        return [
            path("drafts/", wrap(self.list_view), name="drafts"),
            path("drafts/<slug:slug>/", wrap(self.review_view), name="draft_review"),
            path("drafts/<slug:slug>/accept/", wrap(require_POST(self.accept_view)), name="draft_accept"),
            path("drafts/<slug:slug>/discard/", wrap(require_POST(self.discard_view)), name="draft_discard"),
        ]

    def list_view(self, request: HttpRequest) -> HttpResponse:
        found = list(waiting(request.user)[: LIST_SHOWN + 1])
        context = {
            **self.site.each_context(request),
            "title": "Working drafts",
            "drafts": rows(found[:LIST_SHOWN]),
            "cut": len(found) > LIST_SHOWN,
            "shown": LIST_SHOWN,
        }
        return TemplateResponse(request, "admin/drafts/list.html", context)

    def review_view(self, request: HttpRequest, slug: str) -> HttpResponse:
        try:
            project = reviewable(request.user, slug)
        except DraftDecisionRefused as refusal:
            refused(request, refusal)
            return HttpResponseRedirect(reverse("admin:drafts"))
        context = {
            **self.site.each_context(request),
            "title": f"Working draft of {project.name}",
            "project": project,
            "may_decide": can_approve(request.user, project),
            "unavailable": "",
        }
        try:
            found = review(project)
        except ProjectUnavailable as exc:
            context["unavailable"] = str(exc)
        else:
            diff = preview_sections({"diff": found.diff})[0]
            changed = [(item["element_id"], field_changes(item["fields"])) for item in found.described["changed"]]
            context |= {"review": found, "diff": diff, "changed": changed}
        return TemplateResponse(request, "admin/drafts/review.html", context)

    def accept_view(self, request: HttpRequest, slug: str) -> HttpResponse:
        def accept(project: Project, *, acting_user: User | AnonymousUser, working_revision: int) -> Accepted:
            return do_accept_draft(
                project,
                acting_user=acting_user,
                working_revision=working_revision,
                draft_digest=_reviewed_digest(request),
            )

        return self._decide(request, slug, "accept", accept, accepted_message)

    def discard_view(self, request: HttpRequest, slug: str) -> HttpResponse:
        return self._decide(
            request,
            slug,
            "discard",
            do_discard_draft,
            lambda discarded: format_html(
                "Discarded the working draft of {}: {} change group{} left it, and the accepted file is unchanged.",
                discarded.project,
                discarded.groups,
                "" if discarded.groups == 1 else "s",
            ),
        )

    def _decide(self, request: HttpRequest, slug: str, verb: str, decide, describe) -> HttpResponse:
        page = reverse("admin:draft_review", args=[slug])
        try:
            project = reviewable(request.user, slug)
            reviewed = _reviewed_revision(request)
            done = decide(project, acting_user=request.user, working_revision=reviewed)
        except DraftDecisionRefused as refusal:
            messages.error(request, refusal_message(refusal))
            return HttpResponseRedirect(reverse("admin:drafts") if refusal.status == 404 else page)
        except AuditUnavailable:
            log.exception("%s the working draft of %s from the console: the audit row could not be written", verb, slug)
            messages.error(request, NOT_AUDITED)
            return HttpResponseRedirect(page)
        messages.success(request, describe(done))
        return HttpResponseRedirect(page)


def _reviewed_digest(request: HttpRequest) -> str:
    text = request.POST.get("draft_digest", "")
    if len(text) != 64 or not all(c in "0123456789abcdef" for c in text):
        raise DraftDecisionRefused(
            "bad_request", "The form did not say which file of the draft you reviewed; review it again.", status=400
        )
    return text


def _reviewed_revision(request: HttpRequest) -> int:
    text = request.POST.get("working_revision", "")
    if not text.isdigit() or len(text) > 18:
        raise DraftDecisionRefused(
            "bad_request", "The form did not say which revision of the draft you reviewed; review it again.", status=400
        )
    return int(text)


def field_changes(fields: Mapping[str, Any]) -> list[str]:
    """The fields of an element the draft changes, as "type: INT → DINT" (or just the field's name)."""
    return [
        f"{name}: {_shown(value.get('accepted'))} → {_shown(value.get('draft'))}"
        if isinstance(value, Mapping)
        else name
        for name, value in fields.items()
    ]


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value) if value else "—"


def accepted_message(accepted: Accepted) -> SafeString:
    skipped = (
        format_html(
            " {} conflicting operation{} did not apply and {} left out.",
            accepted.skipped_conflicts,
            "" if accepted.skipped_conflicts == 1 else "s",
            "was" if accepted.skipped_conflicts == 1 else "were",
        )
        if accepted.skipped_conflicts
        else ""
    )
    return format_html(
        "Accepted the working draft of {}: contract {} is verified, and the project is at accepted revision {} "
        "({} group{}, {} operation{}).{}",
        accepted.project,
        contract_link(str(accepted.contract.pk), accepted.contract.memorable_id),
        accepted.accepted_revision,
        accepted.groups,
        "" if accepted.groups == 1 else "s",
        accepted.operations,
        "" if accepted.operations == 1 else "s",
        skipped,
    )


def refusal_message(refusal: DraftDecisionRefused) -> SafeString:
    if refusal.contract is None:
        return format_html("{}", refusal.message)
    return format_html(
        "{} Contract: {}.", refusal.message, contract_link(str(refusal.contract.pk), refusal.contract.memorable_id)
    )
