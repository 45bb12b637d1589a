"""The fixed cast every test shares, built once per test database.

An operator with rights, a second operator without rights on projects, a caretaker, and a client
token for each. Raw token values live only in these fixtures; the database holds their digests.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission, User
from django.db import connection

from access.models import ClientToken
from access.services import do_create_token
from caretaker import activation, services
from caretaker.models import ACCEPTANCE_SENTENCE
from console.operators import do_create_operator
from mcp_api.tools import ensure_loaded

ensure_loaded()


@dataclass(frozen=True)
class Member:
    user: object
    token: ClientToken
    raw_token: str


def _member(name: str, *, operator: bool) -> Member:
    if operator:
        user, _ = do_create_operator(name, f"{name}-password-123", acting_user="tests")
    else:
        user = get_user_model().objects.create_user(username=name)
    new = do_create_token(owner=user, label=f"{name}-client", acting_user="tests")
    return Member(user=user, token=new.token, raw_token=new.raw)


@dataclass(frozen=True)
class Cast:
    operator: Member
    other_operator: Member
    caretaker: Member


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    # The cast's operators get passwords; the production hasher would spend most of each test on them.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def cast(db) -> Cast:
    return Cast(
        operator=_member("olivia", operator=True),
        other_operator=_member("oscar", operator=True),
        caretaker=_member("carla", operator=False),
    )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, dropped cleanly on PostgreSQL too.

    Connections are persistent (`CONN_MAX_AGE=None`), so each worker thread the async tests ran ORM
    calls in still holds one at the end, and PostgreSQL refuses to drop a database in use. End those
    sessions first; SQLite needs nothing.
    """
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def pytest_configure(config) -> None:
    """The run's own runtime folder for the binding and instance records of every server it starts
    (`forge_core.instances`), so neither a server the developer runs beside the tests nor a record left by
    an earlier run changes what the tests see (the dashboard's two-writers panel, discovery)."""
    if "FORGE_RUNTIME_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="forge-test-runtime-")
        os.environ["FORGE_RUNTIME_DIR"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    # The SQLite test database is a file in WAL mode: a write-ahead log left by an interrupted run must not
    # be replayed into the new database the run creates under the same name.
    config.add_cleanup(_remove_test_database_logs)
    _remove_test_database_logs()


def _remove_test_database_logs() -> None:
    from django.conf import settings

    database = settings.DATABASES["default"]
    name = database.get("TEST", {}).get("NAME")
    if name and "sqlite" in database["ENGINE"]:
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{name}{suffix}").unlink(missing_ok=True)


def pytest_collection_modifyitems(config, items) -> None:
    """In-process tests first, then the ones that start real servers: fast feedback comes first."""
    items.sort(key=lambda item: item.get_closest_marker("live") is not None)


def append_only_triggers():
    """The audit migration's trigger functions, for tests that must drop and restore them."""
    return importlib.import_module("audit.migrations.0002_append_only_triggers")


def set_append_only_triggers(enabled: bool) -> None:
    module = append_only_triggers()
    with connection.schema_editor(atomic=False) as editor:
        if enabled:
            module.create(None, editor)
        else:
            module.drop_triggers(None, editor, keep_function=True)


@pytest.fixture(autouse=True)
def _audit_tables_flushable(request):
    """Transactional tests end with a flush (DELETE of every row), which the audit triggers refuse:
    lift them for that flush only, and put them back before the next test."""
    marker = request.node.get_closest_marker("django_db")
    if not (marker and marker.kwargs.get("transaction")) and "transactional_db" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("transactional_db")
    set_append_only_triggers(True)
    yield
    set_append_only_triggers(False)


@pytest.fixture(autouse=True, scope="session")
def _audit_files_in_a_temporary_place(tmp_path_factory):
    """The audit mirror and keys of the test run live in a temporary folder, never in the checkout's var/."""
    from django.conf import settings

    from audit import keys
    from confirmations import sealing

    folder = tmp_path_factory.mktemp("forge-data")
    settings.FORGE_AUDIT_LOG = folder / "audit" / "audit.jsonl"
    settings.FORGE_SECRETS_DIR = folder / "secrets"
    keys.hmac_key.cache_clear()
    keys.signing_key.cache_clear()
    sealing.clear_key_cache()
    yield


@pytest.fixture(autouse=True)
def _audit_mirror_of_its_own(tmp_path_factory) -> None:
    """Every test starts with an empty database, so its audit mirror (and the checkpoint kept beside it) starts
    empty too: lines an earlier test left would lie past the log's end, and the next append refuses those."""
    from django.conf import settings

    settings.FORGE_AUDIT_LOG = tmp_path_factory.mktemp("audit") / "audit.jsonl"


@pytest.fixture
def root(settings, tmp_path) -> Path:
    """The test's own projects root (FORGE_PROJECTS_ROOT), empty at the start."""
    root = tmp_path / "projects"
    root.mkdir()
    settings.FORGE_PROJECTS_ROOT = root
    return root.resolve()


@pytest.fixture
def mcp_on(db) -> None:
    """An operator has switched MCP on (a fresh install starts with it off)."""
    from access.services import do_switch_mcp

    do_switch_mcp(True, acting_user="tests")


# --- the caretaker's team (DESIGN section 10) -------------------------------------------------------------


@dataclass(frozen=True)
class Team:
    folder: Path
    caretaker: User


@pytest.fixture
def team(settings, tmp_path, db) -> Team:
    """Override mode on, the caretaker's folders in this test's tmp_path, and a caretaker user (no CA yet)."""
    settings.FORGE_OVERRIDE_SECURITIES = True
    settings.FORGE_CA_DIR = tmp_path / "secrets" / "team-ca"
    settings.FORGE_TRUST_DIR = tmp_path / "trust"
    settings.FORGE_ROSTER_DIR = tmp_path / "roster"
    user = User.objects.create_user("cora", password="cora-password-123", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="act_as_caretaker"),
        Permission.objects.get(codename="decide_confirmation"),
    )
    return Team(tmp_path, User.objects.get(pk=user.pk))


@pytest.fixture
def active(team) -> Team:
    """The caretaker active: an Ed25519 team CA and the sentence typed."""
    services.do_create_ca("ed25519", actor="cora")
    activation.do_activate(team.caretaker, ACCEPTANCE_SENTENCE)
    assert activation.is_caretaker()
    return team
