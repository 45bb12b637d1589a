"""`python3 forge.py test` installs Debian's chromium for the browser tests, and ssh-keygen and openssl for
the caretaker tests' cross-checks, when they are missing and it may (root, apt-get), says what it runs, and
never stops the test run when it cannot."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import forge


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
