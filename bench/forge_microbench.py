"""CPU cost of each step of a Forge ``tools/call``, measured in-process, one thread, no HTTP.

It complements the py-spy profile (which shows shares) with absolute figures: CPU microseconds
(``time.process_time``) per operation, on a fresh migrated data dir with a real token and session,
using the server's own functions.  It changes nothing in the server; the "what if" rows only
time alternative queries against the same database, to size possible optimisations:

* the steps of the hot path: token lookup, session lookup, pydantic, the audit row inside its
  transaction, JSON-RPC decode/encode, and the whole ``transports.streamable.handle_post``;
* the thread hop: ``database_sync_to_async`` of a no-op and of the whole exchange, from an event loop;
* alternatives: the token and the session in one joined query, the same lookup as raw SQL, and
  several audit rows in one transaction (group commit).

Run it as ``.venv/bin/python bench/forge_microbench.py [--n 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from access.models import ClientToken, McpSession
    from mcp_api.transports.core import Exchange

ROOT = Path(__file__).resolve().parent.parent


def setup_django(data_dir: Path) -> None:
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ["FORGE_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def per_op_us(fn: Callable[[], object], n: int) -> float:
    """CPU microseconds per call of ``fn``, after a warm-up."""
    for _ in range(min(n // 10, 200)):
        fn()
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) * 1e6 / n


def per_op_us_async(make: Callable[[], object], n: int) -> float:
    """Like ``per_op_us`` for an awaitable factory, run sequentially on one event loop."""

    async def loop() -> float:
        for _ in range(min(n // 10, 200)):
            await make()
        start = time.process_time()
        for _ in range(n):
            await make()
        return (time.process_time() - start) * 1e6 / n

    return asyncio.run(loop())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="iterations per measurement")
    args = parser.parse_args()
    n = args.n

    with tempfile.TemporaryDirectory(prefix="forge-micro-") as tmp:
        setup_django(Path(tmp))
        run(n)


@dataclass(frozen=True)
class ToolsCall:
    """A ready ``tools/call server_info`` exchange on an initialized session of a fresh token."""

    raw: str
    token: ClientToken
    session: McpSession
    body: bytes
    exchange: Exchange


def prepare_tools_call() -> ToolsCall:
    """A user, a token, an open initialized session and the exchange that calls a tool on it (Django set up)."""
    from django.contrib.auth import get_user_model

    from access import services
    from access.models import McpSession, Transport
    from mcp_api.tools import ensure_loaded
    from mcp_api.transports.core import Exchange

    ensure_loaded()
    owner = get_user_model().objects.create_user(username="bench")
    new = services.do_create_token(owner=owner, label="bench")
    raw, token = new.raw, new.token
    session = services.do_open_session(token, transport=Transport.STREAMABLE_HTTP, protocol_version="2025-11-25")
    McpSession.objects.filter(pk=session.pk).update(initialized=True)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}}
    ).encode()
    headers = {
        "authorization": f"Bearer {raw}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
        "mcp-session-id": session.id,
    }
    exchange = Exchange(method="POST", path="/mcp", headers=headers, raw_headers=list(headers.items()), body=body)
    return ToolsCall(raw=raw, token=token, session=session, body=body, exchange=exchange)


def run(n: int) -> None:
    from channels.db import database_sync_to_async
    from django.db import connection, transaction

    from access import services
    from access.models import McpSession, Transport
    from audit.models import EventKind
    from audit.services import record
    from mcp_api import jsonrpc
    from mcp_api.protocol import CallContext
    from mcp_api.registry import REGISTRY
    from mcp_api.transports.answers import answer as answer_request
    from mcp_api.transports.streamable import handle_post

    call = prepare_tools_call()
    raw, token, session, body, exchange = call.raw, call.token, call.session, call.body, call.exchange
    digest = services.token_digest(raw)
    tool = REGISTRY["server_info"]
    ctx = CallContext(token=token, revision="2025-11-25", transport=Transport.STREAMABLE_HTTP, session=session)
    answer = handle_post(exchange).body
    assert answer and "result" in answer and not answer["result"]["isError"], answer

    def audit_in_transaction() -> None:
        with transaction.atomic():
            record(
                EventKind.TOOL_CALL,
                tool="server_info",
                arguments={},
                outcome="ok",
                called_by="bench",
                session=session.id,
                client_label="bench",
            )

    def empty_transaction() -> None:
        with transaction.atomic():
            connection.cursor().execute("SELECT 1")

    def group_commit(rows: int) -> Callable[[], None]:
        def write() -> None:
            with transaction.atomic():
                for _ in range(rows):
                    record(
                        EventKind.TOOL_CALL,
                        tool="server_info",
                        arguments={},
                        outcome="ok",
                        called_by="bench",
                        session=session.id,
                        client_label="bench",
                    )

        return write

    def joined_lookup() -> object:
        return (
            McpSession.objects.select_related("token__owner")
            .filter(id=session.id, token__digest=digest, ended_at__isnull=True)
            .first()
        )

    token_sql = "SELECT t.id, t.revoked_at, t.expires_at, u.is_active FROM mcp_api_clienttoken t JOIN auth_user u ON u.id = t.owner_id WHERE t.digest = %s"

    def raw_sql_lookup() -> object:
        with connection.cursor() as cursor:
            cursor.execute(token_sql, [digest])
            return cursor.fetchone()

    def tool_call_no_auth() -> object:
        return answer_request(exchange, ctx, jsonrpc.decode(body, max_depth=32))

    rows: list[tuple[str, float]] = [
        ("token lookup: services.authenticate_token", per_op_us(lambda: services.authenticate_token(raw), n)),
        ("session lookup: services.find_session", per_op_us(lambda: services.find_session(token, session.id), n)),
        ("pydantic: tool.parse({}) + model_dump", per_op_us(lambda: tool.parse({}).model_dump(mode="json"), n)),
        (
            "JSON-RPC: decode body + encode answer",
            per_op_us(lambda: jsonrpc.encode(jsonrpc.decode(body, max_depth=32)), n),
        ),
        ("JSON-RPC: encode the tools/call answer", per_op_us(lambda: jsonrpc.encode(answer), n)),
        ("transaction: BEGIN IMMEDIATE + SELECT 1 + COMMIT", per_op_us(empty_transaction, n)),
        ("audit row + its transaction (1 row, 1 commit)", per_op_us(audit_in_transaction, n)),
        ("tools/call answer without auth/session (respond)", per_op_us(tool_call_no_auth, n)),
        ("whole transports.streamable.handle_post (sync)", per_op_us(lambda: handle_post(exchange), n)),
        ("hop: database_sync_to_async(no-op)", per_op_us_async(lambda: database_sync_to_async(lambda: None)(), n)),
        (
            "hop + whole exchange (as the consumer does)",
            per_op_us_async(lambda: database_sync_to_async(handle_post)(exchange), n),
        ),
        ("what if: token+session+owner in one ORM query", per_op_us(joined_lookup, n)),
        ("what if: token lookup as raw SQL", per_op_us(raw_sql_lookup, n)),
    ]
    for size in (8, 32):
        rows.append(
            (f"what if: group commit, {size} audit rows, per row", per_op_us(group_commit(size), n // size) / size)
        )

    with contextlib.suppress(Exception):
        connection.close()
    width = max(len(name) for name, _ in rows)
    print(f"{'operation':<{width}} {'CPU us/op':>10}")
    print("-" * (width + 11))
    for name, value in rows:
        print(f"{name:<{width}} {value:>10.1f}")


if __name__ == "__main__":
    main()
