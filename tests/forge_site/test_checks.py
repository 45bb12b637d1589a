"""The deployment's system checks (forge_site.checks): each misconfiguration is named with its fix, and a
sound configuration raises none of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks

from tests.live import ROOT

FORGE_IDS = {
    "forge.W001",
    "forge.E002",
    "forge.E003",
    "forge.E004",
    "forge.E005",
    "forge.W006",
    "forge.W007",
    "forge.E008",
    "forge.W009",
}
POSTGRESQL = "django.db.backends.postgresql"
IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
REDIS = {"default": {"BACKEND": "forge_core.redis_layer.RedisChannelLayer", "CONFIG": {"hosts": ["redis://x"]}}}


def forge_messages(*, deploy: bool = True) -> dict[str, str]:
    """The Forge checks' findings by id, each with its message and hint."""
    return {
        message.id: f"{message.msg} {message.hint}"
        for message in run_checks(include_deployment_checks=deploy)
        if message.id in FORGE_IDS
    }


@pytest.fixture
def secrets_dir(tmp_path, settings):
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    (folder / "key").write_bytes(b"k")
    (folder / "key").chmod(0o600)
    settings.FORGE_SECRETS_DIR = folder
    return folder


@pytest.fixture
def projects_root(tmp_path, settings):
    root = tmp_path / "projects"
    root.mkdir()
    settings.FORGE_PROJECTS_ROOT = root
    return root


