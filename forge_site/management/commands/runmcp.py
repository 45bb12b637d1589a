"""`python manage.py runmcp`: serve MCP, the console and the API with daphne (the default) or uvicorn.

`--server` (FORGE_SERVER) picks the HTTP server: daphne on Twisted, which alone serves HTTPS and mTLS
(forge_site/tls_server.py), or uvicorn with uvloop and httptools (the optional `uvicorn` extra,
forge_site/uvicorn_server.py), which spends less CPU per call. Either way the same application runs with the
same start-up work (`start_serving_work`).

It serves the whole application and runs the process's background work (contract recovery at start-up,
its instance and binding records (forge_core.instances, removed at a clean stop), audit checkpoints,
confirmation expiry, following the outbox of messages that `manage.py` commands send to open streams,
watching the roster's incoming/ folder, signing the caretaker's roster again before it expires), none of it
one edge's, so it belongs to the composition root.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import resource
import sys
import threading

from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.routing import get_default_application
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.db import DatabaseError, close_old_connections

from access import outbox
from access.tls import TlsSetupError, mark_serving, server_certificate
from audit.services import checkpoint_if_due
from caretaker.ca import cert_fingerprint
from caretaker.randomart import key_art
from caretaker.services import refresh_roster_if_due
from caretaker.watch import watch_incoming
from confirmations.services import expire_due, recover
from forge_core import instances
from forge_core.env import envint, envstr
from forge_core.errors import AuditUnavailable, Refusal
from forge_core.live import mark_outside_server
from mcp_api.resource_updates import prune_ended
from mcp_api.tasks import purge_expired as purge_expired_tasks
from projects import read_pool, writers

logger = logging.getLogger("forge.server")
EXPIRY_SWEEP_SECONDS = 2.0
ROSTER_REFRESH_SECONDS = 600.0
HOUSEKEEPING_SECONDS = 300.0
BINDING_REFRESH_SECONDS = 30.0
# What `--server uvicorn` runs on: the `uvicorn` extra of pyproject.toml.
UVICORN_EXTRA = ("uvicorn", "uvloop", "httptools")


def twisted_endpoint(host: str, port: int) -> str:
    # Twisted endpoint strings use ':' as a separator, so an IPv6 interface needs its colons escaped.
    interface = host.strip("[]").replace(":", r"\:")
    return f"tcp:port={port}:interface={interface}"


def raise_open_files_limit() -> int:
    """Lift the soft limit on open files to the hard one: every open stream holds a socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def checkpoint_loop(stop: threading.Event) -> None:
    """Sign audit checkpoints on FORGE_AUDIT_CHECKPOINT_EVERY's seconds cadence until the server stops."""
    interval = max(1.0, min(60.0, settings.FORGE_AUDIT_CHECKPOINT_SECONDS / 4))
    while not stop.wait(interval):
        close_old_connections()
        try:
            checkpoint_if_due()
        except AuditUnavailable:
            logger.exception("could not sign an audit checkpoint; will try again")


def expiry_loop(stop: threading.Event) -> None:
    """Expire pending confirmations as their time passes, so a waiting client hears of it at once."""
    while not stop.wait(EXPIRY_SWEEP_SECONDS):
        close_old_connections()
        try:
            expire_due()
        except (AuditUnavailable, DatabaseError):
            logger.exception("could not expire pending confirmations; will try again")


def housekeeping_loop(stop: threading.Event) -> None:
    """Delete what only takes room: the resource subscriptions of ended sessions
    (mcp_api.resource_updates.prune_ended) and the finished tasks kept past their ttl (mcp_api.tasks.purge_expired)."""
    chores = (
        (prune_ended, "resource subscriptions of ended sessions"),
        (purge_expired_tasks, "finished tasks past their ttl"),
    )
    while not stop.wait(HOUSEKEEPING_SECONDS):
        close_old_connections()
        for chore, what in chores:
            try:
                removed = chore()
            except DatabaseError:
                logger.exception("could not delete the %s; will try again", what)
                continue
            if removed:
                logger.info("deleted %d %s", removed, what)


def roster_refresh_loop(stop: threading.Event) -> None:
    """Sign the caretaker's roster again before it expires (caretaker.services.refresh_roster_if_due)."""
    while not stop.wait(ROSTER_REFRESH_SECONDS):
        close_old_connections()
        try:
            signed = refresh_roster_if_due()
        except (Refusal, DatabaseError, OSError) as exc:
            logger.warning("could not sign the roster again (%s: %s); will try again", type(exc).__name__, exc)
            continue
        if signed is not None:
            logger.info(
                "signed the roster again before it expires (contract %s, %s)", signed.memorable_id, signed.state
            )


