"""The interface between the executor and the apps whose targets it changes (DESIGN section 2).

`confirmations` carries out mutations but holds no project or roster logic; `projects` and `caretaker`
provide capability adapters, named by dotted path in `FORGE_CAPABILITIES`. Neither side may import the
other, so the few types they share (what a read returns, the adapter's refusals, the adapter's shape)
live here, in the ground package both stand on. The refusals are of the one error family
(`forge_core.errors.Refusal`), so an operator's request the executor refuses reaches the edge as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from forge_core.errors import Refusal

Step = Callable[[str], None]


def no_step(name: str) -> None:
    """The step callback outside the crash test: nothing to do at a boundary."""


@dataclass(frozen=True)
class Observation:
    """A target as read now: its content and its fingerprint."""

    content: bytes
    fingerprint: str


# The executor's reasons whose code and status are not FORGE_ERR_ + the reason, 409.
REASON_CODES: dict[str, tuple[str, int]] = {
    "typed_id": ("FORGE_ERR_TYPED_ID_MISMATCH", 400),
    "conclusion": ("FORGE_ERR_BAD_CONCLUSION", 400),
    "state": ("FORGE_ERR_WRONG_STATE", 409),
    "stale": ("FORGE_ERR_WRONG_STATE", 409),
}


class ExecutionRefused(Refusal):
    """The executor will not (or can no longer) carry something out; `reason` is a value-free slug, `clause`
    says why in words that compose into other sentences (the refusal's message is it as a sentence)."""

    def __init__(self, reason: str, clause: str) -> None:
        code, status = REASON_CODES.get(reason, (f"FORGE_ERR_{reason.upper()}", 409))
        super().__init__(code, sentence(clause), status=status)
        self.reason = reason
        self.clause = clause


def sentence(text: str) -> str:
    """A clause as a sentence: capitalized, ending with a full stop."""
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else text


class TargetMissing(ExecutionRefused):
    """No target, or more than one, matches the natural identity."""

    def __init__(self, message: str) -> None:
        super().__init__("target_missing", message)


class IntentRefused(ExecutionRefused):
    """The intent does not apply to the target's current content."""

    def __init__(self, message: str) -> None:
        super().__init__("intent_refused", message)


class Capability(Protocol):
    """What an app provides so the executor can change one kind of target.

    Two optional class attributes, read with defaults: `reversible` (False: the executor refuses to roll its
    contracts back, for targets where restoring an old state would be a change of its own, such as handing a
    revoked certificate its trust back), and `decide_permission` (a permission a person needs, beside
    decide_confirmation, to approve a confirmation that changes this kind of target). An optional method,
    `one_change()`, returns a context manager the executor holds over the steps of one change (preparation and
    execution), within which the adapter may check an identity against what it read once in that change.
    """

    name: str
    target_kind: str

    def identity(self, target: Mapping[str, Any]) -> dict[str, Any]:
        """The natural identity of exactly one existing target, or TargetMissing."""

    def read(self, identity: Mapping[str, Any]) -> Observation:
        """The target as it is now (exactly one match), or TargetMissing."""

    def fingerprint(self, content: bytes) -> str:
        """The fingerprint of some content, as `read` computes it."""

    def forward(self, identity: Mapping[str, Any], method: str, current: bytes, intent: Mapping[str, Any]) -> bytes:
        """The new content: a pure function of the current content and the intent, or IntentRefused."""

    def write(self, identity: Mapping[str, Any], content: bytes, step: Step) -> None:
        """Replace the target's content atomically (all or nothing); OSError when it could not."""

    def settle(
        self,
        identity: Mapping[str, Any],
        fingerprint: str,
        *,
        actor: str,
        label: str,
        method: str,
        intent: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """Record the target's new state in the owning app, inside the executor's transaction (`intent` is
        None after a rollback: the target is back to the state before the contract)."""
