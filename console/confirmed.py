"""One decision on one record, asked before it is made: the console's row and detail buttons.

A button on a list row or a record's page either posts at once (a decision that takes nothing away, like
allowing a request) or leads to a page that says what will happen and asks again (a destructive one:
deny, revoke). That page is a plain form, so it works without JavaScript; its POST carries the CSRF token
like every console decision. Either way the POST calls the app's one action function, which writes the
audit row (and audits a refused attempt); a refusal comes back as a message on the page the operator
returns to, never as an error page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.safestring import SafeString

from forge_core.console import refused
from forge_core.errors import Refusal


@dataclass(frozen=True)
class Decision:
    """A decision an operator makes on one record: its button, the question asked before a destructive one,
    and what is said once it is done. `act(record_pk, request)` is the app's action function."""

    name: str
    button: str
    question: str
    done: str
    destructive: bool
    act: Callable[[int, HttpRequest], object]


def back_to(request: HttpRequest, fallback: str) -> str:
    """Where the operator goes after deciding: the page the button was on (`next`), if it is the console's."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


def decide(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    record: Model,
    decision: Decision,
    *,
    fallback: str,
    facts: list[tuple[str, object]],
) -> HttpResponse:
    """GET asks (the confirmation page, listing `facts` about the record); POST decides and goes back."""
    back = back_to(request, fallback)
    if request.method != "POST":
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.model._meta,
            "title": decision.button,
            "record": record,
            "decision": decision,
            "question": decision.question.format(record=record),
            "facts": facts,
            "back": back,
        }
        return TemplateResponse(request, "admin/access/confirm_decision.html", context)
    try:
        decision.act(record.pk, request)
    except Refusal as refusal:
        refused(request, refusal, about=str(record))
    else:
        model_admin.message_user(request, decision.done.format(record=record), messages.SUCCESS)
    return HttpResponseRedirect(back)


def decide_each(
    model_admin: admin.ModelAdmin, request: HttpRequest, pks: Iterable[int], decision: Decision, *, noun: str, done: str
) -> None:
    """A bulk action: the decision on each record in turn, a refusal of one (said, and audited by the action
    function) leaving the others to go on; `done` says how many were decided (`{count}`)."""
    count = 0
    for pk in pks:
        try:
            decision.act(pk, request)
            count += 1
        except Refusal as refusal:
            refused(request, refusal, about=f"{noun} {pk}")
    if count:
        model_admin.message_user(request, done.format(count=count), messages.SUCCESS)


def buttons(decisions: list[tuple[Decision, str]], *, back: str) -> SafeString:
    """A row's decision buttons inside the list's own form (rows cannot hold forms of their own): one that
    takes nothing away posts that form, with its CSRF token, straight to the decision's address; a
    destructive one is a link to the page that asks first."""
    query = urlencode({"next": back})
    return format_html_join(
        " ",
        "{}",
        (
            (
                format_html('<a class="button danger" href="{}?{}">{}…</a>', url, query, decision.button)
                if decision.destructive
                else format_html(
                    '<button type="submit" class="button default" formmethod="post" formaction="{}?{}">{}</button>',
                    url,
                    query,
                    decision.button,
                ),
            )
            for decision, url in decisions
        ),
    )


class DecidedOnRecords(admin.ModelAdmin):
    """A list whose rows, and whose records' read-only pages, carry the decisions `decisions_for` offers."""

    change_form_template = "admin/access/record_with_decisions.html"
    decisions_column = "decide"

    def decisions_for(self, request: HttpRequest, record: Any) -> list[tuple[Decision, str]]:
        """The decisions this user may make on the record now, each with its address."""
        raise NotImplementedError

    def get_list_display(self, request: HttpRequest):
        # The row buttons need the request (who decides, which page to come back to); the admin instance is
        # shared by every request, so the column is made per request rather than kept on it.
        @admin.display(description=self.decisions_column)
        def decisions(record: Any) -> str:
            return buttons(self.decisions_for(request, record), back=request.get_full_path())

        return (*super().get_list_display(request), decisions)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None):
        record = self.get_object(request, unquote(object_id))
        decisions = self.decisions_for(request, record) if record is not None else []
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "decisions": decisions})
