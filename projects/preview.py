"""What an operator sees before approving a change: the diff it makes, and the findings it adds or clears.

`preview_change` applies an intent (operations plus the modification stamp) exactly as the executor's
project-file capability will, so the bytes previewed are the bytes written. The diff is a unified diff
of the file (operations keep every untouched element byte for byte, so it stays small), bounded for the
screen, and beside it the change POU by POU (`projects.review_diff`: the body's lines, the variable table),
which the confirmation's seal covers like the rest of the preview; findings are compared before and after,
so a reviewer sees what the change breaks or repairs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from projects import findings
from projects.capability import applied, remember_result
from projects.plcopen import documents
from projects.review_diff import change_view

DIFF_MAX_LINES = 400
DIFF_MAX_CHARS = 40_000
FINDINGS_MAX = 50


@dataclass(frozen=True)
class Preview:
    result: bytes
    changed_ids: tuple[str, ...]
    content: dict[str, Any]


def _findings(root) -> dict[tuple[str, str, str], dict[str, str]]:
    return {(f.code, f.element_id, f.message): f.to_dict() for f in findings.check(root)}


def unified_diff(before: bytes, after: bytes, encoding: str, name: str) -> tuple[str, bool]:
    """A bounded unified diff of two versions of a file: the text, and whether it was cut."""
    lines = list(
        difflib.unified_diff(
            before.decode(encoding, errors="replace").splitlines(),
            after.decode(encoding, errors="replace").splitlines(),
            fromfile=f"{name} (accepted)",
            tofile=f"{name} (after this change)",
            lineterm="",
        )
    )
    text = "\n".join(lines[:DIFF_MAX_LINES])
    cut = len(lines) > DIFF_MAX_LINES or len(text) > DIFF_MAX_CHARS
    return text[:DIFF_MAX_CHARS], cut


def preview_change(current: bytes, intent: Mapping[str, Any], *, name: str) -> Preview:
    """Apply an intent to a file's bytes; OperationRefused (with the index) when it does not apply."""
    document = documents.load(current)
    result, after = applied(document, intent)
    remember_result(current, intent, after)
    before_findings = _findings(document.root)
    after_findings = _findings(result.doc.root)
    added = [after_findings[key] for key in after_findings.keys() - before_findings.keys()]
    cleared = [before_findings[key] for key in before_findings.keys() - after_findings.keys()]
    ordering = lambda f: (f["severity"] != "problem", f["element_id"], f["code"])  # noqa: E731
    diff, cut = unified_diff(current, after, document.encoding, name)
    content = {
        "changed_ids": list(result.changed_ids),
        "diff": diff,
        "diff_truncated": cut,
        "change_view": change_view(document, result.doc),
        "new_findings": sorted(added, key=ordering)[:FINDINGS_MAX],
        "resolved_findings": sorted(cleared, key=ordering)[:FINDINGS_MAX],
        "result_fingerprint": documents.fingerprint(after),
    }
    return Preview(result=after, changed_ids=result.changed_ids, content=content)
