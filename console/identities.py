"""Identities managed in the console: client tokens, operator tokens, runtime connector tokens, and which
projects each client principal may see.

A token is made on a form (label, holder or project, and for a client token an expiry), through the one
action function of its kind (`access.principals.do_create_token_for`,
`console.operator_tokens.do_create_operator_token`, `access.runtime.do_create_runtime_token`), which stores
only its digest and audits it. The raw value is shown once, in the answer to that POST (never cached, never
stored, never shown again), with a Copy button and how to use it: for a client token the dashboard's client
configurations filled in with it, for a runtime token a curl that posts a snapshot to its project. A
runtime token is bound to a project the operator may grant access to. Revoking asks first
(`console.confirmed`) and goes through the kind's revoke function. Only operators make or revoke tokens; a
refused attempt is audited.

The principals screen lists the users client tokens act for, with a page per principal of every project
and whether it may see it (`view_project`, a guardian object permission), set through
`access.principals.do_set_project_visibility`. Nothing here is a form with a Save button over fields that
cannot change: records are read on pages without one, and the forms here change what they show.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from guardian.shortcuts import get_objects_for_user

from access.models import BearerToken, ClientPrincipal, ClientToken, RuntimeToken
from access.principals import (
    do_create_token_for,
    do_set_project_visibility,
    sees_every_project,
    visible_project_ids,
    with_visibility,
)
from access.runtime import RuntimeTokenNotAllowed, do_create_runtime_token, do_revoke_runtime_token
from access.services import do_revoke_token, record_token_event
from audit.models import EventKind
from audit.services import record
from console.columns import ago, token_standing
from console.confirmed import DecidedOnRecords, Decision, decide, decide_each
from console.models import OperatorToken
from console.operator_tokens import NotAnOperator, do_create_operator_token, do_revoke_operator_token
from console.site import TOKEN_PLACEHOLDER, ClientConfiguration, shown_configurations
from forge_core.console import ReadOnlyModelAdmin, is_operator, refused, signed_in
from forge_core.errors import Refusal
from projects.models import Project
from projects.rights import can_grant


class TokenRefused(Refusal):
    code, status = "FORGE_ERR_TOKEN_REFUSED", 409

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)


OPERATOR_ANSWER = "_forge_asked_by_operator"  # where a request keeps the answer (HttpRequest has no such field)


def asked_by_operator(request: HttpRequest) -> bool:
    """Whether the request comes from an operator, asked of the database once per request: the side menu asks
    it of every token list, and a list asks it of every row."""
    known = getattr(request, OPERATOR_ANSWER, None)
    if known is None:
        known = is_operator(request.user)
        setattr(request, OPERATOR_ANSWER, known)
    return known


def label_field(help_text: str, when_missing: str) -> forms.CharField:
    """A token's label (stripped; one of blanks only is missing)."""
    return forms.CharField(
        max_length=200,
        help_text=help_text,
        error_messages={"required": f"{when_missing}: the label is what the audit log shows."},
    )


class ClientTokenForm(forms.Form):
    label = label_field("The client's name, shown in the audit log (e.g. claude-desktop).", "Name the client")
    owner = forms.CharField(
        max_length=150, label="Owner principal", help_text="The user the client acts for; its project rights apply."
    )
    create_owner = forms.BooleanField(
        required=False, label="Create the principal", help_text="Make this user if there is none (it cannot sign in)."
    )
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
        help_text="Leave empty for a token that does not expire (revoke it when it is no longer needed).",
    )

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data["expires_at"]
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("Pick a time in the future, or leave it empty.")
        return expires_at


class OperatorTokenForm(forms.Form):
    label = label_field("What the token is for (e.g. nightly report).", "Say what the token is for")
    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True, is_staff=True).order_by("username"),
        label="Operator",
        help_text="The operator it acts as, with that operator's permissions.",
    )


