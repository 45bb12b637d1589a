"""Private by default: a data folder made the way `forge.py up` makes it (migrate, then demo_setup) holds
nothing other users may read, whatever the umask of the shell that started it."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from tests.live import ROOT, server_env


def modes(folder: Path) -> dict[str, int]:
    """Every folder and file under `folder` (itself as "."), by relative path, with its permission bits."""
    found = {".": stat.S_IMODE(folder.lstat().st_mode)}
    for path in sorted(folder.rglob("*")):
        found[str(path.relative_to(folder))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_a_fresh_data_folder_is_0700_and_every_file_in_it_0600(tmp_path):
    data = tmp_path / "var"  # does not exist yet: the service makes it
    env = server_env(data, DATABASE_URL="", REDIS_URL="")
    for name in ("FORGE_SECRETS_DIR", "FORGE_PROJECTS_ROOT", "FORGE_AUDIT_LOG"):
        env.pop(name, None)
    for args in (["migrate", "--noinput", "-v", "0"], ["demo_setup"]):
        # A shell's usual umask (022), which alone would make folders 0755 and files 0644.
        subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, umask=0o022
        )

    found = modes(data)

    expected = {"forge.sqlite3", "secrets/django-secret-key", "secrets/demo-operator-password", "secrets/demo-token"}
    expected |= {"audit/audit.jsonl", "projects"}
    assert expected <= set(found), sorted(found)
    assert any(name.startswith("projects/") for name in found), sorted(found)  # the demo project's file
    loose = {name: oct(mode) for name, mode in found.items() if mode != (0o700 if (data / name).is_dir() else 0o600)}
    assert loose == {}, found
