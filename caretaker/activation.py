"""Whether this server acts as the team's caretaker: four conditions, all of which must hold (DESIGN 10).

1. `FORGE_OVERRIDE_SECURITIES=1` when the process started (a deployment decision, never a runtime one);
2. the runtime flag switched on in the console;
3. the sentence `I accept Team-CA responsibility`, typed exactly by the user who switched it on (who and when
   recorded and audited; the activation row is sealed, so a database edit cannot stand in for it);
4. `ca.key` and `ca.crt` present in `FORGE_CA_DIR`, parse-valid and matching.

`conditions()` says, for each, whether it holds and what to do when it does not: the caretaker screen shows
exactly that, and a team tool refused with FORGE_ERR_NOT_CARETAKER names what is missing. Switching the
caretaker on or off changes the tools a client sees, so every open MCP stream hears `tools/list_changed`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import DatabaseError, transaction
from django.utils import timezone

from audit.models import EventKind
from audit.services import record
from caretaker import ca, sealing
from caretaker.models import ACCEPTANCE_SENTENCE, Activation
from forge_core.errors import Refusal
from forge_core.live import notify_console, notify_tools_changed

CARETAKER_PERMISSION = "caretaker.act_as_caretaker"


@dataclass(frozen=True)
class Condition:
    key: str
    title: str
    met: bool
    state: str
    what_to_do: str


def current() -> Activation | None:
    """The activation row if it is still what Forge sealed; None for none, or for one edited behind its back."""
    try:
        row = Activation.objects.filter(pk=1).select_related("accepted_by").first()
    except DatabaseError:
        return None
    if row is None or not sealing.is_sealed(row.seal_parts(), row.seal):
        return None
    return row


def _stamp(path: os.PathLike[str] | str) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


@lru_cache(maxsize=4)
def _ca_problem_for(folder: str, key_stamp: object, cert_stamp: object) -> str:
    try:
        ca.load_ca(Path(folder))
    except ca.CaUnavailable as exc:
        return str(exc)
    return ""


def ca_problem() -> str:
    """Why the team CA cannot be used ("" when it can): parsed again only when either file changed."""
    folder = settings.FORGE_CA_DIR
    key_stamp, cert_stamp = _stamp(folder / "ca.key"), _stamp(folder / "ca.crt")
    if key_stamp is None and cert_stamp is None:
        return f"There is no team CA in {folder} yet: create one on the caretaker screen or with manage.py caretaker_init_ca."
    return _ca_problem_for(str(folder), key_stamp, cert_stamp)


def conditions() -> list[Condition]:
    """The four conditions of activation, each with its state and what to do about it."""
    row = current()
    override = bool(settings.FORGE_OVERRIDE_SECURITIES)
    flag = row is not None and row.enabled
    # Judged on its own, as each condition is, so the screen and a refusal name exactly what is missing.
    accepted = row is not None and row.sentence == ACCEPTANCE_SENTENCE and row.accepted_by_id is not None
    problem = ca_problem()
    who = ""
    if accepted and row is not None and row.accepted_by is not None and row.accepted_at is not None:
        who = f"accepted by {row.accepted_by.get_username()} at {row.accepted_at:%Y-%m-%d %H:%M:%S %Z}"
    return [
        Condition(
            "override",
            "Override mode at start",
            override,
            "FORGE_OVERRIDE_SECURITIES=1" if override else "off",
            "" if override else "Restart the server with FORGE_OVERRIDE_SECURITIES=1 (a deployment decision).",
        ),
        Condition(
            "flag",
            "Runtime flag",
            flag,
            "on" if flag else "off",
            "" if flag else "Switch the caretaker on below (typing the sentence).",
        ),
        Condition(
            "acceptance",
            "Responsibility accepted",
            accepted,
            who or "not accepted",
            "" if accepted else f"Type the sentence '{ACCEPTANCE_SENTENCE}' exactly when you switch the caretaker on.",
        ),
        Condition("ca", "Team CA", not problem, "present and valid" if not problem else "unusable", problem),
    ]


def is_caretaker() -> bool:
    """True only when all four conditions hold."""
    if not settings.FORGE_OVERRIDE_SECURITIES:
        return False
    return all(condition.met for condition in conditions())


def missing() -> list[str]:
    """What to do, condition by condition, for each one that does not hold."""
    return [condition.what_to_do for condition in conditions() if not condition.met]


class NotCaretaker(Refusal):
    def __init__(self, message: str) -> None:
        super().__init__("FORGE_ERR_NOT_CARETAKER", message, status=409, missing=missing())


def require_caretaker(what: str) -> None:
    """Refuse `what` unless this server is the active caretaker, naming each missing condition."""
    if not is_caretaker():
        raise NotCaretaker(f"{what} needs an active team caretaker, and this server is not one: " + " ".join(missing()))


def may_act(user: User | AnonymousUser | AbstractBaseUser) -> bool:
    has_perm = getattr(user, "has_perm", None)
    return bool(user.is_authenticated and user.is_active and has_perm is not None and has_perm(CARETAKER_PERMISSION))


def _require_permission(user: AbstractBaseUser | AnonymousUser) -> None:
    if not may_act(user):
        raise Refusal(
            "FORGE_ERR_PERMISSION_DENIED",
            "Only a caretaker may do this: ask an administrator for the 'Can run the team certificate authority' "
            "permission.",
            status=403,
        )


def _save(row: Activation) -> None:
    row.changed_at = timezone.now()
    row.seal = sealing.seal(row.seal_parts())
    row.save()


def do_activate(user: AbstractBaseUser, typed: str) -> Activation:
    """Switch the caretaker on: the runtime flag and the acceptance, by `user`, who typed `typed`. Refused,
    with nothing changed, unless the sentence is exact; the other conditions are shown, not required here."""
    _require_permission(user)
    if typed != ACCEPTANCE_SENTENCE:
        with transaction.atomic():
            record(
                EventKind.CARETAKER_ACTION,
                tool="caretaker.activate",
                outcome="refused: sentence",
                called_by=user.get_username(),
            )
        raise Refusal(
            "FORGE_ERR_SENTENCE_MISMATCH",
            f"Type the sentence exactly as shown, '{ACCEPTANCE_SENTENCE}', to accept the responsibility.",
            status=400,
        )
    with transaction.atomic():
        row = Activation.objects.select_for_update().filter(pk=1).first() or Activation(pk=1)
        row.enabled, row.accepted_by, row.accepted_at, row.sentence = True, user, timezone.now(), typed  # type: ignore[assignment]
        _save(row)
        record(
            EventKind.CARETAKER_ACTION,
            tool="caretaker.activate",
            arguments={"sentence": typed, "ca_problem": ca_problem()},
            outcome="activated" if is_caretaker() else "flag on; conditions missing",
            called_by=user.get_username(),
        )
        notify_tools_changed()
        notify_console("caretaker")
    return row


def do_deactivate(user: AbstractBaseUser) -> Activation:
    """Switch the caretaker off (one click): the flag and the acceptance are cleared, so switching it on again
    means typing the sentence again."""
    _require_permission(user)
    with transaction.atomic():
        row = Activation.objects.select_for_update().filter(pk=1).first() or Activation(pk=1)
        row.enabled, row.accepted_by, row.accepted_at, row.sentence = False, None, None, ""
        _save(row)
        record(
            EventKind.CARETAKER_ACTION,
            tool="caretaker.deactivate",
            outcome="deactivated",
            called_by=user.get_username(),
        )
        notify_tools_changed()
        notify_console("caretaker")
    return row
