"""The audit rows of one transaction appended together: a block (`audited_together`) keeps the rows its code makes
(`audit_row`) and appends them as one batch (`audit.services.record_together`) as it ends, just before the
transaction commits, in the order they were made.

The executor opens a block around each contract move; what runs inside it (the contract's event, the owning app's
settling of a change, the confirmation's outcome) makes its rows with `audit_row`, so a move's rows are one chain
head read under the lock and one INSERT of rows and one of tree nodes (on PostgreSQL two round trips), where each
row alone took both. Outside a block `audit_row` records at once, as `record()` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from audit.services import record, record_together

# The audit rows kept by the innermost `audited_together` block under way; None outside one.
_kept_rows: ContextVar[list[dict[str, Any]] | None] = ContextVar("kept_audit_rows", default=None)


@contextmanager
def audited_together() -> Iterator[None]:
    """Inside a transaction: the audit rows made in the block (`audit_row`) are appended together as it ends, before
    the transaction commits, in the order they were made. Inside such a block already, that one appends them. Rows
    recorded directly in the block (`record()`) are appended as they are made, so before the kept ones. A block left
    by an exception appends nothing: its transaction rolls back. An inner block left by one drops what it kept from
    the enclosing block's rows: its savepoint rolls back what they record (a caller may catch the exception and
    commit the rest), or with none, the whole transaction fails."""
    enclosing = _kept_rows.get()
    if enclosing is not None:
        mark = len(enclosing)
        try:
            yield
        except BaseException:
            del enclosing[mark:]
            raise
        return
    rows: list[dict[str, Any]] = []
    token = _kept_rows.set(rows)
    try:
        yield
    finally:
        _kept_rows.reset(token)
    record_together(rows)


def audit_row(**entry: Any) -> None:
    """An audit row (`record()`'s keyword arguments, `kind` among them): kept for the enclosing `audited_together`
    block, or recorded now outside one."""
    kept = _kept_rows.get()
    if kept is None:
        record(**entry)
    else:
        kept.append(entry)
