"""`runmcp` refuses to serve on a database cut back behind the checkpoint kept beside the mirror, naming
both sizes (audit.E001) and the mirror lines past its end (audit.E002), while `audit_verify` still runs
to say what differs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.live import ROOT, free_port, manage, scratch_database, server_env

pytestmark = pytest.mark.live

SIGNED, KEPT = 10, 4

CUT_BACK = f"""
from audit.services import do_make_checkpoint
from tests.audit.helpers import append_events, cut_the_log_back_to

append_events({SIGNED})
assert do_make_checkpoint().size == {SIGNED}
cut_the_log_back_to({KEPT})
"""


def test_runmcp_refuses_to_start_on_a_database_behind_the_kept_checkpoint(tmp_path):
    with scratch_database() as database:
        env = server_env(tmp_path, FORGE_AUDIT_CHECKPOINT_EVERY="0", **database)
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "shell", "--no-imports", "-c", CUT_BACK)

        started = subprocess.run(
            [sys.executable, "manage.py", "runmcp", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,  # a server that starts serving never exits by itself: the bound fails the test
        )
        verified = subprocess.run(
            [sys.executable, "manage.py", "audit_verify"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert started.returncode != 0
    assert "listening" not in started.stdout
    assert f"(audit.E001) The audit log in the database holds {KEPT} events but the kept checkpoint" in started.stderr
    assert f"saw {SIGNED}: the database was rolled back" in started.stderr
    assert f"(audit.E002) The audit mirror {tmp_path / 'audit' / 'audit.jsonl'} holds" in started.stderr
    assert verified.returncode == 1
    assert verified.stdout.startswith(f"FAILED at event {KEPT + 1}: the log holds {KEPT} events but the kept")
