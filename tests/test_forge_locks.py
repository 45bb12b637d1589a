"""forge.py installs from the lock files: once per lock, `up` content with a venv `test` set up, never from a
lock that no longer matches pyproject.toml; and the committed locks match it, dev.lock holding base.lock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import forge


@pytest.fixture
def installs(monkeypatch, tmp_path) -> list[Path]:
    """A checkout in tmp_path with the real pyproject.toml and locks; records the locks pip would install."""
    monkeypatch.setattr(forge, "ROOT", tmp_path)
    (tmp_path / "pyproject.toml").write_bytes((forge.Path(forge.__file__).parent / "pyproject.toml").read_bytes())
    (tmp_path / "requirements").mkdir()
    for name in ("BASE_LOCK", "DEV_LOCK"):
        lock = tmp_path / "requirements" / getattr(forge, name).name
        lock.write_bytes(getattr(forge, name).read_bytes())
        monkeypatch.setattr(forge, name, lock)
    (tmp_path / ".venv").mkdir()
    monkeypatch.setattr(forge, "STAMP", tmp_path / ".venv" / ".forge-installed")
    monkeypatch.setattr(forge, "ensure_venv", lambda: None)
    installed: list[Path] = []
    monkeypatch.setattr(forge, "pip_install", lambda *args: installed.append(Path(args[args.index("-r") + 1])))
    return installed


def test_each_command_installs_its_lock_once(installs):
    forge.ensure_environment(dev=False)
    forge.ensure_environment(dev=False)
    assert installs == [forge.BASE_LOCK]

    forge.ensure_environment(dev=True)
    forge.ensure_environment(dev=True)
    assert installs == [forge.BASE_LOCK, forge.DEV_LOCK]


def test_up_after_test_keeps_the_dev_venv(installs):
    forge.ensure_environment(dev=True)
    forge.ensure_environment(dev=False)
    forge.ensure_environment(dev=True)

    assert installs == [forge.DEV_LOCK]


def test_a_changed_lock_is_installed_again(installs):
    forge.ensure_environment(dev=True)
    forge.DEV_LOCK.write_text(forge.DEV_LOCK.read_text() + "# moved\n")
    forge.ensure_environment(dev=True)

    assert installs == [forge.DEV_LOCK, forge.DEV_LOCK]


def test_locks_that_pyproject_moved_past_are_refused(installs):
    pyproject = forge.ROOT / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"pytest>=8,<10",', '"pytest>=8,<10", "import-linter",'))

    with pytest.raises(SystemExit, match=r"forge\.py lock"):
        forge.ensure_environment(dev=False)
    assert installs == []


def pins(lock: Path) -> dict[str, str]:
    """Each requirement line with its hashes, keyed by the line (name, version, markers)."""
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text())
    return {block.split(" \\", 1)[0]: " ".join(re.findall(r"sha256:\w+", block)) for block in blocks[1:]}


def test_the_committed_locks_match_pyproject_and_dev_holds_base():
    forge.check_locks()  # exits when pyproject.toml's dependencies changed since `python3 forge.py lock`

    base, dev = pins(forge.BASE_LOCK), pins(forge.DEV_LOCK)
    assert base and all(hashes for hashes in base.values())
    assert {line: dev.get(line) for line in base} == base
