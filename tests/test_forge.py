"""`python3 forge.py test` installs Debian's chromium for the browser tests, and ssh-keygen and openssl for
the caretaker tests' cross-checks, when they are missing and it may (root, apt-get), says what it runs, and
never stops the test run when it cannot. `up` after `test` leaves the virtualenv as it is, and every `up`
after the first keeps the demo operator's password (and so every browser logged in as it)."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.http import HttpRequest

import forge
from audit.models import AuditEvent, EventKind
from tests.test_forge_locks import installs

__all__ = ["installs"]  # a fixture the commands below build on

ENSURE_VENV = forge.ensure_venv


@pytest.fixture
def ran(monkeypatch, tmp_path) -> list[list[str]]:
    """The commands ensure_chromium runs (each succeeds); /usr/bin/chromium stands at a missing path."""
    commands: list[list[str]] = []

    def run(command, **options):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="")

    monkeypatch.setattr(forge, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(forge.subprocess, "run", run)
    monkeypatch.setattr(forge.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(forge.os, "geteuid", lambda: 0)
    return commands


def test_as_root_with_apt_get_it_updates_once_then_installs_chromium_without_recommends(ran, capsys):
    forge.ensure_chromium()

    assert ran == [
        ["/usr/bin/apt-get", "update"],
        ["/usr/bin/apt-get", "install", "-y", "--no-install-recommends", "chromium"],
    ]
    out = capsys.readouterr().out
    assert "apt-get update" in out and "apt-get install -y --no-install-recommends chromium" in out


def test_with_chromium_present_it_runs_nothing(ran, capsys):
    forge.CHROMIUM.write_text("")

    forge.ensure_chromium()

    assert ran == []
    assert capsys.readouterr().out == ""


def test_not_root_it_runs_nothing_and_says_the_browser_tests_will_skip(ran, monkeypatch, capsys):
    monkeypatch.setattr(forge.os, "geteuid", lambda: 1000)

    forge.ensure_chromium()

    assert ran == []
    assert "(not running as root): the browser tests will skip" in capsys.readouterr().out


def test_without_apt_get_it_runs_nothing_and_says_why(ran, monkeypatch, capsys):
    monkeypatch.setattr(forge.shutil, "which", lambda name: None)

    forge.ensure_chromium()

    assert ran == []
    assert "(no apt-get on this machine): the browser tests will skip" in capsys.readouterr().out


def test_a_failed_update_stops_there_shows_apt_output_and_does_not_raise(ran, monkeypatch, capsys):
    def failing(command, **options):
        ran.append(command)
        return subprocess.CompletedProcess(command, 100, stdout="E: Could not resolve 'deb.debian.org'")

    monkeypatch.setattr(forge.subprocess, "run", failing)

    forge.ensure_chromium()

    assert ran == [["/usr/bin/apt-get", "update"]]
    out = capsys.readouterr().out
    assert "E: Could not resolve" in out
    assert "that failed (exit 100): the browser tests will skip" in out


def test_the_browser_fixture_launches_the_same_binary_forge_installs():
    from tests.browser.conftest import CHROMIUM

    assert forge.CHROMIUM == CHROMIUM == Path("/usr/bin/chromium")


def test_missing_ssh_keygen_and_openssl_are_installed_from_debian_in_one_apt_get_install(ran, monkeypatch, capsys):
    monkeypatch.setattr(forge.shutil, "which", lambda name: None if name in forge.DEBIAN_TOOLS else f"/usr/bin/{name}")

    forge.ensure_debian_tools()

    assert ran == [
        ["/usr/bin/apt-get", "update"],
        ["/usr/bin/apt-get", "install", "-y", "--no-install-recommends", "openssh-client", "openssl"],
    ]
    out = capsys.readouterr().out
    assert "# ssh-keygen and openssl are missing, for the caretaker tests' cross-checks: " in out
    assert "# installed Debian's openssh-client and openssl" in out


def test_with_ssh_keygen_and_openssl_present_it_runs_nothing(ran, capsys):
    forge.ensure_debian_tools()

    assert ran == []
    assert capsys.readouterr().out == ""


def test_without_root_a_missing_openssl_is_reported_as_failing_the_caretaker_tests(ran, monkeypatch, capsys):
    monkeypatch.setattr(forge.shutil, "which", lambda name: None if name == "openssl" else f"/usr/bin/{name}")
    monkeypatch.setattr(forge.os, "geteuid", lambda: 1000)

    forge.ensure_debian_tools()

    assert ran == []
    assert (
        "# openssl is missing and cannot be installed here (not running as root): the caretaker tests that "
        "cross-check with them will fail" in capsys.readouterr().out
    )


# --- up after test ----------------------------------------------------------------------------------


class Exec(Exception):
    """Where forge.py would replace itself with runmcp or pytest: the command ends there."""


@pytest.fixture
def commands(installs, monkeypatch, tmp_path) -> list[list[str]]:
    """forge.py in a checkout (the real locks, see `installs`) whose venv exists; records the commands it runs
    (each succeeds), stops at its exec, and finds chromium, ssh-keygen and openssl present."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    monkeypatch.setattr(forge, "VENV", venv)
    monkeypatch.setattr(forge, "PYTHON", venv / "bin" / "python")
    monkeypatch.setattr(forge, "ensure_venv", ENSURE_VENV)  # the real check: a venv made again would say so
    ran: list[list[str]] = []

    def run(command, **options):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="")

    def execv(path, argv):
        raise Exec(argv)

    monkeypatch.setattr(forge.subprocess, "run", run)
    monkeypatch.setattr(forge.os, "execv", execv)
    monkeypatch.setattr(forge.os, "chdir", lambda path: None)
    monkeypatch.setattr(forge, "CHROMIUM", tmp_path / "chromium")
    forge.CHROMIUM.write_text("")
    monkeypatch.setattr(forge.shutil, "which", lambda name: f"/usr/bin/{name}")
    return ran


