"""How the console shows confirmations and contracts: previews, countdowns, outcomes, memorable-ID search.

The screens themselves are `confirmations.admin`; this module holds what they render, as plain
functions the tests call directly. A preview is whatever the tool that asked put in it (a unified diff,
the element ids it changes, the findings it adds or clears, the result it expects), so it is rendered
generically, by the shape of each value, with the diff's lines marked as added or removed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from caretaker.fingerprint import memorable_id, normalize_typed_id
from confirmations.models import ConfirmationState, Contract, ContractState, PendingConfirmation
from confirmations.services import conclusions, reconciles

C = ConfirmationState
# Shown first, in this order; any other key of a preview follows in its own order.
PREVIEW_ORDER = ("diff", "changed_ids", "new_findings", "resolved_findings")
EXPIRED = mark_safe('<span class="countdown expired">expired</span>')
NOT_COUNTING = mark_safe('<span class="quiet">—</span>')
PREVIEW_TITLES = {
    "diff": "What changes in the file",
    "changed_ids": "Elements it changes",
    "new_findings": "Findings it adds",
    "resolved_findings": "Findings it clears",
    "result_fingerprint": "SHA-256 of the file it writes",
}


@dataclass(frozen=True)
class PreviewSection:
    key: str
    title: str
    kind: str  # "diff", "text", "items", "table", "json" or "value"
    value: Any


# What the preview carries for the client or for the diff's own rendering, not as sections of their own.
PREVIEW_HIDDEN = frozenset({"result", "diff_truncated"})


def preview_sections(preview: Mapping[str, Any]) -> list[PreviewSection]:
    """The preview as sections to render, each by the shape of its value."""
    shown = [key for key in preview if key not in PREVIEW_HIDDEN]
    keys = [key for key in PREVIEW_ORDER if key in shown] + [key for key in shown if key not in PREVIEW_ORDER]
    sections = [_section(key, preview[key]) for key in keys]
    if preview.get("diff_truncated"):
        sections = [
            PreviewSection(s.key, f"{s.title} (cut: the change is longer than shown)", s.kind, s.value)
            if s.key == "diff"
            else s
            for s in sections
        ]
    return sections


def _section(key: str, value: Any) -> PreviewSection:
    title = PREVIEW_TITLES.get(key, key.replace("_", " ").capitalize())
    if isinstance(value, str) and (key == "diff" or value.startswith("--- ")):
        return PreviewSection(key, title, "diff", [(_diff_class(line), line) for line in value.splitlines()])
    if isinstance(value, str) and "\n" in value:
        return PreviewSection(key, title, "text", value)
    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        columns = list(dict.fromkeys(column for item in value for column in item))
        rows = [[_cell(item.get(column, "")) for column in columns] for item in value]
        return PreviewSection(key, title, "table", {"columns": columns, "rows": rows})
    if isinstance(value, list) and all(not isinstance(item, Mapping | list) for item in value):
        return PreviewSection(key, title, "items", [str(item) for item in value])
    if isinstance(value, Mapping | list):
        return PreviewSection(key, title, "json", pretty_json(value))
    if isinstance(value, bool):
        return PreviewSection(key, title, "value", "yes" if value else "no")
    return PreviewSection(key, title, "value", "—" if value is None else str(value))


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "added", "-": "removed"}.get(line[:1], "")


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def countdown(expires_at: datetime, state: str, *, now: datetime | None = None) -> SafeString:
    """The time left to decide, counted down in the page (base_site.html) from the seconds left when it was
    rendered, so the browser's clock does not matter; "expired" once past, and a dash once decided."""
    left = max(0, int((expires_at - (now or timezone.now())).total_seconds()))
    if state == C.EXPIRED or (state == C.PENDING and left == 0):
        return EXPIRED
    if state != C.PENDING:
        return NOT_COUNTING
    return format_html(
        '<time class="countdown" data-countdown-seconds="{}" datetime="{}">{}</time>',
        left,
        expires_at.isoformat(),
        f"{left // 60}:{left % 60:02d} left",
    )


def with_memorable_id(queryset: QuerySet, term: str) -> list[Any]:
    """The ids in `queryset` whose memorable ID is, or starts with, the words typed (two words or more).

    Memorable IDs are derived from the id and not stored, so this scans the ids; it runs only for a
    term shaped like one, and the scan hashes a few short strings per row."""
    words = normalize_typed_id(term).split("-")
    if len(words) < 2 or len(words) > 4 or not all(word.isalpha() for word in words):
        return []
    typed = "-".join(words)
    full = len(words) == 4
    return [
        pk
        for pk in queryset.values_list("pk", flat=True).iterator(chunk_size=2000)
        if (memorable_id(str(pk)) == typed if full else memorable_id(str(pk)).startswith(typed + "-"))
    ]