class TokenAdmin(DecidedOnRecords, ReadOnlyModelAdmin):
    """A token list: made on a form and shown once, revoked from a row or its page after a question; read
    otherwise. Subclasses name the form and the kind's action functions."""

    form_class: ClassVar[type[forms.Form]]
    holder_label: ClassVar[str]
    decisions_column = "revoke"
    actions = ["revoke_selected"]

    class Media:
        css = {"all": ("console/identities.css",)}  # the rows' Revoke… buttons are red, as on the record's page

    def create(self, request: HttpRequest, form: forms.Form) -> tuple[BearerToken, str]:
        raise NotImplementedError

    def revoke(self, token: Any, acting_user: str) -> None:
        raise NotImplementedError

    def usage(self, request: HttpRequest, token: Any, raw: str) -> dict[str, Any]:
        """What the page that shows a new token says about using it (template context)."""
        return {}

    def token_form(self, request: HttpRequest, initial: dict[str, Any]) -> forms.Form:
        return self.form_class(request.POST or None, initial=initial)

    def facts(self, token: Any) -> list[tuple[str, object]]:
        """What the page that asks before revoking says about the token."""
        return [
            ("Label", token.label),
            (self.holder_label, token.holder.get_username()),
            ("Starts with", f"{token.prefix}…"),
            ("Created", token.created_at),
        ]

    def record_refused_creation(self, request: HttpRequest, outcome: str, *, project: str = "") -> None:
        """The audit row of an attempt to make a token of this kind that was refused before anything was made."""
        named = {"project": project} if project else {}
        record(
            EventKind.TOKEN_CREATED,
            arguments={"kind": self.model.kind, "label": request.POST.get("label", ""), **named},
            outcome=outcome,
            called_by=request.user.get_username(),
            project=project,
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return asked_by_operator(request)

    def _name(self, view: str) -> str:
        return f"{self.model._meta.app_label}_{self.model._meta.model_name}_{view}"

    def _url(self, view: str) -> str:
        return f"admin:{self._name(view)}"

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [path("<int:pk>/revoke/", wrap(self.revoke_view), name=self._name("revoke")), *super().get_urls()]

    @admin.display(description="standing", ordering="revoked_at")
    def standing(self, token: BearerToken) -> str:
        return token_standing(token)

    @admin.display(description="created", ordering="created_at")
    def created(self, token: BearerToken) -> str:
        return ago(token.created_at)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, token: ClientToken | RuntimeToken) -> str:
        return ago(token.last_used_at, empty="never")

    def decisions_for(self, request: HttpRequest, token: BearerToken) -> list[tuple[Decision, str]]:
        if token.revoked_at is not None or not asked_by_operator(request):
            return []
        return [(self.revoke_decision(), reverse(self._url("revoke"), args=[token.pk]))]

    def revoke_decision(self) -> Decision:
        return Decision(
            "revoke",
            "Revoke",
            "Revoke {record}? Its next request is refused at once; this cannot be undone.",
            "Revoked {record}.",
            destructive=True,
            act=self._revoke_by_pk,
        )

    @admin.action(description="Revoke the selected tokens (cannot be undone)")
    def revoke_selected(self, request, queryset) -> None:
        pks = queryset.filter(revoked_at__isnull=True).values_list("pk", flat=True)
        decide_each(self, request, pks, self.revoke_decision(), noun="Token", done="Revoked {count} token(s).")

    def _revoke_by_pk(self, pk: int, request: HttpRequest) -> None:
        token = self.model._default_manager.get(pk=pk)
        acting_user = request.user.get_username()
        if not asked_by_operator(request):
            record_token_event(
                EventKind.TOKEN_REVOKED, token, outcome="refused: not an operator", called_by=acting_user
            )
            raise TokenRefused("Only operators revoke tokens; nothing was changed.")
        if token.revoked_at is not None:
            raise TokenRefused("This token is revoked already; nothing was changed.")
        self.revoke(token, acting_user)

    def revoke_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        token = self.model._default_manager.filter(pk=pk).first()
        if token is None or not self.has_view_permission(request):
            raise Http404("No such token.")
        fallback = reverse(self._url("changelist"))
        return decide(self, request, token, self.revoke_decision(), fallback=fallback, facts=self.facts(token))

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict | None = None) -> HttpResponse:
        if not self.has_add_permission(request):
            if request.method == "POST":
                self.record_refused_creation(request, "refused: not an operator")
            raise PermissionDenied("Only operators make tokens.")
        # A link may fill fields in (the principal's page names the owner); the operator still submits the form.
        initial = {name: value for name, value in request.GET.items() if name in self.form_class.base_fields}
        form = self.token_form(request, initial)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form}
        if request.method == "POST" and form.is_valid():
            try:
                token, raw = self.create(request, form)
            except Refusal as refusal:
                form.add_error(None, refusal.message)
            else:
                context |= {
                    "title": f"{self.model._meta.verbose_name.capitalize()} created",
                    "token": token,
                    "raw": raw,
                }
                shown = TemplateResponse(
                    request, "admin/identities/token_created.html", context | self.usage(request, token, raw)
                )
                add_never_cache_headers(shown.render())  # the raw value must not stay in any cache
                return shown
        context["title"] = f"Add {self.model._meta.verbose_name}"
        return TemplateResponse(request, "admin/identities/token_form.html", context)


