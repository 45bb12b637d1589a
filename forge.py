#!/usr/bin/env python3
"""Forge MCP quickstart: `python3 forge.py up` runs the service, `python3 forge.py test` the test suite.

Needs only Python 3.11+. Both commands create `.venv/` and install the pinned, hashed dependencies of
requirements/base.lock (`up`) or requirements/dev.lock (`test`, a superset) into it when missing or when
the lock changed, so they are safe to run again; `python3 forge.py lock` rewrites both locks from
pyproject.toml with uv. `up` also migrates the database, creates the secrets, a demo operator and a demo
token, prints how to connect, and serves on 127.0.0.1. `test` runs ruff and mypy before pytest, and
installs Debian's chromium for the browser tests when it is missing and this is root on a machine with
apt-get (Playwright's own browser download is never used); otherwise those tests skip and say why.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
# The sha256 of the lock file last installed into the venv.
STAMP = VENV / ".forge-installed"
# Every dependency pinned with PyPI's hashes, for Python 3.11+ on any platform (uv's universal resolution):
# two installs a month apart get the same versions. dev.lock is base.lock (same pins) plus the dev extra.
BASE_LOCK = ROOT / "requirements" / "base.lock"
DEV_LOCK = ROOT / "requirements" / "dev.lock"
# The locks are resolved against PyPI alone, so their hashes are PyPI's whatever mirror a machine has.
PYPI = "https://pypi.org/simple"
LOCK_HEADER = "# pyproject.toml's dependencies: sha256 "
# The browser tests launch this binary (tests/browser/conftest.py); Debian's `chromium` package puts it there.
CHROMIUM = Path("/usr/bin/chromium")
# The tools the caretaker tests cross-check against, and the Debian package of each.
DEBIAN_TOOLS = {"ssh-keygen": "openssh-client", "openssl": "openssl"}


def ensure_environment(dev: bool) -> None:
    """Install the lock `test` (dev) or `up` needs into .venv/, unless the venv already has it.

    A venv installed from dev.lock also serves `up`: dev.lock pins exactly what base.lock pins, and more.
    """
    check_python()
    check_locks()
    ensure_venv()
    lock = DEV_LOCK if dev else BASE_LOCK
    accepted = {digest(DEV_LOCK)} if dev else {digest(BASE_LOCK), digest(DEV_LOCK)}
    if STAMP.exists() and STAMP.read_text().strip() in accepted:
        return
    print(f"# installing Forge MCP's dependencies from {lock.relative_to(ROOT)} into {VENV}", flush=True)
    pip_install("--require-hashes", "--no-deps", "-r", str(lock))
    STAMP.write_text(digest(lock))


def check_python() -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"Forge MCP needs Python 3.11 or newer; this is {sys.version.split()[0]}.")


def ensure_venv() -> None:
    if not PYTHON.exists():
        print(f"# creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)


def pip_install(*args: str) -> None:
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args], cwd=ROOT, check=True
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dependencies_digest() -> str:
    """What the locks are made from: pyproject.toml's dependencies, extras and Python range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {key: project.get(key) for key in ("requires-python", "dependencies", "optional-dependencies")}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()


def check_locks() -> None:
    """Refuse to install from locks that no longer match pyproject.toml (a dependency added but not locked)."""
    for lock in (BASE_LOCK, DEV_LOCK):
        first = lock.read_text().splitlines()[0] if lock.exists() else ""
        if first != LOCK_HEADER + dependencies_digest():
            sys.exit(
                f"{lock.relative_to(ROOT)} does not match pyproject.toml's dependencies (changed since it was "
                "written, or missing): run `python3 forge.py lock` and commit requirements/."
            )


def lock(argv: list[str]) -> None:
    """Rewrite requirements/dev.lock and base.lock from pyproject.toml with uv (installed into .venv/ if needed).

    Pins already in the locks are kept unless pyproject.toml rules them out; `lock --upgrade` moves every
    pin to the newest release allowed (other arguments go to `uv pip compile`).
    """
    check_python()
    ensure_venv()
    uv = VENV / "bin" / "uv"
    if not uv.exists():
        print(f"# installing uv into {VENV}", flush=True)
        pip_install(*uv_requirement())
    compile_ = [
        str(uv), "pip", "compile", "pyproject.toml", "--quiet", "--no-config", "--universal",
        "--python-version", "3.11", "--generate-hashes", "--default-index", PYPI,
        "--custom-compile-command", "python3 forge.py lock", *argv,
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if not key.startswith("UV_")}
    DEV_LOCK.parent.mkdir(exist_ok=True)
    header = LOCK_HEADER + dependencies_digest() + "\n"
    for path, extra in ((DEV_LOCK, ["--extra", "dev"]), (BASE_LOCK, ["--constraint", str(DEV_LOCK)])):
        # base.lock is resolved within dev.lock's pins, so a venv installed from dev.lock has base.lock's.
        print(f"# locking {path.relative_to(ROOT)}", flush=True)
        subprocess.run([*compile_, *extra, "--output-file", str(path)], cwd=ROOT, env=env, check=True)
        path.write_text(header + path.read_text().removeprefix(header))
    print("# requirements/ rewritten: `git diff requirements/` shows what moved", flush=True)


