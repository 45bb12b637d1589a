"""The interface between the executor and the apps whose targets it changes (DESIGN section 2).

`confirmations` carries out mutations but holds no project or roster logic; `projects` and `caretaker`
provide capability adapters, named by dotted path in `FORGE_CAPABILITIES`. Neither side may import the
other, so the few types they share (what a read returns, the adapter's refusals, the adapter's shape)
live here, in the ground package both stand on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Step = Callable[[str], None]


def no_step(name: str) -> None:
    """The step callback outside the crash test: nothing to do at a boundary."""


@dataclass(frozen=True)
class Observation:
    """A target as read now: its content and its fingerprint."""

    content: bytes
    fingerprint: str


class ExecutionRefused(Exception):
    """The executor will not (or can no longer) carry something out; `reason` is a value-free slug."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class TargetMissing(ExecutionRefused):
    """No target, or more than one, matches the natural identity."""

    def __init__(self, message: str) -> None:
        super().__init__("target_missing", message)


class IntentRefused(ExecutionRefused):
    """The intent does not apply to the target's current content."""

    def __init__(self, message: str) -> None:
        super().__init__("intent_refused", message)


class Capability(Protocol):
    """What an app provides so the executor can change one kind of target."""

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
