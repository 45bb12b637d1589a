#!/usr/bin/env python3
"""Forge MCP quickstart: `python3 forge.py up` runs the service, `python3 forge.py test` the test suite.

Needs only Python 3.11+. Both commands create `.venv/` and install the project into it when missing or
when pyproject.toml changed, so they are safe to run again. `up` also migrates the database, creates the
secrets, a demo operator and a demo token, prints how to connect, and serves on 127.0.0.1. `test` also
installs Debian's chromium for the browser tests when it is missing and this is root on a machine with
apt-get (Playwright's own browser download is never used); otherwise those tests skip and say why.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".forge-installed"
# The browser tests launch this binary (tests/browser/conftest.py); Debian's `chromium` package puts it there.
CHROMIUM = Path("/usr/bin/chromium")


def ensure_environment(extras: str) -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"Forge MCP needs Python 3.11 or newer; this is {sys.version.split()[0]}.")
    if not PYTHON.exists():
        print(f"# creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    print(f"# installing Forge MCP's dependencies{extras} into {VENV}", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, *requirements(extras)], cwd=ROOT, check=True)
    STAMP.write_text(wanted)


def requirements(extras: str) -> list[str]:
    """The dependencies pyproject.toml declares (plus the named extras); the checkout itself runs in place."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras.strip("[]").split(","):
        if extra:
            wanted += project["optional-dependencies"][extra]
    return wanted


def ensure_chromium() -> None:
    """Install Debian's chromium for the browser tests when it is missing and we are allowed to.

    Never fatal: a machine where this cannot work (not root, no apt-get, no network) still runs the rest
    of the suite, and the browser tests skip with the reason.
    """
    if CHROMIUM.exists():
        return
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        why = "not running as root" if apt_get else "no apt-get on this machine"
        print(f"# {CHROMIUM} is missing and cannot be installed here ({why}): the browser tests will skip", flush=True)
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in ([apt_get, "update"], [apt_get, "install", "-y", "--no-install-recommends", "chromium"]):
        print(f"# {CHROMIUM} is missing, for the browser tests: {' '.join(step)}", flush=True)
        done = subprocess.run(step, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stdout.splitlines()[-15:])
            print(f"{tail}\n# that failed (exit {done.returncode}): the browser tests will skip", flush=True)
            return
    print(f"# installed Debian's chromium at {CHROMIUM}", flush=True)


def manage(*args: str) -> None:
    subprocess.run([str(PYTHON), "manage.py", *args], cwd=ROOT, check=True)


def up(argv: list[str]) -> None:
    host = os.environ.get("FORGE_HOST", "127.0.0.1")
    port = os.environ.get("FORGE_PORT", "8000")
    ensure_environment("")
    manage("migrate", "--noinput", "-v", "0")
    manage("demo_setup", "--host", host, "--port", port)
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), "manage.py", "runmcp", "--host", host, "--port", port, *argv])


def test(argv: list[str]) -> None:
    ensure_environment("[dev]")
    ensure_chromium()
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), "-m", "pytest", *argv])


def main() -> None:
    commands = {"up": up, "test": test}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit("usage: python3 forge.py up | test [pytest arguments]")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
