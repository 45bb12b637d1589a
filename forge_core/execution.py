"""The executor, for the apps that may not import `confirmations` (DESIGN section 2).

A caretaker acting in the console (issuing from a pasted CSR, revoking, signing the roster again) decides there
and then: no pending confirmation is needed, but the change must still be carried out by the one executor under
a recovery contract. The caretaker app reaches it here, by the dotted path in `FORGE_EXECUTOR_ENTRY`
(`confirmations.executor.carry_out`), as the executor reaches the apps' capability adapters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class Outcome:
    """What the executor did: the contract's final state, its ids, and what the adapter settled."""

    state: str
    contract: str
    memorable_id: str
    detail: str = ""
    settled: dict[str, Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.state == "VERIFIED"


class CarryOut(Protocol):
    def __call__(
        self,
        *,
        capability: str,
        method: str,
        target: Mapping[str, Any],
        intent: Mapping[str, Any],
        idempotency_key: str,
        approval: Mapping[str, Any],
        actor: str,
        label: str,
        expected_fingerprint: str = "",
        expected_result: str = "",
    ) -> Outcome: ...


@cache
def _entry() -> CarryOut:
    entry: CarryOut = import_string(settings.FORGE_EXECUTOR_ENTRY)
    return entry


def carry_out(**kwargs: Any) -> Outcome:
    """Prepare and execute one change a person approved on the spot; ExecutionRefused when it is refused."""
    return _entry()(**kwargs)
