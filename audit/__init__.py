"""The append-only audit log: every tool call, decision and state change writes one row here."""