@pytest.fixture
def data_dir(tmp_path, settings, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    settings.FORGE_DATA_DIR = folder
    # The setting only, at a database not made yet: the test database itself stays as it is (the check
    # reads the file system, never the connection).
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", "forge_core.sqlite")  # the engine settings name
    monkeypatch.setitem(settings.DATABASES["default"], "NAME", str(folder / "forge.sqlite3"))
    return folder


@pytest.fixture
def ca_dir(tmp_path, settings):
    """A team CA's folder as caretaker_init_ca makes it: 0700, the key 0600, the certificate public."""
    folder = tmp_path / "team-ca"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    for name, mode in (("ca.key", 0o600), ("ca.crt", 0o644)):
        (folder / name).write_bytes(b"pem")
        (folder / name).chmod(mode)
    settings.FORGE_CA_DIR = folder
    return folder


@pytest.fixture
def sound(secrets_dir, projects_root, data_dir, ca_dir, settings):
    """A configuration none of the checks objects to."""
    settings.DEBUG = False
    settings.FORGE_HOST = "127.0.0.1"
    settings.FORGE_EXTRA_ALLOWED_HOSTS = []


def test_a_sound_configuration_raises_no_forge_check(sound):
    assert forge_messages() == {}


def test_postgresql_without_redis_warns_that_processes_would_not_share_streams(sound, settings, monkeypatch):
    # The engine's name only: the test database itself stays as it is.
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", POSTGRESQL)
    settings.CHANNEL_LAYERS = IN_MEMORY

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.W001"]
    assert "REDIS_URL" in found["forge.W001"]


def test_postgresql_with_redis_is_the_scale_out_path_and_passes(sound, settings, monkeypatch):
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", POSTGRESQL)
    settings.CHANNEL_LAYERS = REDIS

    assert forge_messages() == {}


def _pool_of(settings, monkeypatch, max_size: int) -> None:
    """PostgreSQL's engine and pool in the settings only (the test database stays as it is), 8 + 4 worker threads."""
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", POSTGRESQL)
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", {"pool": {"max_size": max_size}})
    settings.CHANNEL_LAYERS = REDIS
    settings.FORGE_WORKERS, settings.FORGE_VIEW_WORKERS = 8, 4


def test_worker_threads_that_could_hold_the_whole_pool_warn_that_they_keep_no_connection(sound, settings, monkeypatch):
    _pool_of(settings, monkeypatch, 12)

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.W009"]
    assert "FORGE_DB_POOL_MAX to at least 13" in found["forge.W009"]


def test_worker_threads_that_leave_the_pool_a_connection_pass(sound, settings, monkeypatch):
    _pool_of(settings, monkeypatch, 13)

    assert forge_messages(deploy=False) == {}


@pytest.mark.parametrize("loose", ["folder", "file"])
def test_a_secrets_folder_or_file_others_may_read_is_an_error_with_the_chmod_to_run(sound, secrets_dir, loose):
    (secrets_dir if loose == "folder" else secrets_dir / "key").chmod(0o755 if loose == "folder" else 0o644)

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.E002"]
    assert f"chmod 700 {secrets_dir}" in found["forge.E002"]


def test_a_data_folder_others_may_read_is_a_warning_with_the_chmod_to_run(sound, data_dir):
    data_dir.chmod(0o755)  # as an older version made it

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.W007"]
    assert f"chmod 700 {data_dir}" in found["forge.W007"] and "chmod 600" not in found["forge.W007"]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_database_file_others_may_read_is_a_warning_with_the_chmod_to_run(sound, data_dir, suffix):
    database = data_dir / "forge.sqlite3"
    for name in {"", suffix}:
        Path(f"{database}{name}").write_bytes(b"")
        Path(f"{database}{name}").chmod(0o600)
    Path(f"{database}{suffix}").chmod(0o644)

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.W007"]
    assert f"chmod 600 {database}{suffix} " in found["forge.W007"]
    assert "chmod 700" not in found["forge.W007"]


def test_a_private_database_file_raises_no_warning(sound, data_dir):
    database = data_dir / "forge.sqlite3"
    database.write_bytes(b"")
    database.chmod(0o600)

    assert forge_messages() == {}


def test_a_secrets_folder_of_another_user_is_an_error(sound, secrets_dir, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: secrets_dir.stat().st_uid + 1)

    assert list(forge_messages(deploy=False)) == ["forge.E003"]


@pytest.mark.parametrize(("host", "extra"), [("0.0.0.0", []), ("192.0.2.10", []), ("127.0.0.1", ["forge.example"])])
def test_debug_with_a_bind_or_host_name_beyond_loopback_is_an_error(sound, settings, host, extra):
    settings.DEBUG = True
    settings.FORGE_HOST = host
    settings.FORGE_EXTRA_ALLOWED_HOSTS = extra

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.E004"]
    assert "FORGE_DEBUG" in found["forge.E004"] and (extra[0] if extra else host) in found["forge.E004"]


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"])
def test_debug_on_loopback_is_allowed(sound, settings, host):
    settings.DEBUG = True
    settings.FORGE_HOST = host

    assert forge_messages(deploy=False) == {}


def test_a_projects_root_that_is_a_file_is_an_error(sound, settings, tmp_path):
    settings.FORGE_PROJECTS_ROOT = tmp_path / "file"
    (tmp_path / "file").write_text("not a folder")

    assert list(forge_messages(deploy=False)) == ["forge.E005"]


def test_a_projects_root_without_write_permission_is_an_error(sound, projects_root, monkeypatch):
    # The tests run as root in CI, whom no mode stops: the operating system's answer is the seam.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if path == projects_root else real_access(path, mode))

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.E005"]
    assert "not writable" in found["forge.E005"]


def test_a_projects_root_that_does_not_exist_yet_is_made_on_first_use(sound, settings, tmp_path):
    settings.FORGE_PROJECTS_ROOT = tmp_path / "later" / "projects"

    assert forge_messages() == {}


def test_demo_credentials_are_a_deploy_warning_only(sound, secrets_dir):
    (secrets_dir / "demo-token").write_text("fmcp_x")
    (secrets_dir / "demo-token").chmod(0o600)

    assert forge_messages(deploy=False) == {}
    assert list(forge_messages(deploy=True)) == ["forge.W006"]


def test_manage_py_check_deploy_names_each_misconfiguration_of_a_real_environment(tmp_path):
    data = tmp_path / "data"
    (data / "secrets").mkdir(parents=True, mode=0o755)
    (data / "secrets").chmod(0o755)  # mkdir's mode is masked by the umask
    (data / "projects").write_text("a file where the projects folder should be")
    env = {
        **os.environ,
        "FORGE_DATA_DIR": str(data),
        "FORGE_SECRETS_DIR": str(data / "secrets"),
        "FORGE_PROJECTS_ROOT": str(data / "projects"),
        "DATABASE_URL": "postgres://nobody@127.0.0.1:9/none",
        "REDIS_URL": "",
        "FORGE_DEBUG": "1",
        "FORGE_HOST": "0.0.0.0",
    }

    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert done.returncode == 1  # errors stop the command (and runmcp, which runs the checks first)
    for check_id in ("forge.W001", "forge.E002", "forge.E004", "forge.E005"):
        assert f"({check_id})" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("loose", ["folder", "key"])
def test_a_ca_key_others_may_read_is_an_error_with_the_chmod_to_run(sound, ca_dir, loose):
    (ca_dir if loose == "folder" else ca_dir / "ca.key").chmod(0o755 if loose == "folder" else 0o644)

    found = forge_messages(deploy=False)

    assert list(found) == ["forge.E008"]
    assert f"chmod 700 {ca_dir} && chmod 600 {ca_dir / 'ca.key'}" in found["forge.E008"]
