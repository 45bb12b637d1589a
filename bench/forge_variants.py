"""Size candidate optimisations of Forge end to end, without changing the server's code.

It serves the project's own ASGI application (``forge_site.asgi``) in a child process, either on
daphne configured as ``manage.py runmcp`` does or on uvicorn, and optionally swaps, in that
process only, two hot-path functions for versions that compile their SQL once:

* ``--fast-lookup``: ``services.authenticate_token`` and ``services.find_session`` run the same
  queries (token joined with its owner; the open session of that token) through SQL and
  converters prepared at start-up, instead of building a Django queryset on every call.  Every
  check still runs on every call (nothing is cached across calls, so revocation stays immediate).
* ``--fast-audit``: the tool-call audit row is written with a prepared INSERT (same columns, same
  ``sanitize``, same transaction) instead of ``Model.save``.

Then it measures JSON answers as ``bench/run_all.py`` does (sequential p50 and CPU, calls/s and
CPU under ``--clients``), one variant at a time, each on a fresh data dir::

    .venv/bin/python bench/forge_variants.py                 # all variants
    .venv/bin/python bench/forge_variants.py --variants daphne,daphne+lookup

The swaps are experiments to size a change, not a proposal for its final form.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
VARIANTS = {
    "daphne": ("daphne", False, False),
    "daphne+lookup": ("daphne", True, False),
    "daphne+lookup+audit": ("daphne", True, True),
    "uvicorn": ("uvicorn", False, False),
    "uvicorn+lookup+audit": ("uvicorn", True, True),
}


# --------------------------------------------------------------------------
# Child: serve the Forge application
# --------------------------------------------------------------------------


class PreparedSelect:
    """One SELECT over some models' concrete columns, compiled once; rows become model instances."""

    def __init__(self, models: list[Any], sql: str) -> None:
        from django.db import connection

        self.sql = sql
        self.parts = []
        for model in models:
            cols = [f.get_col(model._meta.db_table) for f in model._meta.concrete_fields]
            converters = [connection.ops.get_db_converters(c) + c.get_db_converters(connection) for c in cols]
            attnames = [f.attname for f in model._meta.concrete_fields]
            self.parts.append((model, attnames, converters, cols))

    def fetch(self, params: list[Any]) -> list[Any] | None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        instances, offset = [], 0
        for model, attnames, converters, cols in self.parts:
            values = []
            for value, col_converters, col in zip(row[offset : offset + len(cols)], converters, cols, strict=True):
                for convert in col_converters:
                    value = convert(value, col, connection)
                values.append(value)
            offset += len(cols)
            instances.append(model.from_db(connection.alias, attnames, values))
        return instances


def install_fast_lookup() -> None:
    from django.contrib.auth import get_user_model

    from access import services
    from access.models import ClientToken, McpSession
    from forge_core.tokens import CLIENT_TOKEN_PREFIX, presented_digest

    user_model = get_user_model()

    def columns(model: Any, alias: str) -> str:
        return ", ".join(f'{alias}."{f.column}"' for f in model._meta.concrete_fields)

    token_table, user_table = ClientToken._meta.db_table, user_model._meta.db_table
    owner_column = ClientToken._meta.get_field("owner").column
    token_select = PreparedSelect(
        [ClientToken, user_model],
        f'SELECT {columns(ClientToken, "t")}, {columns(user_model, "u")} FROM "{token_table}" t '
        f'INNER JOIN "{user_table}" u ON u."id" = t."{owner_column}" WHERE t."digest" = %s LIMIT 1',
    )
    session_table = McpSession._meta.db_table
    session_token_column = McpSession._meta.get_field("token").column
    session_select = PreparedSelect(
        [McpSession],
        f'SELECT {columns(McpSession, "s")} FROM "{session_table}" s WHERE s."id" = %s '
        f'AND s."{session_token_column}" = %s AND s."ended_at" IS NULL LIMIT 1',
    )
    owner_field = ClientToken._meta.get_field("owner")
    token_field = McpSession._meta.get_field("token")

    def authenticate_token(raw: str | None) -> Any:
        digest = presented_digest(raw, CLIENT_TOKEN_PREFIX)
        found = None if digest is None else token_select.fetch([digest])
        if found is None:
            return None
        token, owner = found
        owner_field.set_cached_value(token, owner)
        if not token.is_usable() or not owner.is_active:
            return None
        return token

    def find_session(token: Any, session_id: str | None) -> Any:
        if not session_id or len(session_id) > 64:
            return None
        found = session_select.fetch([session_id, token.pk])
        if found is None:
            return None
        session = found[0]
        token_field.set_cached_value(session, token)
        return session

    services.authenticate_token = authenticate_token
    services.find_session = find_session


