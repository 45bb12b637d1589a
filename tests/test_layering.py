"""Imports point one way, and no package imports itself in a circle (DESIGN section 2).

The rules, for every package of the product:

- `forge_core` (the ground) imports no other package of ours;
- `audit` imports only the ground;
- `projects` and `caretaker` import only `audit` (and the ground);
- `confirmations` imports `audit`, the pure `caretaker.fingerprint` (and the ground), nothing of `projects`;
- `access` (client tokens, sessions, the switch, grants: what the edges share) imports `audit`, `projects`
  and `confirmations` (and the ground);
- `mcp_api` (the MCP edge) and `console` (what operators use) may import all of those but not each other
  (what both need moves down), and nothing imports either but `forge_site`;
- `forge_site`, the composition root, may import everything, and nothing imports it.

The graph is read from the source with `ast`, so it sees every import: at module level, inside functions
(where an import can hide a cycle that module-level imports would show) and under `TYPE_CHECKING`. The
layering counts them all, since a deferred or typing-only import still ties a package to another. Cycle
detection leaves out the `TYPE_CHECKING` ones: they never run, so they cannot half-initialise a module, and
annotations naming a type of a module that imports this one are the usual reason for them. Importing
`a.b.c` also runs `a/b/__init__.py`, so that counts as an import of `a.b` too (unless the importer lives
inside `a.b`). A cycle is any set of modules that reach each other, inside one package or across several.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GROUND = {"forge_core"}
BELOW_THE_EDGES = GROUND | {"audit", "projects", "caretaker", "confirmations", "access"}
# What each package may import besides itself: a package name allows all of it, a dotted name that module.
ALLOWED: dict[str, set[str]] = {
    "forge_core": set(),
    "audit": GROUND,
    "projects": GROUND | {"audit"},
    "caretaker": GROUND | {"audit"},
    "confirmations": GROUND | {"audit", "caretaker.fingerprint"},
    "access": GROUND | {"audit", "projects", "caretaker", "confirmations"},
    "mcp_api": BELOW_THE_EDGES,
    "console": BELOW_THE_EDGES,
    "forge_site": BELOW_THE_EDGES | {"mcp_api", "console"},
}
PACKAGES = set(ALLOWED)


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name, the most specific module of ours that the statement names
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`
    implied: bool = False  # a package whose __init__ runs because a module inside it is imported


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_under(root: Path) -> dict[str, Path]:
    """Every module of our packages under `root`, by dotted name."""
    found = {}
    for package in sorted(PACKAGES):
        if (root / package).is_dir():
            for path in sorted((root / package).rglob("*.py")):
                found[module_name(root, path)] = path
    return found


class _ImportCollector(ast.NodeVisitor):
    """Collects every import statement of one module, noting which sit under `if TYPE_CHECKING:`."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        self._typing_only = False

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}:
            outer, self._typing_only = self._typing_only, True
            for child in node.body:
                self.visit(child)
            self._typing_only = outer
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self._typing_only))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node, self._typing_only))


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The imports of module `name` (file `path`) that land in one of our packages."""
    collector = _ImportCollector()
    collector.visit(ast.parse(path.read_text(), filename=str(path)))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    result = []
    for node, typing_only in collector.found:
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from package import module` names a module; `from module import name` names the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            if target.split(".")[0] not in PACKAGES:
                continue
            while target not in known and "." in target:  # an attribute path, or a module not on disk
                target = target.rpartition(".")[0]
            if target != name:
                result.append(Import(name, target, node.lineno, typing_only))
            # Importing a.b.c runs a/b/__init__.py first: a package whose __init__ imports its modules can
            # close a cycle that way. A module's own packages are already running when it is imported.
            parent = target.rpartition(".")[0]
            while parent:
                if parent in known and parent != name and not name.startswith(parent + "."):
                    result.append(Import(name, parent, node.lineno, typing_only, implied=True))
                parent = parent.rpartition(".")[0]
    return result


def import_graph(root: Path) -> list[Import]:
    known = modules_under(root)
    return [found for name, path in known.items() for found in imports_of(name, path, known)]


def allowed(importer: str, imported: str) -> bool:
    source, target = importer.split(".")[0], imported.split(".")[0]
    if source == target:
        return True
    return any(imported == rule or imported.startswith(rule + ".") for rule in ALLOWED[source])


def layering_violations(root: Path) -> list[str]:
    return sorted(
        {
            f"{found.importer} (line {found.line}) imports {found.imported}"
            for found in import_graph(root)
            if not found.implied and not allowed(found.importer, found.imported)
        }
    )


def import_cycles(root: Path) -> list[list[str]]:
    """Each set of modules that import one another in a circle (Tarjan's strongly connected components),
    as a sorted list of names; imports under TYPE_CHECKING leave no edge."""
    edges: dict[str, set[str]] = {}
    for found in import_graph(root):
        if not found.typing_only:
            edges.setdefault(found.importer, set()).add(found.imported)
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges.get(module, ())):
            if target not in index:
                visit(target)
                lowest[module] = min(lowest[module], lowest[target])
            elif target in on_stack:
                lowest[module] = min(lowest[module], index[target])
        if lowest[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(cycles)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_package_is_on_disk(package):
    assert (ROOT / package / "__init__.py").is_file()


def test_every_import_points_the_way_the_layering_allows():
    assert layering_violations(ROOT) == []


def test_no_modules_import_each_other_in_a_circle():
    assert import_cycles(ROOT) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_reports_a_back_import_even_inside_a_function(tmp_path):
    _write(
        tmp_path,
        {
            "audit/__init__.py": "",
            "audit/services.py": "def record():\n    from mcp_api.models import ClientToken\n",
            "mcp_api/__init__.py": "",
            "mcp_api/models.py": "from audit.services import record\n",
            "forge_core/__init__.py": "",
            "forge_core/env.py": "import forge_site.settings\n",
            "forge_site/__init__.py": "",
            "forge_site/settings.py": "from forge_core.env import envstr\n",
        },
    )
    assert layering_violations(tmp_path) == [
        "audit.services (line 2) imports mcp_api.models",
        "forge_core.env (line 1) imports forge_site.settings",
    ]


def test_the_checker_reports_the_two_edges_importing_each_other_and_an_app_importing_the_console(tmp_path):
    _write(
        tmp_path,
        {
            "access/__init__.py": "",
            "access/services.py": "from console.operators import do_create_operator\n",
            "console/__init__.py": "",
            "console/operators.py": "",
            "console/stream.py": "from mcp_api.consumers import SSE_HEADERS\nfrom access import services\n",
            "mcp_api/__init__.py": "",
            "mcp_api/consumers.py": "def reply():\n    from console.site import ConsoleSite\n",
            "forge_site/__init__.py": "",
            "forge_site/asgi.py": "from console.stream import ConsoleEventsConsumer\nfrom mcp_api import consumers\n",
        },
    )
    assert layering_violations(tmp_path) == [
        "access.services (line 1) imports console.operators",
        "console.stream (line 1) imports mcp_api.consumers",
        "mcp_api.consumers (line 2) imports console",
    ]


def test_the_checker_reports_a_cycle_inside_one_package(tmp_path):
    _write(
        tmp_path,
        {
            "projects/__init__.py": "",
            "projects/a.py": "from projects.b import thing\n",
            "projects/b.py": "def thing():\n    from . import a\n",
            "projects/c.py": "from projects import a\n",
        },
    )
    assert layering_violations(tmp_path) == []
    assert import_cycles(tmp_path) == [["projects.a", "projects.b"]]


def test_the_checker_leaves_typing_only_imports_out_of_cycles(tmp_path):
    _write(
        tmp_path,
        {
            "projects/__init__.py": "",
            "projects/a.py": "from projects.b import thing\n",
            "projects/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from projects.a import x\n",
        },
    )
    assert import_cycles(tmp_path) == []


def test_the_checker_reports_a_cycle_through_a_package_that_imports_its_modules(tmp_path):
    _write(
        tmp_path,
        {
            "mcp_api/__init__.py": "",
            "mcp_api/protocol.py": "from mcp_api.tools.registry import ToolError\n",
            "mcp_api/tools/__init__.py": "from mcp_api.tools import server\n",
            "mcp_api/tools/registry.py": "",
            "mcp_api/tools/server.py": "from mcp_api.protocol import CallContext\nfrom mcp_api.tools import registry\n",
        },
    )
    assert import_cycles(tmp_path) == [["mcp_api.protocol", "mcp_api.tools", "mcp_api.tools.server"]]
