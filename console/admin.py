"""Console screens for client tokens and MCP sessions."""

from __future__ import annotations

from django.contrib import admin, messages

from access.grants import AccessDecisionRefused, do_decide_access, do_revoke_access
from access.models import AccessRequest, ClientToken, McpSession, ServerState
from access.services import do_revoke_token, do_switch_mcp
from forge_core.console import ReadOnlyModelAdmin, refused


@admin.register(ClientToken)
class ClientTokenAdmin(admin.ModelAdmin):
    list_display = ("label", "owner", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("revoked_at", "expires_at")
    list_select_related = ("owner",)
    search_fields = ("label", "prefix", "owner__username")
    readonly_fields = ("label", "owner", "prefix", "digest", "created_at", "expires_at", "revoked_at", "last_used_at")
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False  # tokens are made by create_token (the raw value is shown once)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the audit log refers to tokens

    @admin.action(description="Revoke the selected tokens (refuses their next request, closes their streams)")
    def revoke(self, request, queryset) -> None:
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            do_revoke_token(token, acting_user=request.user.get_username())
            count += 1
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)


@admin.register(McpSession)
class McpSessionAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "token", "transport", "protocol_version", "client_name", "created_at", "ended_at")
    list_filter = ("transport", "protocol_version", "ended_at")
    list_select_related = ("token",)
    search_fields = ("id", "token__label", "token__owner__username")


@admin.register(ServerState)
class ServerStateAdmin(admin.ModelAdmin):
    """The master switch. Off: only server_info and session.status answer any client."""

    list_display = ("__str__", "changed_by", "changed_at")
    actions = ["switch_on", "switch_off"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # only through the actions below, which audit the switch

    def get_queryset(self, request):
        ServerState.objects.get_or_create(pk=1)
        return super().get_queryset(request)

    @admin.action(description="Switch MCP on")
    def switch_on(self, request, queryset) -> None:
        self._switch(request, True)

    @admin.action(description="Switch MCP off (ends every client's access; open streams are told)")
    def switch_off(self, request, queryset) -> None:
        self._switch(request, False)

    def _switch(self, request, enabled: bool) -> None:
        changed = do_switch_mcp(enabled, acting_user=request.user.get_username())
        word = "on" if enabled else "off"
        self.message_user(request, f"MCP switched {word}." if changed else f"MCP was already {word}.", messages.SUCCESS)


@admin.register(AccessRequest)
class AccessRequestAdmin(ReadOnlyModelAdmin):
    """Access requests (gate 2): allow, deny or revoke. Each decision is audited with the deciding user."""

    list_display = ("project", "principal", "client_label", "state", "session_id", "created_at", "decided_by")
    list_filter = ("state", "project")
    list_select_related = ("project", "token__owner")
    search_fields = ("project__slug", "token__label", "token__owner__username", "session__id")
    actions = ["allow", "deny", "revoke"]

    @admin.display(description="principal", ordering="token__owner__username")
    def principal(self, request: AccessRequest) -> str:
        return request.token.owner.get_username()

    @admin.display(description="client")
    def client_label(self, request: AccessRequest) -> str:
        return request.token.label

    def get_actions(self, request):
        # ReadOnlyModelAdmin denies change permission, which hides actions; decisions check grant_access
        # themselves (per project), so they are offered to every console user.
        # _get_base_actions is ModelAdmin's own (private, so django-stubs leaves it out).
        return {name: (func, name, desc) for func, name, desc in self._get_base_actions()}  # type: ignore[attr-defined]

    @admin.action(description="Allow the selected pending requests")
    def allow(self, request, queryset) -> None:
        self._decide(request, queryset, lambda pk: do_decide_access(pk, allow=True, user=request.user))

    @admin.action(description="Deny the selected pending requests")
    def deny(self, request, queryset) -> None:
        self._decide(request, queryset, lambda pk: do_decide_access(pk, allow=False, user=request.user))

    @admin.action(description="Revoke the selected allowed grants")
    def revoke(self, request, queryset) -> None:
        self._decide(request, queryset, lambda pk: do_revoke_access(pk, user=request.user))

    def _decide(self, request, queryset, decide) -> None:
        done = 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                decide(pk)
                done += 1
            except AccessDecisionRefused as refusal:
                refused(request, refusal, about=f"Request {pk}")
        if done:
            self.message_user(request, f"Decided {done} request(s).", messages.SUCCESS)
