"""Caching hints at 2026-07-28 (SEP-2549): each cacheable result carries the `ttlMs` and `cacheScope` of what
it depends on (`mcp_api.caching`); a result at a handshake revision carries neither."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async

from mcp_api.consent import SESSION_HANDLE_META_KEY
from mcp_api.resources import GUIDELINES_URI
from projects.services import do_import_project
from tests.mcp_api.helpers import (
    allow_project,
    envelope,
    open_session,
    post,
    rpc,
    send,
    stateless_headers,
    stateless_rpc,
)
from tests.projects.conftest import MAIN, fixture_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_on")]

PRIVATE = (0, "private")
STATIC = (3_600_000, "public")


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


async def hint(token: str, method: str, params: dict[str, Any] | None = None, **meta: Any) -> tuple[int, str]:
    name = (params or {}).get("uri")
    response = await send(
        "POST",
        "/mcp",
        headers=stateless_headers(token, method, name=name),
        body=stateless_rpc(method, params, meta=envelope(**meta)),
    )
    result = response.json()["result"]
    return result["ttlMs"], result["cacheScope"]


async def test_lists_that_depend_on_who_asks_are_private_and_stale_at_once(cast):
    assert await hint(cast.operator.raw_token, "tools/list") == PRIVATE
    assert await hint(cast.operator.raw_token, "resources/list") == PRIVATE


async def test_lists_fixed_by_the_servers_code_are_public_for_an_hour(cast):
    assert await hint(cast.operator.raw_token, "resources/templates/list") == STATIC
    assert await hint(cast.operator.raw_token, "prompts/list") == STATIC


async def test_the_guidelines_are_public_for_an_hour_and_a_project_file_is_private(cast):
    await database_sync_to_async(do_import_project)(fixture_bytes(MAIN), slug="steps", acting_user="tests")
    handle = await database_sync_to_async(allow_project)(cast.operator.raw_token, "steps")

    guidelines = await hint(cast.operator.raw_token, "resources/read", {"uri": GUIDELINES_URI})
    project_file = await hint(
        cast.operator.raw_token,
        "resources/read",
        {"uri": "forge://projects/steps/draft.xml"},
        **{SESSION_HANDLE_META_KEY: handle},
    )

    assert guidelines == STATIC
    assert project_file == PRIVATE


@pytest.mark.parametrize("method", ["tools/list", "resources/list", "resources/templates/list", "prompts/list"])
async def test_a_handshake_revision_gets_no_caching_hints(cast, method):
    session_id = await open_session(cast.operator.raw_token)

    result = (await post(cast.operator.raw_token, rpc(method, {}), session_id=session_id)).json()["result"]

    assert "ttlMs" not in result and "cacheScope" not in result
