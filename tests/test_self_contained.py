"""The repository stands on its own: no file reads or names a folder beside the checkout.

A user clones the project alone. Test data, schemas and scripts live in the repository; a file that
reaches for a sibling folder (the steering repository's `shared/` above all) works on a developer's
machine and fails on everyone else's.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Spelled in pieces so that this file does not match its own patterns.
SIBLING = "shared"
OUTSIDE_REFERENCES = (
    re.compile(r"\.\./" + SIBLING + r"\b"),
    # The same place as a built path: a quoted folder name joined onto some `.parent`.
    re.compile(r"\.parent\s*/\s*[\"']" + SIBLING + r"[\"']"),
)
SKIPPED_FOLDERS = {".git", ".venv", "var", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "build"}


def repository_files(root: Path) -> list[Path]:
    """The files git tracks or would add (untracked, not ignored); every file when `root` is no checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        return [root / name for name in listed.stdout.decode().split("\0") if name]
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not SKIPPED_FOLDERS.intersection(path.relative_to(root).parts)
    ]


def references_outside(root: Path) -> list[str]:
    found = []
    for path in repository_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (images, wheels) and files deleted in the work tree
        for number, line in enumerate(text.splitlines(), 1):
            if any(pattern.search(line) for pattern in OUTSIDE_REFERENCES):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_no_file_of_the_repository_reads_or_names_a_folder_beside_the_checkout():
    assert references_outside(ROOT) == []


def test_the_check_finds_a_relative_path_and_a_built_path_to_the_sibling_folder(tmp_path):
    (tmp_path / "README.md").write_text(f"See ../{SIBLING}/DESIGN.md for the picture.\n")
    (tmp_path / "conftest.py").write_text(f'DATA = Path(__file__).parent.parent / "{SIBLING}" / "samples"\n')
    (tmp_path / "fine.py").write_text("# the shared database and shared_secret are fine\n")

    assert sorted(references_outside(tmp_path)) == [
        f"README.md:1: See ../{SIBLING}/DESIGN.md for the picture.",
        f'conftest.py:1: DATA = Path(__file__).parent.parent / "{SIBLING}" / "samples"',
    ]