def records_loop(stop: threading.Event, urls: list[str]) -> None:
    """Keep this server's instance and binding records current (a project bound since, a record deleted by
    hand) until the server stops; `forge_core.instances` says what they are for."""
    while True:
        try:
            writers.publish()  # the database is read here, off the server's event loop
        except DatabaseError:
            logger.exception("could not list the bound project files; will try again")
        if stop.wait(BINDING_REFRESH_SECONDS):
            return
        close_old_connections()
        publish_instance(urls)


def publish_instance(urls: list[str]) -> None:
    try:
        instances.publish_instance(settings.FORGE_DATA_DIR, urls)
    except (instances.UnsafeFolder, OSError) as exc:
        logger.warning("cannot write this server's instance record (%s); mcp_stdio needs --url to find it", exc)


def recover_contracts(stdout) -> None:
    """Before serving: contracts an ended process left in flight go to reconciliation, never re-sent."""
    for contract in recover(actor="startup"):
        stdout.write(f"Recovery: contract {contract.memorable_id} ({contract.label}) is now {contract.state}.")


def missing_uvicorn_packages() -> list[str]:
    """The packages of the `uvicorn` extra this Python cannot import."""
    return [name for name in UVICORN_EXTRA if importlib.util.find_spec(name) is None]


def settle_interpreter() -> None:
    """Tune the interpreter for serving, once start-up has loaded what lives for the whole process."""
    # Everything loaded at start-up lives for the whole process; freezing it keeps the cyclic collector from
    # walking the Twisted + Django heap on every gen-2 pass (p99 35 -> 21 ms).
    gc.collect()
    gc.freeze()
    # A larger youngest generation lets a heavy read's short-lived objects die before a pass promotes them, so the
    # oldest generation's pass, which walks every cached project and stops every thread, comes rarely.
    gc.set_threshold(settings.FORGE_GC_YOUNG_OBJECTS, *gc.get_threshold()[1:])
    # A worker thread busy in Python (a check of a 50,000-variable project) holds the GIL until the interpreter
    # asks it to switch; the event loop, which every other request passes through several times, waited up to
    # the default 5 ms each time (bench/hol_bench.py).
    sys.setswitchinterval(settings.FORGE_GIL_SWITCH_MS / 1000)


def start_serving_work(stdout: OutputWrapper, urls: list[str], stop: threading.Event) -> list[asyncio.Task]:
    """What a server does once it listens, on its own event loop, whichever server it is: settle the interpreter, say
    where it listens, start the background threads (until `stop` is set) and the tasks on the loop (the roster
    watcher, the outbox follower), which the caller holds so they are not collected."""
    settle_interpreter()
    for url in urls:
        stdout.write(f"Forge MCP listening on {url}/mcp (legacy SSE {url}/sse, console {url}/console/)")
    stdout.flush()
    if settings.FORGE_AUDIT_CHECKPOINT_SECONDS:
        threading.Thread(target=checkpoint_loop, args=(stop,), name="audit-checkpoints", daemon=True).start()
    threading.Thread(target=expiry_loop, args=(stop,), name="confirmation-expiry", daemon=True).start()
    threading.Thread(target=housekeeping_loop, args=(stop,), name="housekeeping", daemon=True).start()
    threading.Thread(target=roster_refresh_loop, args=(stop,), name="roster-refresh", daemon=True).start()
    publish_instance(urls)  # before the first client looks: mcp_stdio finds the server through it
    threading.Thread(target=records_loop, args=(stop, urls), name="instance-records", daemon=True).start()
    loop = asyncio.get_event_loop()  # the server's: it has made its loop the current one before this runs
    # Rosters signed elsewhere and dropped into FORGE_ROSTER_DIR/incoming/ (its database work runs in a thread
    # of its own).
    tasks = [loop.create_task(watch_incoming())]
    if isinstance(get_channel_layer(), InMemoryChannelLayer):
        tasks.append(loop.create_task(outbox.follow()))
    return tasks


