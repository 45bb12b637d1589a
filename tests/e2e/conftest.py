"""A live daphne server shared by the end-to-end tests of one session, and the async test backend."""

from __future__ import annotations

import pytest

from tests.live import prepare, run_server, scratch_database


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="session")
def forge_server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("live")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database)
        with run_server(env, token, data_dir) as server:
            yield server
