"""The wheel (`pip wheel --no-deps .`) is complete: every product package and data file is declared in pyproject.toml.

pyproject.toml names the packages one by one ([tool.setuptools] packages) so that tests/, bench/ and
scripts/ never slip into the wheel; these tests catch the other mistake, a new package, subpackage or
data file (a migration folder, a template, the schema) that the list or the package-data globs leave out.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Top-level folders with Python in them that are not part of the product.
NOT_PRODUCT = {"tests", "bench", "scripts"}

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGES: list[str] = SETUPTOOLS["packages"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS.get("package-dir", {})
PACKAGE_DATA: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})


def package_folder(name: str) -> Path:
    return ROOT / PACKAGE_DIR.get(name, name.replace(".", "/"))


def skipped(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix in {".pyc", ".pyo"}


def test_every_product_package_is_listed() -> None:
    found = set()
    for top in ROOT.iterdir():
        if top.name in NOT_PRODUCT or not (top / "__init__.py").is_file():
            continue
        for init in top.rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    missing = sorted(found - set(PACKAGES))
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {missing}"


def test_every_listed_package_exists() -> None:
    gone = [name for name in PACKAGES if not package_folder(name).is_dir()]
    assert not gone, f"pyproject.toml [tool.setuptools] packages names folders that do not exist: {gone}"


def test_every_data_file_is_carried() -> None:
    """Each non-Python file in a package's folder (outside its subpackages) matches a package-data glob."""
    folders = {package_folder(name): name for name in PACKAGES}
    left_out = []
    for folder, name in folders.items():
        globs = PACKAGE_DATA.get("*", []) + PACKAGE_DATA.get(name, [])
        carried = {path for pattern in globs for path in folder.glob(pattern)}
        for path in folder.rglob("*"):
            if not path.is_file() or path.suffix == ".py" or skipped(path):
                continue
            # A file inside a subpackage is that subpackage's to carry.
            owner = next(parent for parent in path.parents if parent in folders)
            if owner == folder and path not in carried:
                left_out.append(str(path.relative_to(ROOT)))
    assert not left_out, f"files the wheel would leave out (add them to package-data): {sorted(left_out)}"


def test_mypy_checks_every_product_package() -> None:
    """[tool.mypy] files are the wheel's top-level packages: a new app is type-checked from its first commit."""
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    top_level = {name for name in PACKAGES if "." not in name}
    assert set(mypy["files"]) == top_level
