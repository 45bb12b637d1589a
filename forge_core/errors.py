"""The one error family (DESIGN section 12): a refusal, raised by the services, mapped once at each edge.

A `Refusal` says that something was not done and what to do next: its `code` (`FORGE_ERR_*`, the machine's
word for why), its `message` (a sentence for the person or agent that asked, naming what to do next), its
HTTP `status` and its `details` (values the asker needs, such as `current_working_revision`). Services
raise it, or a subclass of their own that fixes the code; nothing below an edge turns one into another
shape. Each edge maps it in one place:

- MCP tool results (`mcp_api.protocol`): `isError: true`, `structuredContent` = `{"error": code,
  "message": message, **details}` (`Refusal.structured`), and the same as JSON in the text content;
- JSON-RPC errors, where a refusal meets the protocol outside a tool call (`mcp_api.jsonrpc.refusal_error`);
  protocol faults themselves stay `RpcError`s with their JSON-RPC codes;
- REST bodies (`forge_core.rest.exception_handler`): RFC 9457 problem details, `application/problem+json`;
- console messages (`forge_core.console.refused`): the message, through `messages.error`.

No library error text and no traceback reaches a message: a refusal whose cause is technical (the audit row
that could not be written) keeps the cause in its exception arguments for the server log, and says on the
wire only what the asker can act on.
"""

from __future__ import annotations

from typing import Any


class Refusal(Exception):
    """A request refused with nothing done (or nothing more): code, what to do next, HTTP status, details."""

    code: str = "FORGE_ERR_REFUSED"
    status: int = 409

    def __init__(self, code: str, message: str, *, status: int | None = None, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        if status is not None:
            self.status = status
        self.details = details

    def structured(self) -> dict[str, Any]:
        """The refusal as data: its code as `error`, its message, and its details beside them."""
        return {"error": self.code, "message": self.message, **self.details}


class AuditUnavailable(Refusal):
    """The audit row could not be written, so the action it belonged to is rolled back and does not happen.

    Raised by `audit` with the technical cause (what `str()` gives, for the server log); what reaches the
    asker is the refusal's message."""

    code = "FORGE_ERR_AUDIT_UNAVAILABLE"
    status = 503
    MESSAGE = (
        "The audit log cannot be written, so nothing was done. Try again later; if it persists, ask an operator "
        "to check the server's database and audit mirror."
    )

    def __init__(self, cause: str = "") -> None:
        super().__init__(self.code, self.MESSAGE)
        self.args = (cause or self.MESSAGE,)