@admin.register(ClientToken)
class ClientTokenAdmin(TokenAdmin):
    form_class = ClientTokenForm
    holder_label = "Owner principal"
    list_display = ("label", "owner", "prefix", "standing", "last_used")
    list_filter = ("revoked_at", "expires_at")
    list_select_related = ("owner",)
    search_fields = ("label", "prefix", "owner__username")
    exclude = ("digest",)

    def create(self, request: HttpRequest, form: forms.Form) -> tuple[BearerToken, str]:
        data = form.cleaned_data
        new = do_create_token_for(
            data["owner"].strip(),
            create_owner=data["create_owner"],
            label=data["label"],
            expires_at=data["expires_at"],
            acting_user=request.user.get_username(),
        )
        return new.token, new.raw

    def revoke(self, token: ClientToken, acting_user: str) -> None:
        do_revoke_token(token, acting_user=acting_user)

    def usage(self, request: HttpRequest, token: ClientToken, raw: str) -> dict[str, Any]:
        # The dashboard's configurations, with this token where they show the placeholder.
        configurations = [
            replace(shown, text=shown.text.replace(TOKEN_PLACEHOLDER, raw)) for shown in shown_configurations(request)
        ]
        return {"configurations": configurations}


@admin.register(OperatorToken)
class OperatorTokenAdmin(TokenAdmin):
    form_class = OperatorTokenForm
    holder_label = "Operator"
    list_display = ("label", "user", "prefix", "standing", "created")
    list_filter = ("revoked_at",)
    list_select_related = ("user",)
    search_fields = ("label", "prefix", "user__username")
    exclude = ("digest",)

    def create(self, request: HttpRequest, form: forms.Form) -> tuple[BearerToken, str]:
        try:
            new = do_create_operator_token(
                form.cleaned_data["user"], form.cleaned_data["label"], acting_user=request.user.get_username()
            )
        except NotAnOperator as refusal:
            raise TokenRefused(str(refusal)) from refusal
        return new.token, new.raw

    def revoke(self, token: OperatorToken, acting_user: str) -> None:
        do_revoke_operator_token(token, acting_user=acting_user)

    def usage(self, request: HttpRequest, token: OperatorToken, raw: str) -> dict[str, Any]:
        return {"api_url": request.build_absolute_uri("/api/")}


# --- runtime connector tokens ------------------------------------------------------------------------------


def grantable_projects(user: Any) -> QuerySet[Project]:
    """The projects `user` may grant access to (`grant_access` on the model or on the project), in slug order."""
    return get_objects_for_user(user, "projects.grant_access", klass=Project.objects.order_by("slug"))