def test_up_after_test_neither_makes_the_venv_again_nor_installs_anything(commands, installs, capsys):
    with pytest.raises(Exec, match="pytest"):
        forge.test([])
    capsys.readouterr()

    with pytest.raises(Exec, match="runmcp"):
        forge.up([])

    assert installs == [forge.DEV_LOCK]
    out = capsys.readouterr().out
    assert "# creating" not in out and "# installing" not in out
    assert [command[2:] for command in commands if "manage.py" in command] == [
        ["migrate", "--noinput", "-v", "0"],
        ["demo_setup", "--host", "127.0.0.1", "--port", "8000"],
    ]


def test_up_serves_and_prints_the_host_and_port_given_as_arguments(commands, installs, monkeypatch):
    monkeypatch.setenv("FORGE_PORT", "8100")
    with pytest.raises(Exec) as served:
        forge.up(["--port", "9000", "--host=127.0.0.2", "--server", "uvicorn"])

    assert ["demo_setup", "--host", "127.0.0.2", "--port", "9000"] in [command[2:] for command in commands]
    assert served.value.args[0][2:] == ["runmcp", "--host", "127.0.0.2", "--port", "9000", "--server", "uvicorn"]


# --- the demo operator's password -------------------------------------------------------------------

DEMO_FILES = ("demo-operator-password", "demo-token")


@pytest.fixture
def first_up(db, root) -> str:
    """What the quickstart's demo_setup prints on a fresh install (no demo secrets kept yet)."""
    for name in DEMO_FILES:
        (settings.FORGE_SECRETS_DIR / name).unlink(missing_ok=True)
    return demo_setup()


def demo_setup() -> str:
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    return out.getvalue()


def demo_password() -> str:
    return (settings.FORGE_SECRETS_DIR / "demo-operator-password").read_text().strip()


def logged_in(client, password: str) -> bool:
    return client.login(request=HttpRequest(), username="operator", password=password)


def test_the_first_up_prints_the_demo_operators_password_and_it_logs_in(first_up, client):
    assert f"(login operator / {demo_password()})" in first_up
    assert logged_in(client, demo_password())


def test_a_later_up_keeps_the_password_and_a_logged_in_browser_stays_logged_in(first_up, client):
    password = demo_password()
    assert logged_in(client, password)

    again = demo_setup()

    assert client.get("/console/").status_code == 200  # not sent back to the login page
    assert password not in again
    assert "login operator, with the password printed when it was made" in again
    assert demo_password() == password
    outcomes = AuditEvent.objects.filter(kind=EventKind.OPERATOR_CREATED).values_list("outcome", flat=True)
    assert list(outcomes.order_by("seq")) == ["created", "kept"]


def test_a_password_the_operator_changed_survives_the_next_up(first_up, client):
    operator = get_user_model().objects.get(username="operator")
    operator.set_password("a-new-password-of-its-own")
    operator.save()

    demo_setup()

    assert logged_in(client, "a-new-password-of-its-own")
    assert not logged_in(client, demo_password())