def contract_link(contract_id: str, memorable: str) -> SafeString:
    url = reverse("admin:confirmations_contract_change", args=[contract_id])
    return format_html('<a href="{}">{}</a>', url, memorable)


def decision_message(confirmation: PendingConfirmation) -> tuple[int, SafeString]:
    """What the operator is told once a decision went through: the outcome, with its contract linked."""
    outcome = confirmation.outcome or {}
    if confirmation.state == C.DENIED:
        return messages.SUCCESS, format_html(
            "Denied {}: nothing was written, and the client is told ({}).",
            confirmation.memorable_id,
            outcome.get("error", "FORGE_ERR_CONFIRMATION_DENIED"),
        )
    if confirmation.state == C.EXECUTED:
        result = outcome.get("result", {})
        return messages.SUCCESS, format_html(
            "Approved {} and carried out: contract {} is verified.",
            confirmation.memorable_id,
            contract_link(result.get("contract", ""), result.get("contract_memorable_id", "")),
        )
    if confirmation.state == C.FAILED:
        contract = (
            format_html(" Contract: {}.", contract_link(outcome["contract"], outcome.get("contract_memorable_id", "")))
            if outcome.get("contract")
            else ""
        )
        return messages.ERROR, format_html(
            "Approved {}, but it was not carried out ({}): {}{}",
            confirmation.memorable_id,
            outcome.get("error", ""),
            outcome.get("message", ""),
            contract,
        )
    return messages.INFO, format_html("Confirmation {} is {}.", confirmation.memorable_id, confirmation.state)


ROLLBACK_MESSAGES: dict[str, tuple[int, str]] = {
    ContractState.ROLLED_BACK: (messages.SUCCESS, "Rolled back {}: the target holds what it held before."),
    ContractState.ROLLBACK_FAILED: (
        messages.ERROR,
        "The rollback of {} failed ({}); the target was left as the contract made it.",
    ),
    ContractState.RECONCILIATION: (
        messages.WARNING,
        "The rollback of {} could not be proven ({}); resolve its reconciliation below.",
    ),
}


def rollback_message(contract: Contract) -> tuple[int, SafeString]:
    level, text = ROLLBACK_MESSAGES.get(contract.state, (messages.INFO, "Contract {} is {}."))
    return level, format_html(text, contract.memorable_id, contract.detail or contract.state)


def resolution_message(contract: Contract, conclusion: str) -> tuple[int, SafeString]:
    return messages.SUCCESS, format_html(
        "Resolved {} as {}: it is now {}.", contract.memorable_id, conclusion.replace("_", " "), contract.state
    )


def confirmation_link(request: HttpRequest, confirmation_id: uuid.UUID) -> HttpResponse:
    """/console/confirmations/<id>/, the address a write tool gives its client for the operator: the
    confirmation's page. Mounted on the console's site (`console.site.ConsoleSite`), behind its login."""
    return HttpResponseRedirect(reverse("admin:confirmations_pendingconfirmation_change", args=[confirmation_id]))


CONCLUSION_TITLES = {"applied": "Applied", "not_applied": "Not applied", "rolled_back_by_hand": "Rolled back by hand"}
BY_HAND = "Someone restored the target by hand, outside Forge"
CONCLUSION_MEANINGS = {
    ("change", "applied"): "The change is in the target",
    ("change", "not_applied"): "The change is not in the target",
    ("rollback", "applied"): "The rollback took effect: the target is as it was before the contract",
    ("rollback", "not_applied"): "The rollback did not take effect: the target still holds the contract's result",
}


def conclusion_choices(contract: Contract) -> list[tuple[str, str, str]]:
    """The reconciliation form's buttons: (conclusion, title, what it means and the state it leads to)."""
    what = reconciles(contract)
    return [
        (
            conclusion,
            CONCLUSION_TITLES.get(conclusion, conclusion),
            f"{CONCLUSION_MEANINGS.get((what, conclusion), BY_HAND)}: the contract becomes {to}.",
        )
        for conclusion, to in conclusions(contract).items()
    ]