def uv_requirement() -> list[str]:
    """uv as dev.lock pins it (with its hashes), or as pyproject.toml's dev extra allows when not locked yet."""
    if DEV_LOCK.exists():
        lines = DEV_LOCK.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("uv=="):
                block = [line]
                while block[-1].endswith("\\"):
                    block.append(lines[i + len(block)])
                pinned = VENV / "uv-requirement.txt"
                pinned.write_text("\n".join(block) + "\n")
                return ["--require-hashes", "--no-deps", "-r", str(pinned)]
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    return [next(spec for spec in extra if re.match(r"uv\b", spec))]


def apt_install(packages: list[str], *, missing: str, purpose: str, otherwise: str) -> bool:
    """Install Debian `packages` with apt-get (update first), saying what runs; True when they are installed.
    `missing` says what is missing ("/usr/bin/chromium is missing"), `purpose` what for.

    Never fatal: where this cannot work (not root, no apt-get, no network) it prints why and `otherwise`
    (what that means for the test run) and returns False.
    """
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        why = "not running as root" if apt_get else "no apt-get on this machine"
        print(f"# {missing} and cannot be installed here ({why}): {otherwise}", flush=True)
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in ([apt_get, "update"], [apt_get, "install", "-y", "--no-install-recommends", *packages]):
        print(f"# {missing}, {purpose}: {' '.join(step)}", flush=True)
        done = subprocess.run(step, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stdout.splitlines()[-15:])
            print(f"{tail}\n# that failed (exit {done.returncode}): {otherwise}", flush=True)
            return False
    return True


def ensure_chromium() -> None:
    """Install Debian's chromium for the browser tests when it is missing and we are allowed to.

    Never fatal: a machine where this cannot work (not root, no apt-get, no network) still runs the rest
    of the suite, and the browser tests skip with the reason.
    """
    if CHROMIUM.exists():
        return
    if apt_install(
        ["chromium"],
        missing=f"{CHROMIUM} is missing",
        purpose="for the browser tests",
        otherwise="the browser tests will skip",
    ):
        print(f"# installed Debian's chromium at {CHROMIUM}", flush=True)


def ensure_debian_tools() -> None:
    """Install Debian's ssh-keygen (openssh-client) and openssl when either is missing and we are allowed to.

    The caretaker tests cross-check fingerprint art, certificates, CRLs and roster signatures with the real
    tools and fail without them (a cross-check that skips proves nothing), so a machine where this cannot work
    is told which tests will fail.
    """
    absent = [tool for tool in DEBIAN_TOOLS if shutil.which(tool) is None]
    if not absent:
        return
    packages = [DEBIAN_TOOLS[tool] for tool in absent]
    if apt_install(
        packages,
        missing=f"{' and '.join(absent)} {'is' if len(absent) == 1 else 'are'} missing",
        purpose="for the caretaker tests' cross-checks",
        otherwise="the caretaker tests that cross-check with them will fail",
    ):
        print(f"# installed Debian's {' and '.join(packages)}", flush=True)


def manage(*args: str) -> None:
    subprocess.run([str(PYTHON), "manage.py", *args], cwd=ROOT, check=True)


def up(argv: list[str]) -> None:
    # `--host` / `--port` among the arguments win over FORGE_HOST / FORGE_PORT, for the printed URLs as for the server.
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--host", default=os.environ.get("FORGE_HOST", "127.0.0.1"))
    where.add_argument("--port", default=os.environ.get("FORGE_PORT", "8000"))
    chosen, argv = where.parse_known_args(argv)
    host, port = chosen.host, chosen.port
    ensure_environment(dev=False)
    manage("migrate", "--noinput", "-v", "0")
    manage("demo_setup", "--host", host, "--port", port)
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), "manage.py", "runmcp", "--host", host, "--port", port, *argv])


# Run before pytest, fastest first, stopping at the first that fails: a lint or type error costs seconds,
# not a test run. FORGE_TEST_CHECKS=0 leaves them out (.ci/run's second pass, which already ran them).
CHECKS = (
    ("ruff", "check", "."),
    ("ruff", "format", "--check", "."),
    ("mypy",),  # the files and settings are pyproject.toml's [tool.mypy]
)


def run_checks() -> None:
    if os.environ.get("FORGE_TEST_CHECKS", "1") == "0":
        return
    for check in CHECKS:
        print(f"# {' '.join(check)}", flush=True)
        done = subprocess.run([str(VENV / "bin" / check[0]), *check[1:]], cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"# {' '.join(check)} failed (exit {done.returncode}): fix that first; pytest did not run")


def test(argv: list[str]) -> None:
    ensure_environment(dev=True)
    run_checks()
    ensure_chromium()
    ensure_debian_tools()
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), "-m", "pytest", *argv])


def main() -> None:
    commands = {"up": up, "test": test, "lock": lock}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit("usage: python3 forge.py up | test [pytest arguments] | lock [--upgrade]")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