class Command(BaseCommand):
    help = (
        "Serve Forge MCP (Streamable HTTP at /mcp, legacy SSE at /sse, the console at /console/) with daphne or "
        "uvicorn."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=envstr("FORGE_HOST", "127.0.0.1"), help="address to bind (127.0.0.1)")
        parser.add_argument("--port", type=int, default=envint("FORGE_PORT", 8000), help="port to bind (8000)")
        parser.add_argument(
            "--server",
            choices=("daphne", "uvicorn"),
            default=settings.FORGE_SERVER,
            help="the HTTP server (FORGE_SERVER; daphne): uvicorn (uvloop + httptools, the uvicorn extra) spends "
            "less CPU per call; only daphne serves HTTPS",
        )
        parser.add_argument(
            "--tls-port",
            type=int,
            default=settings.FORGE_TLS_PORT,
            help="also serve HTTPS on this port, with mTLS for team certificates (FORGE_TLS_PORT; 0: none)",
        )
        parser.add_argument(
            "--no-http",
            action="store_true",
            default=not settings.FORGE_PLAIN_HTTP,
            help="serve HTTPS only, no plain HTTP (FORGE_PLAIN_HTTP=0)",
        )

    def handle(self, *args, host: str, port: int, server: str, tls_port: int, no_http: bool, **options) -> None:
        if not 0 < port < 65536:
            raise CommandError(f"--port {port} is not a TCP port; use 1-65535.")
        if server == "uvicorn":
            check_uvicorn_options(tls_port, no_http)
        if not 0 <= tls_port < 65536 or (tls_port and tls_port == port and not no_http):
            raise CommandError(f"--tls-port {tls_port} is not a free TCP port here; use 1-65535, other than --port.")
        if no_http and not tls_port:
            raise CommandError("--no-http leaves nothing to serve; give --tls-port (or FORGE_TLS_PORT) too.")
        if server == "daphne":
            import daphne.server  # noqa: F401  installs the asyncio reactor; import before anything else does

            from forge_site.request_head import serve_with_head_limits

            serve_with_head_limits()  # an oversized request head gets 431 and a JSON body, not a bare 400

        mark_outside_server(False)  # this process holds the streams: its messages reach them directly
        # The application that settings name (ASGI_APPLICATION), found as Channels' own runserver finds it
        # (for daphne, after its reactor is installed above).
        application = get_default_application()

        raise_open_files_limit()
        # The audit log against what is kept outside the database (audit.E001, audit.E002): refuse to serve
        # on a database that lost events, before anything could be recorded on top of it.
        self.check(databases=["default"], tags=["audit"])
        recover_contracts(self.stdout)
        shown_host = host if ":" not in host else f"[{host}]"
        urls = [] if no_http else [f"http://{shown_host}:{port}"]
        tls = None
        if tls_port:
            from forge_site.tls_server import ServerTls

            try:
                certificate = server_certificate(host)
            except TlsSetupError as exc:
                raise CommandError(str(exc)) from None
            tls = (host, tls_port, ServerTls(certificate, settings.FORGE_TRUST_DIR))
            mark_serving(tls_port, certificate)
            urls.append(f"https://{shown_host}:{tls_port}")
            art = key_art(certificate.certificate)
            self.stdout.write(
                f"TLS certificate {cert_fingerprint(certificate.certificate)} ({art.memorable_id}) for "
                f"{', '.join(certificate.names) or certificate.certificate.subject.rfc4514_string()}"
            )

        # The accepted view's project reads, computed outside this interpreter (ended in `finally` below).
        read_pool.start(settings.FORGE_READ_PROCESSES)
        stop = threading.Event()
        # Tasks on the server's loop (the outbox follower, the roster watcher), held so they are not collected.
        following: list[asyncio.Task] = []

        def ready() -> None:
            following.extend(start_serving_work(self.stdout, urls, stop))

        if settings.FORGE_OVERRIDE_SECURITIES:
            self.stdout.write("WARNING: FORGE_OVERRIDE_SECURITIES=1: direct-write tools are registered.")
        try:
            if server == "uvicorn":
                from forge_site import uvicorn_server

                uvicorn_server.serve(application, host, port, ready)
            else:
                from forge_site.tls_server import ForgeServer

                ForgeServer(
                    application=application,
                    endpoints=[] if no_http else [twisted_endpoint(host, port)],
                    tls=tls,
                    signal_handlers=True,
                    action_logger=None,  # daphne's access log cost 8-13% of a call; Django's logging covers us
                    http_timeout=None,  # streams stay open as long as the client wants
                    verbosity=0,
                    ready_callable=ready,
                ).run()
        finally:
            stop.set()
            read_pool.stop()
            instances.withdraw(settings.FORGE_DATA_DIR)


def check_uvicorn_options(tls_port: int, no_http: bool) -> None:
    """Refuse what uvicorn cannot serve here (HTTPS, a missing extra) before anything starts."""
    if tls_port or no_http:
        raise CommandError(
            "--server uvicorn serves plain HTTP only: --tls-port / --no-http (FORGE_TLS_PORT, FORGE_PLAIN_HTTP=0) "
            "need the client certificate in each request, which only daphne's TLS listener provides; use "
            "--server daphne for HTTPS."
        )
    missing = missing_uvicorn_packages()
    if missing:
        raise CommandError(
            f"--server uvicorn needs the uvicorn extra (uvicorn, uvloop, httptools); {', '.join(missing)} cannot be "
            f"imported here. Install it: {sys.executable} -m pip install 'uvicorn>=0.30,<1' 'uvloop>=0.21,<1' "
            "'httptools>=0.6,<1' (or the wheel with its extra, forge_mcp-*.whl[uvicorn]); README, Configuration. "
            "Or use --server daphne."
        )
