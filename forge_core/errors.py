"""Failures that cross every layer, so each wire boundary can name them without importing the app that
raises them.

`AuditUnavailable` is raised by `audit` when an audit row cannot be written (database error, mirror
unwritable): the action it belonged to is rolled back and does not happen. The REST exception handler
(`forge_core.rest`), the MCP method layer and the console each answer it in their own words, which is why
it lives below all of them rather than in `audit`.
"""

from __future__ import annotations


class AuditUnavailable(Exception):
    """The audit row could not be written; the recorded action must not happen."""
