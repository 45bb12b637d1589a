"""One decision on one record, asked before it is made: the console's row and detail buttons.

A button on a list row or a record's page either posts at once (a decision that takes nothing away, like
allowing a request) or leads to a page that says what will happen and asks again (a destructive one:
deny, revoke). That page is a plain form, so it works without JavaScript; its POST carries the CSRF token
like every console decision. Either way the POST calls the app's one action function, which writes the
audit row (and audits a refused attempt); a refusal comes back as a message on the page the operator
returns to, never as an error page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import admin, messages
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