class RuntimeTokenForm(forms.Form):
    label = label_field(
        "The connector's name: the PLC or gateway it reads (e.g. line-3-gateway).", "Name the connector"
    )
    project = forms.ModelChoiceField(
        queryset=Project.objects.all(),
        help_text="The one project it posts snapshots to. Only projects you may grant access to are offered.",
        error_messages={
            "required": "Pick the project the connector reads.",
            "invalid_choice": "There is no such project; pick one of those offered.",
        },
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["project"]
        assert isinstance(field, forms.ModelChoiceField)
        # Offered: the projects this operator may grant access to. Any project is accepted, so that one posted
        # from outside the list reaches the admin's create(), which refuses it and audits the attempt.
        offered = [(project.pk, str(project)) for project in grantable_projects(user)]
        field.widget.choices = [("", field.empty_label), *offered]
        if not offered:
            field.help_text = "You may grant access to no project, so there is none to bind a runtime token to."


@admin.register(RuntimeToken)
class RuntimeTokenAdmin(TokenAdmin):
    """Runtime connector tokens: each posts the runtime snapshots of the one project it was bound to when
    made (`access.runtime`); its holder is the operator who made it and answers for the connector."""

    form_class = RuntimeTokenForm
    holder_label = "Made by"
    # No prefix column: with it the revoke buttons were cut off at 1366 px; the search finds a token by it.
    list_display = ("label", "bound_to", "made_by", "standing", "created", "last_used")
    list_filter = ("revoked_at", "project")
    list_select_related = ("project", "created_by")
    search_fields = ("label", "prefix", "project__slug", "created_by__username")
    exclude = ("digest",)
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")

    @admin.display(description="project", ordering="project__slug")
    def bound_to(self, token: RuntimeToken) -> str:
        return token.project.slug

    @admin.display(description="made by", ordering="created_by__username")
    def made_by(self, token: RuntimeToken) -> str:
        return token.created_by.get_username()

    def token_form(self, request: HttpRequest, initial: dict[str, Any]) -> forms.Form:
        return RuntimeTokenForm(request.POST or None, initial=initial, user=request.user)

    def facts(self, token: RuntimeToken) -> list[tuple[str, object]]:
        return [*super().facts(token), ("Project", token.project.slug), ("Last used", token.last_used_at or "never")]

    def create(self, request: HttpRequest, form: forms.Form) -> tuple[BearerToken, str]:
        project: Project = form.cleaned_data["project"]
        try:
            new = do_create_runtime_token(
                project,
                form.cleaned_data["label"],
                created_by=signed_in(request.user),
                acting_user=request.user.get_username(),
            )
        except RuntimeTokenNotAllowed as refusal:
            raise TokenRefused(
                "You may bind a runtime token only to a project you may grant access to; pick one of those offered."
            ) from refusal
        return new.token, new.raw

    def revoke(self, token: RuntimeToken, acting_user: str) -> None:
        do_revoke_runtime_token(token, acting_user=acting_user)

    def usage(self, request: HttpRequest, token: RuntimeToken, raw: str) -> dict[str, Any]:
        # A snapshot as the endpoint takes it (access.runtime_api), taken now: pasted into a terminal, it posts.
        url = request.build_absolute_uri(reverse("access:runtime-snapshots", args=[token.project.slug]))
        body = {
            "taken_at": timezone.localtime().isoformat(timespec="seconds"),
            "values": [{"variable": "Main.Speed", "value": 1450, "forced": False}],
        }
        curl = (
            f"curl -X POST {url} \\\n  -H 'Authorization: Bearer {raw}' \\\n"
            f"  -H 'Content-Type: application/json' \\\n  -d '{json.dumps(body)}'"
        )
        where = "a terminal: posts one snapshot (name a variable of the project the connector reads)"
        return {
            "configurations": [ClientConfiguration(key="runtime_curl", client="curl", where=where, text=curl)],
            "configurations_title": "Posting a snapshot",
            "bound_to": token.project,
        }


# --- principals ------------------------------------------------------------------------------------------


@admin.register(ClientPrincipal)
class ClientPrincipalAdmin(ReadOnlyModelAdmin):
    """The users client tokens act for, and on each one's page the projects it may see."""

    list_display = ("username", "active_tokens", "projects")
    search_fields = ("username",)
    change_form_template = "admin/identities/principal.html"

    def get_queryset(self, request: HttpRequest):
        owners = ClientToken.objects.values("owner")
        live = ClientToken.objects.filter(owner=OuterRef("pk"), revoked_at__isnull=True).order_by().values("owner")
        principals = super().get_queryset(request).filter(pk__in=owners).order_by("username")
        return with_visibility(principals).annotate(
            tokens=Coalesce(Subquery(live.annotate(n=Count("pk")).values("n")), 0)
        )

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return asked_by_operator(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return asked_by_operator(request)

    @admin.display(description="tokens not revoked", ordering="tokens")
    def active_tokens(self, principal: ClientPrincipal) -> int:
        return principal.tokens  # type: ignore[attr-defined]

    @admin.display(description="projects it may see", ordering="projects_seen")
    def projects(self, principal: ClientPrincipal) -> str:
        return "every project" if principal.every_project else str(principal.projects_seen)  # type: ignore[attr-defined]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None):
        principal = self.get_object(request, unquote(object_id))
        if principal is None or not self.has_view_permission(request, principal):
            raise Http404("No such principal.")
        if request.method == "POST":
            self._set_visibility(request, principal)
            return HttpResponseRedirect(request.get_full_path())
        seen = visible_project_ids(principal)
        rows = [
            {"project": project, "visible": project.pk in seen, "may_set": can_grant(request.user, project)}
            for project in Project.objects.order_by("slug")
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Projects {principal.get_username()} may see",
            "principal": principal,
            "every_project": sees_every_project(principal),
            "rows": rows,
            "tokens": ClientToken.objects.filter(owner=principal).order_by("-created_at"),
        }
        return TemplateResponse(request, self.change_form_template, context)

    def _set_visibility(self, request: HttpRequest, principal: ClientPrincipal) -> None:
        """The form lists every project it shows (`shown`) and ticks those to be visible; each one whose state
        changes goes through the action function, which checks and audits it."""
        wanted = set(request.POST.getlist("visible"))
        changed = 0
        for project in Project.objects.filter(slug__in=request.POST.getlist("shown")).order_by("slug"):
            try:
                changed += do_set_project_visibility(principal, project, project.slug in wanted, user=request.user)
            except Refusal as refusal:
                refused(request, refusal, about=project.slug)
        if changed:
            self.message_user(
                request, f"Changed what {principal.get_username()} may see on {changed} project(s).", messages.SUCCESS
            )
        else:
            self.message_user(request, "Nothing changed.", messages.INFO)
