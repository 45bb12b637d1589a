"""The console login's guard and its record: every login, failed login, lockout and logout is an audit row.

django-axes counts failed logins per user name and per client address and refuses a name or address
that failed `AXES_FAILURE_LIMIT` times (settings.py, FORGE_LOGIN_*), right password or not. This module
adds what the console needs around it: Django's auth signals append one `console_login` audit row per
attempt (the name tried and the client address, never the password; `called_by` is the name), a
locked-out login gets a page that says why and how to get back in instead of a bare error, and a login
or logout whose audit row cannot be written does not happen (fail closed), like every other action.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from axes.helpers import get_client_ip_address, get_client_username
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from audit.models import EventKind
from audit.services import record
from forge_core.errors import AuditUnavailable

log = logging.getLogger(__name__)

LOCKED_OUT_STATUS = 429


class LoginOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"
    LOCKED_OUT = "locked_out"
    LOGGED_OUT = "logged_out"


def record_console_login(request: HttpRequest, outcome: LoginOutcome, *, username: str) -> None:
    """Append the audit row of one login attempt or logout, in the caller's transaction."""
    address = get_client_ip_address(request) or ""
    record(
        EventKind.CONSOLE_LOGIN,
        arguments={"username": username, "address": address},
        outcome=outcome,
        called_by=username,
    )


# Receivers of Django's auth signals, connected in ConsoleConfig.ready(). A login without a request
# (`authenticate()` called by code, not by a person at the login page) is nobody's attempt: not recorded.


def on_logged_in(sender: Any, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any) -> None:
    if request is not None:
        record_console_login(request, LoginOutcome.OK, username=user.get_username())


def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    if request is None:
        return
    # axes' own receiver of this signal runs first (its app comes before console in INSTALLED_APPS) and
    # marks the request when this failure locked the name or address out, or when it already was.
    outcome = LoginOutcome.LOCKED_OUT if getattr(request, "axes_locked_out", False) else LoginOutcome.FAILED
    record_console_login(request, outcome, username=get_client_username(request, credentials) or "")


def on_logged_out(sender: Any, request: HttpRequest | None, user: AbstractBaseUser | None, **kwargs: Any) -> None:
    if request is not None and user is not None:
        record_console_login(request, LoginOutcome.LOGGED_OUT, username=user.get_username())


def lockout_minutes() -> int:
    return max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))


def lockout_message(username: str, address: str) -> str:
    minutes = lockout_minutes()
    commands = [f"python manage.py axes_reset_username {username}"] if username else []
    commands += [f"python manage.py axes_reset_ip {address}"] if address else []
    unlock = " or ".join(commands) or "python manage.py axes_reset"
    return (
        f"Too many failed logins for this name or address; try again in {minutes} minute{'s' if minutes != 1 else ''}, "
        f"or ask another operator to unlock it ({unlock})."
    )


def locked_out(request: HttpRequest, *args: Any) -> HttpResponse:
    """The answer to a login refused for a lockout (axes' AXES_LOCKOUT_CALLABLE): the reason and the way back,
    429. axes passes the refused response and the credentials, in an order that differs between its sync
    and async middleware, so neither is used: the name comes from the posted form, as axes read it."""
    username = get_client_username(request) or ""
    address = get_client_ip_address(request) or ""
    context = {
        **admin.site.each_context(request),
        "title": "Login refused",
        "message": lockout_message(username, address),
        "login_url": reverse("admin:login"),
    }
    # Rendered here: axes' middleware puts this in place of the view's response, after template responses
    # have been rendered.
    return render(request, "admin/login_locked_out.html", context, status=LOCKED_OUT_STATUS)


def login_failing_closed(request: HttpRequest, view: Callable[[], HttpResponse]) -> HttpResponse:
    """Run the console's login view; when the audit row of a login cannot be written, nobody is signed in.

    Django's login() has stored the user in the session before it sends the signal whose receiver failed,
    so the session is flushed (its row deleted) and the page says what happened."""
    try:
        return view()
    except AuditUnavailable:
        log.exception("console login: the audit row could not be written, so nobody was signed in")
        request.session.flush()
        request.user = AnonymousUser()
        messages.error(request, "Nobody was signed in: the audit log could not be written (see the server log).")
        return HttpResponseRedirect(reverse("admin:login"))


def logout_failing_closed(request: HttpRequest, view: Callable[[], HttpResponse]) -> HttpResponse:
    """Run the console's logout view; when its audit row cannot be written, the session stays signed in
    (Django's logout() sends the signal before it flushes the session)."""
    try:
        return view()
    except AuditUnavailable:
        log.exception("console logout: the audit row could not be written, so the session was not ended")
        messages.error(request, "You are still signed in: the audit log could not be written (see the server log).")
        return HttpResponseRedirect(reverse("admin:index"))
