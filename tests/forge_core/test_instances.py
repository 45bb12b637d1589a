"""Instance and binding records: private files written whole, found while their process lives, pruned after;
never a token or a path in them; a token file others may read is refused."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from forge_core import instances


@pytest.fixture
def runtime(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "runtime"
    monkeypatch.setenv("FORGE_RUNTIME_DIR", str(folder))
    return folder


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_instance_record_is_private_names_the_urls_and_pid_and_no_path(tmp_path):
    data = tmp_path / "data"
    data.mkdir()

    path = instances.publish_instance(data, ["http://127.0.0.1:8123"])

    assert mode_of(path.parent) == 0o700
    assert mode_of(path) == 0o600
    content = json.loads(path.read_text())
    assert content["pid"] == os.getpid()
    assert content["urls"] == ["http://127.0.0.1:8123"]
    assert str(data) not in path.read_text()
    assert [found.mcp_url for found in instances.live_instances(data)] == ["http://127.0.0.1:8123/mcp"]
    assert list(path.parent.glob(".*.tmp")) == []  # written through a temporary file, renamed over


def test_a_record_whose_process_is_gone_is_pruned_by_the_reader(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    path = instances.publish_instance(data, ["http://127.0.0.1:8123"])
    stale = path.with_name(f"{dead_pid()}.json")
    stale.write_text(path.read_text().replace(f'"pid": {os.getpid()}', f'"pid": {stale.stem}'))
    unreadable = path.with_name("999.json")
    unreadable.write_text("{not json")

    live = instances.live_instances(data)

    assert [found.pid for found in live] == [os.getpid()]
    assert not stale.exists()
    assert not unreadable.exists()


def test_a_record_copied_from_another_data_folder_is_not_this_ones_server(tmp_path):
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    path = instances.publish_instance(one, ["http://127.0.0.1:8123"])
    (other / "instances").mkdir(mode=0o700)
    (other / "instances" / path.name).write_text(path.read_text())

    assert instances.live_instances(other) == []


def test_withdraw_removes_both_records(tmp_path, runtime):
    data = tmp_path / "data"
    data.mkdir()
    record = instances.publish_instance(data, ["http://127.0.0.1:8123"])
    binding = instances.publish_binding(data, [tmp_path / "line.xml"])

    instances.withdraw(data)

    assert not record.exists()
    assert not binding.exists()


def test_binding_records_name_files_by_digest_and_only_other_live_deployments_count(tmp_path, runtime):
    one, other = tmp_path / "one", tmp_path / "other"
    shared = tmp_path / "projects" / "line.xml"
    instances.publish_binding(one, [shared])
    record = instances.binding_path(one)
    assert mode_of(runtime) == 0o700
    assert mode_of(record) == 0o600
    assert str(shared) not in record.read_text()
    # The other deployment's server, as its record says (a live pid; this test's parent stands in for it).
    content = json.loads(record.read_text())
    elsewhere = runtime / f"{instances.data_fingerprint(other)[:32]}-{os.getppid()}.json"
    elsewhere.write_text(
        json.dumps({**content, "pid": os.getppid(), "data_fingerprint": instances.data_fingerprint(other)})
    )
    gone = runtime / f"{instances.data_fingerprint(other)[:32]}-{dead_pid()}.json"
    gone.write_text(json.dumps({**content, "pid": int(gone.stem.split("-")[1])}))

    seen_from_one = instances.other_bindings(one)

    assert [(b.pid, b.files) for b in seen_from_one] == [(os.getppid(), {instances.file_digest(shared)})]
    assert not gone.exists()
    assert [b.pid for b in instances.other_bindings(other)] == [os.getpid()]


def test_a_runtime_folder_others_may_enter_is_refused_and_not_read(tmp_path, runtime):
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)

    with pytest.raises(instances.UnsafeFolder, match="chmod 700"):
        instances.publish_binding(tmp_path / "data", [tmp_path / "line.xml"])
    assert instances.other_bindings(tmp_path / "data") == []


def test_a_token_file_others_may_read_is_refused_saying_chmod_600(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    token.chmod(0o644)

    with pytest.raises(instances.LooseTokenFile, match=f"chmod 600 {token}"):
        instances.read_token_file(token)
    token.chmod(0o600)
    assert instances.read_token_file(token) == "secret-token"
