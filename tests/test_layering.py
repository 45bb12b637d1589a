"""Imports point one way (DESIGN section 2): audit imports no other app; projects and caretaker only
audit; confirmations audit and caretaker.fingerprint; mcp_api may import all; nothing imports mcp_api."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = {"audit", "projects", "caretaker", "confirmations", "mcp_api"}
ALLOWED = {
    "audit": set(),
    "projects": {"audit"},
    "caretaker": {"audit"},
    "confirmations": {"audit", "caretaker.fingerprint"},
    "mcp_api": APPS - {"mcp_api"},
}


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def violations(app: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / app).rglob("*.py")):
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top not in APPS or top == app:
                continue
            if not any(module == rule or module.startswith(rule + ".") or rule == top for rule in ALLOWED[app]):
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
    return bad


@pytest.mark.parametrize("app", sorted(APPS))
def test_app_imports_only_what_the_layering_allows(app):
    assert violations(app) == []


def test_the_checker_notices_a_forbidden_import(tmp_path, monkeypatch):
    fake = tmp_path / "audit"
    fake.mkdir()
    (fake / "bad.py").write_text("from mcp_api.models import ClientToken\n")
    monkeypatch.setattr("tests.test_layering.ROOT", tmp_path)
    assert violations("audit") == ["audit/bad.py imports mcp_api.models"]