def install_fast_audit() -> None:
    from django.db import DatabaseError, connection
    from django.utils import timezone

    from audit import services as audit_services
    from audit.models import AuditEvent
    from forge_core.errors import AuditUnavailable
    from mcp_api import protocol

    fields = [f for f in AuditEvent._meta.concrete_fields if not f.primary_key]
    names = ", ".join('"' + f.column + '"' for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f'INSERT INTO "{AuditEvent._meta.db_table}" ({names}) VALUES ({marks})'

    def record(kind: Any, *, arguments: Any = None, secret_keys: Any = (), **columns: str) -> None:
        values = {"tool": "", "outcome": "", "called_by": "", "session": "", "client_label": "", "project": ""}
        values.update(columns)
        values.update(
            ts=timezone.now(),
            kind=str(kind),
            arguments=audit_services.sanitize(dict(arguments or {}), secret_keys=secret_keys),
            outcome=values["outcome"][:200],
            called_by=values["called_by"][:200],
            client_label=values["client_label"][:200],
        )
        params = [f.get_db_prep_save(values[f.attname], connection) for f in fields]
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
        except DatabaseError as exc:
            raise AuditUnavailable(str(exc)) from exc

    protocol.record = record


def serve(server: str, port: int, fast_lookup: bool, fast_audit: bool) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge_site.settings")
    sys.path.insert(0, str(ROOT))
    if server == "daphne":
        from daphne.server import Server  # installs the asyncio reactor: import before anything else does
    from forge_site.asgi import application

    if fast_lookup:
        install_fast_lookup()
    if fast_audit:
        install_fast_audit()
    if server == "daphne":

        def ready() -> None:
            gc.collect()
            gc.freeze()
            print("ready", flush=True)

        Server(
            application=application,
            endpoints=[f"tcp:port={port}:interface={HOST}"],
            signal_handlers=True,
            action_logger=None,
            http_timeout=None,
            verbosity=0,
            ready_callable=ready,
        ).run()
    else:
        import uvicorn

        config = uvicorn.Config(
            application, host=HOST, port=port, log_level="warning", access_log=False, lifespan="off"
        )
        gc.collect()
        gc.freeze()
        uvicorn.Server(config).run()


# --------------------------------------------------------------------------
# Parent: measure each variant
# --------------------------------------------------------------------------


async def measure(names: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    import mcp_load as ml
    import run_all as ra

    ml.raise_fd_limit(4096)
    rows = []
    for name in names:
        server, lookup, audit = VARIANTS[name]

        def argv(port: int, server: str = server, lookup: bool = lookup, audit: bool = audit) -> list[str]:
            command = [ra.PYTHON, __file__, "serve", "--server", server, "--port", str(port)]
            return command + (["--fast-lookup"] if lookup else []) + (["--fast-audit"] if audit else [])

        spec = ra.ServerSpec(name, name, argv, forge=True)
        async with ra.running(spec) as running:
            figures = await ra.measure_calls(running, "json", args)
        rows.append({"variant": name, **{k: v for k, v in vars(figures).items() if k not in {"server", "mode"}}})
        print(f"  {name}: {ra._call_summary(figures)}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("serve", help="(internal) serve one variant")
    child.add_argument("--server", choices=("daphne", "uvicorn"), required=True)
    child.add_argument("--port", type=int, required=True)
    child.add_argument("--fast-lookup", action="store_true")
    child.add_argument("--fast-audit", action="store_true")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of {','.join(VARIANTS)}")
    parser.add_argument("--n", type=int, default=500, help="sequential calls")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput duration")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.server, args.port, args.fast_lookup, args.fast_audit)
        return
    names = [v for v in args.variants.split(",") if v]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    rows = asyncio.run(measure(names, args))
    print()
    print(f"{'variant':<22} {'p50 ms':>7} {'p99 ms':>7} {'seq srv':>8} {'calls/s':>8} {'load srv':>9} {'bg %':>5}")
    for r in rows:
        print(
            f"{r['variant']:<22} {r['p50_ms'] or 0:>7.2f} {r['p99_ms'] or 0:>7.2f} {r['seq_cpu_ms'] or 0:>8.3f}"
            f" {r['calls_per_s'] or 0:>8.0f} {r['load_cpu_ms'] or 0:>9.3f} {r['background_pct'] or 0:>5.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
