"""`runmcp --server uvicorn` refuses what it cannot serve, with a clear message and before anything starts: HTTPS
(only daphne's listener hands on the client certificate) and a missing `uvicorn` extra."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from forge_site import uvicorn_server
from forge_site.management.commands import runmcp


@pytest.fixture(autouse=True)
def nothing_is_served(monkeypatch):
    def serve(*args, **kwargs):
        raise AssertionError("runmcp started serving instead of refusing")

    monkeypatch.setattr(uvicorn_server, "serve", serve)


@pytest.mark.parametrize("options", [["--tls-port", "8443"], ["--tls-port", "8443", "--no-http"], ["--no-http"]])
def test_uvicorn_with_https_is_refused_saying_to_use_daphne(options):
    with pytest.raises(CommandError, match="use --server daphne for HTTPS"):
        call_command("runmcp", "--server", "uvicorn", "--port", "8000", *options)


def test_uvicorn_without_its_extra_is_refused_saying_how_to_install_it(monkeypatch):
    monkeypatch.setattr(runmcp, "missing_uvicorn_packages", lambda: ["uvloop", "httptools"])
    with pytest.raises(CommandError) as refused:
        call_command("runmcp", "--server", "uvicorn", "--port", "8000")
    message = str(refused.value)
    assert "uvloop, httptools cannot be imported" in message
    assert "pip install" in message
    assert "--server daphne" in message


def test_the_uvicorn_extra_is_installed_in_the_test_environment():
    # The dev extra carries uvicorn's; without it the live uvicorn tests would test nothing.
    assert runmcp.missing_uvicorn_packages() == []
