"""`runmcp --server uvicorn` refuses what it cannot serve, with a clear message and before anything starts: HTTPS
(only daphne's listener hands on the client certificate) and a missing `uvicorn` extra."""

from __future__ import annotations

import gc
import sys

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError

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


@pytest.fixture
def interpreter_restored():
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    sys.setswitchinterval(interval)


def test_serving_freezes_the_start_up_heap_and_applies_the_collector_and_switch_settings(
    settings, interpreter_restored
):
    settings.FORGE_GC_YOUNG_OBJECTS, settings.FORGE_GIL_SWITCH_MS = 4321, 0.3
    older = gc.get_threshold()[1:]
    loaded_at_start = object.__new__(type("LoadedAtStart", (), {}))  # a tracked object that lives on

    runmcp.settle_interpreter()

    assert gc.get_threshold() == (4321, *older)  # only the youngest generation's threshold moves
    assert sys.getswitchinterval() == pytest.approx(0.0003)
    assert gc.get_freeze_count() > 0
    assert not any(o is loaded_at_start for o in gc.get_objects())  # frozen: no pass walks it


class OneRound:
    """A stop event that lets a loop run once."""

    def __init__(self) -> None:
        self.waits = 0

    def wait(self, seconds: float) -> bool:
        self.waits += 1
        return self.waits > 1


def test_housekeeping_does_each_chore_even_when_another_fails(monkeypatch, caplog):
    done: list[str] = []

    def failing() -> int:
        raise DatabaseError("database is locked")

    monkeypatch.setattr(runmcp, "prune_ended", failing)
    monkeypatch.setattr(runmcp, "purge_expired_tasks", lambda: done.append("tasks") or 3)
    monkeypatch.setattr(runmcp, "close_old_connections", lambda: None)

    runmcp.housekeeping_loop(OneRound())  # type: ignore[arg-type]

    assert done == ["tasks"]
    assert "could not delete the resource subscriptions of ended sessions" in caplog.text
    assert "deleted 3 finished tasks past their ttl" in caplog.text
