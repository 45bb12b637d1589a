"""The MCP tool modules do not import one another (beside the layering of tests/test_layering.py).

Each module of `mcp_api/tools/` declares one family of tools into the registry. What two families share
lives in `mcp_api.tools.common`, in the registry, or down in the app that owns the logic, so a family can
change, move or go without dragging another along, and the package's `__init__` (which imports every family
in `tools/list` order) is the only module that names them all.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_layering import ROOT, _write, import_graph

TOOLS = "mcp_api.tools"
SHARED = {f"{TOOLS}.common"}


def tool_module_imports(root: Path) -> list[str]:
    """Each import of one tool module by another (the package and the shared module aside)."""
    return sorted(
        {
            f"{found.importer} (line {found.line}) imports {found.imported}"
            for found in import_graph(root)
            if not found.implied
            and found.importer.startswith(TOOLS + ".")
            and found.importer not in SHARED
            and found.imported.startswith(TOOLS + ".")
            and found.imported not in SHARED
        }
    )


def test_no_tool_module_imports_another():
    assert tool_module_imports(ROOT) == []


def test_the_checker_reports_a_tool_module_that_imports_another(tmp_path):
    _write(
        tmp_path,
        {
            "mcp_api/__init__.py": "",
            "mcp_api/tools/__init__.py": "from mcp_api.tools import drafts, projects\n",
            "mcp_api/tools/common.py": "",
            "mcp_api/tools/projects.py": "from mcp_api.tools.common import read\n",
            "mcp_api/tools/drafts.py": "from mcp_api.tools.common import read\nfrom mcp_api.tools.projects import x\n",
        },
    )
    assert tool_module_imports(tmp_path) == ["mcp_api.tools.drafts (line 2) imports mcp_api.tools.projects"]
