"""Settings for Forge MCP, all from the environment with safe defaults (see README, "Configuration").

The embedded default needs no services: SQLite in WAL mode and the in-memory channel layer, everything
written under `FORGE_DATA_DIR`. `DATABASE_URL` (PostgreSQL) and `REDIS_URL` (channels-redis) switch to
the scale-out path, where several daphne processes share sessions through the database and stream
messages through Redis.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url

from forge_core.env import (
    envbool,
    envcadence,
    envchoice,
    envfloat,
    envint,
    envlist,
    envseconds,
    envstr,
    make_private_by_default,
    secret_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent

FORGE_DATA_DIR = Path(envstr("FORGE_DATA_DIR", str(BASE_DIR / "var"))).resolve()
FORGE_SECRETS_DIR = Path(envstr("FORGE_SECRETS_DIR", str(FORGE_DATA_DIR / "secrets"))).resolve()
FORGE_PROJECTS_ROOT = Path(envstr("FORGE_PROJECTS_ROOT", str(FORGE_DATA_DIR / "projects"))).resolve()
FORGE_AUDIT_LOG = Path(envstr("FORGE_AUDIT_LOG", str(FORGE_DATA_DIR / "audit" / "audit.jsonl"))).resolve()
# Private by default: from here on everything this process creates is 0700 (folders) or 0600 (files),
# before the first folder is made (README, "Configuration"; forge.W007 warns about an older, looser one).
make_private_by_default()
FORGE_DATA_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)

SECRET_KEY = secret_file(FORGE_SECRETS_DIR, "django-secret-key", 48)
DEBUG = envbool("FORGE_DEBUG", False)

# Loopback only unless the operator says otherwise; the MCP transports check Host and Origin
# themselves against the same lists (DNS rebinding).
FORGE_EXTRA_ALLOWED_HOSTS = envlist("FORGE_ALLOWED_HOSTS")
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1", *FORGE_EXTRA_ALLOWED_HOSTS]
# Where `runmcp` binds by default (its --host overrides it); the system checks judge FORGE_DEBUG against it.
FORGE_HOST = envstr("FORGE_HOST", "127.0.0.1")
# The HTTP server `runmcp` runs (its --server overrides it): daphne, or uvicorn with uvloop and httptools (the
# optional `uvicorn` extra; plain HTTP only).
FORGE_SERVER = envchoice("FORGE_SERVER", "daphne", ("daphne", "uvicorn"))
FORGE_ALLOWED_ORIGINS = envlist("FORGE_ALLOWED_ORIGINS")
CSRF_TRUSTED_ORIGINS = FORGE_ALLOWED_ORIGINS

INSTALLED_APPS = [
    "daphne",
    "forge_site.apps.ForgeSiteConfig",  # the deployment's system checks
    "forge_site.apps.ConsoleAdminConfig",  # django.contrib.admin, with the console's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's scripts and styles, served as static files: no CDN
    "channels",
    "guardian",
    "axes",  # the console login's throttle; before console, whose login receivers read what it decided
    "audit",
    "projects",
    "caretaker",
    "confirmations",
    "access",
    "mcp_api",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Near the top, so that every console response gets the policy, the lockout page included.
    "console.csp.ConsoleContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a login refused for a lockout into the page that says why.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "forge_site.urls"
ASGI_APPLICATION = "forge_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The checkout's templates/ folder; the wheel carries the same files as forge_site/templates/
        # (pyproject.toml), since an installed package has no checkout around it. A missing folder is skipped.
        "DIRS": [BASE_DIR / "templates", Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_database_url = envstr("DATABASE_URL", "")
if _database_url:
    # Django's PostgreSQL backend, which also runs the work a commit waits for (forge_core/before_commit.py).
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=0, engine="forge_core.postgresql")}
    # Connections come from Django's psycopg pool (which wants CONN_MAX_AGE=0). The bounded threads MCP calls
    # and Django's views hop into (forge_core.workers) each keep theirs from one hop to the next; any other
    # thread (asgiref's and Channels' executors, runmcp's loops) gives its connection back when its request or
    # unit of work ends, so none is left to a thread that ends (a persistent connection per thread was opened
    # anew for each request's new thread, 3.8 ms, and left to it).
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": envint("FORGE_DB_POOL_MIN", 2, minimum=0),
        "max_size": envint("FORGE_DB_POOL_MAX", 20, minimum=1),
        "timeout": envfloat("FORGE_DB_POOL_TIMEOUT_SECONDS", 10.0, minimum=0.1),
    }
else:
    DATABASES = {
        "default": {
            # Django's SQLite backend, whose write transactions also queue on a lock inside the process
            # (forge_core/sqlite): SQLite's busy handler would make them sleep in steps of up to 100 ms. It
            # also runs the work a commit waits for (forge_core/before_commit.py).
            "ENGINE": "forge_core.sqlite",
            "NAME": str(FORGE_DATA_DIR / "forge.sqlite3"),
            "OPTIONS": {
                # WAL lets readers run beside the single writer; IMMEDIATE takes the write lock at BEGIN so
                # two writers queue on busy_timeout instead of failing with "database is locked" mid-way.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000;",
                "transaction_mode": "IMMEDIATE",
            },
            # The tests' database is a file too, in WAL mode as a deployment's: an in-memory one shares one
            # cache between connections, where a reader meets "database table is locked" at once while
            # another thread writes, instead of reading beside the writer. One per test process, so two runs
            # side by side in one checkout keep apart.
            "TEST": {"NAME": str(Path(tempfile.gettempdir()) / f"forge-test-{os.getpid()}.sqlite3")},
        }
    }
    # Persistent connections: with Django's default of 0 every thread hop reopens the database, which
    # made a call four times slower on this stack (DESIGN section 16).
    DATABASES["default"]["CONN_MAX_AGE"] = None

# Threads in which MCP requests do their database and file work side by side (forge_core.workers). On
# PostgreSQL keep it and FORGE_VIEW_WORKERS together below FORGE_DB_POOL_MAX: each of these threads keeps a
# pooled connection between hops, the rest of the pool serves the other threads; at or above it they take one
# from the pool each hop instead, and requests may wait for a connection.
FORGE_WORKERS = envint("FORGE_WORKERS", 8, minimum=1)
# Threads in which Django's views (the console, the operator, audit and draft APIs) run, a request at a time
# each (forge_site.django_views): a pool of their own, so a slow page never holds a thread an MCP call waits for.
FORGE_VIEW_WORKERS = envint("FORGE_VIEW_WORKERS", 4, minimum=1)
# How long a thread busy in Python may hold the GIL before `runmcp` has it let others run (Python's default is
# 5 ms): the event loop every request passes through waits at most this long behind a heavy call. 0.2 rather
# than 0.5: another client's ping behind a heavy call, and the CPU per call under 20 clients, both came out
# lower (docs/PERFORMANCE.md, section 14).
FORGE_GIL_SWITCH_MS = envfloat("FORGE_GIL_SWITCH_MS", 0.2, minimum=0.05)
# How many new objects `runmcp` lets accumulate before the cyclic garbage collector's youngest pass (Python's
# default is 700). A heavy read (a check of a 50,000-variable project) collected every 700 objects promotes its
# working set into the oldest generation, whose every pass then walks the cached project and stops all threads
# for 15-70 ms; at 5,000 it did not run in 18 checks and the longest pause fell to 14-27 ms (docs/PERFORMANCE.md,
# section 14).
FORGE_GC_YOUNG_OBJECTS = envint("FORGE_GC_YOUNG_OBJECTS", 5000, minimum=100)

# Processes in which `runmcp` computes the accepted view's project reads (projects.read_pool), so a check of a
# large project does not hold the server's GIL while other clients wait; each costs an interpreter (about 27 MB)
# plus the documents it has parsed (up to eight). A read finding every one busy waits for one. 0: in process.
FORGE_READ_PROCESSES = envint("FORGE_READ_PROCESSES", 2, minimum=0)

REDIS_URL = envstr("REDIS_URL", "")
CHANNEL_LAYERS: dict[str, dict[str, Any]]
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis's layer, its group send in two round trips to Redis (forge_core.redis_layer)
            "BACKEND": "forge_core.redis_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 60},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}}

AUTHENTICATION_BACKENDS = [
    # First: a name or address that is locked out is refused before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    # Django's model permissions, read in one statement instead of two (access/backends.py).
    "access.backends.ModelPermissions",
    "guardian.backends.ObjectPermissionBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row

# --- The console login's guard (django-axes; README, "Configuration") --------------------------------
# Failed logins are counted per user name and, separately, per client address (each in the database, so
# every process sees them); FORGE_LOGIN_FAILURE_LIMIT of either locks that name or address out for
# FORGE_LOGIN_LOCKOUT_MINUTES, counted from the lockout (tries during it do not extend it), right
# password or not. A successful login clears the user's count. `manage.py axes_reset_username NAME` or
# `axes_reset_ip ADDRESS` unlocks at once.
AXES_FAILURE_LIMIT = envint("FORGE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("FORGE_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "console.login_guard.locked_out"
# Logins are in the audit log already (console_login rows); axes keeps only the failures it counts.
AXES_DISABLE_ACCESS_LOG = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = FORGE_DATA_DIR / "static"
# Django's file storage (collectstatic into STATIC_ROOT) chmods what it saves to 0644 by default, past the
# umask: keep those files and folders private too.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/console/login/"

REST_FRAMEWORK = {
    # The bearer class comes first: REST framework takes the WWW-Authenticate of the first class, and
    # without one it answers a request that carries no credentials 403 instead of 401. The client and
    # operator token classes each leave the other's prefix (fmcp_, fop_) alone.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "access.rest.BearerTokenAuthentication",
        "console.rest.OperatorTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "forge_core.rest.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# /api/schema/ and /api/docs/: for anyone the API itself lets in (a console login or a token).
SPECTACULAR_SETTINGS = {
    "TITLE": "Forge MCP API",
    "DESCRIPTION": "The operator API (sessions, access requests, the MCP switch, pending confirmations and "
    "recovery contracts) and the audit log's API.",
    "VERSION": "1.0",  # the API's contract, not the package: change it when a client must change
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Three models have a field named state, each with its own choices: each set gets its own name.
    "ENUM_NAME_OVERRIDES": {
        "AccessStateEnum": "access.models.AccessState",
        "ConfirmationStateEnum": "confirmations.models.ConfirmationState",
        "ContractStateEnum": "confirmations.models.ContractState",
    },
    # Refusals are RFC 9457 problem details: the schema says application/problem+json for them.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "forge_core.rest.problem_media_type",
    ],
}

# --- MCP ------------------------------------------------------------------------------------------
FORGE_OVERRIDE_SECURITIES = envbool("FORGE_OVERRIDE_SECURITIES", False)  # read once at start
FORGE_MAX_BODY_BYTES = envint("FORGE_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
FORGE_SSE_KEEPALIVE_SECONDS = envfloat("FORGE_SSE_KEEPALIVE_SECONDS", 15.0, minimum=0.05)
FORGE_STREAM_RECHECK_SECONDS = envfloat("FORGE_STREAM_RECHECK_SECONDS", 300.0, minimum=0.05)
# How long a tool call waits for its client to answer a request it sent (sampling, elicitation) before it
# cancels the request and the tool is told so (mcp_api.dialogue); the wait holds no worker thread.
FORGE_CLIENT_REQUEST_SECONDS = envfloat("FORGE_CLIENT_REQUEST_SECONDS", 120.0, minimum=0.05)
FORGE_TOOLS_PAGE_SIZE = envint("FORGE_TOOLS_PAGE_SIZE", 50, minimum=1)
# A JSON-RPC batch with more messages than this is refused whole (-32600), before any of it is answered.
FORGE_MAX_BATCH = envint("FORGE_MAX_BATCH", 50, minimum=1)
# A message nesting objects and arrays deeper than this (the message itself is 1) is refused unread.
FORGE_MAX_JSON_DEPTH = envint("FORGE_MAX_JSON_DEPTH", 32, minimum=8)
FORGE_PUBLIC_URL = envstr("FORGE_PUBLIC_URL", "")
# Per-token caps (access.limits): what one client token may hold at once; one more is refused (429,
# FORGE_ERR_LIMIT_REACHED) naming the cap. Each is well above what one working client needs.
FORGE_MAX_SESSIONS_PER_TOKEN = envint("FORGE_MAX_SESSIONS_PER_TOKEN", 32, minimum=1)
FORGE_MAX_STREAMS_PER_TOKEN = envint("FORGE_MAX_STREAMS_PER_TOKEN", 16, minimum=1)
FORGE_MAX_HANDLES_PER_TOKEN = envint("FORGE_MAX_HANDLES_PER_TOKEN", 64, minimum=1)
FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN = envint("FORGE_MAX_ACCESS_REQUESTS_PER_TOKEN", 16, minimum=1)
FORGE_MAX_PENDING_PER_TOKEN = envint("FORGE_MAX_PENDING_PER_TOKEN", 16, minimum=1)
# The most operations one change group may hold (projects.drafts.do_stage).
FORGE_MAX_STAGED_PER_GROUP = envint("FORGE_MAX_STAGED_PER_GROUP", 2000, minimum=1)

# --- Audit ----------------------------------------------------------------------------------------
FORGE_AUDIT_CHECKPOINT_EVENTS, FORGE_AUDIT_CHECKPOINT_SECONDS = envcadence("FORGE_AUDIT_CHECKPOINT_EVERY", "1000,300s")

# --- The caretaker: team CA, roster, trust store (DESIGN section 10) -------------------------------------
# The team CA's key and certificate (ca.key 0600, ca.crt); a secret, so under the secrets folder by default.
FORGE_CA_DIR = Path(envstr("FORGE_CA_DIR", str(FORGE_SECRETS_DIR / "team-ca"))).resolve()
# CA certificates this server trusts (*.pem): roster signatures and, with TLS, client certificates chain to them.
FORGE_TRUST_DIR = Path(envstr("FORGE_TRUST_DIR", str(FORGE_DATA_DIR / "trust"))).resolve()
# The signed roster (peers.toml, revoked.toml) and the CRL; rosters signed elsewhere are dropped into incoming/.
FORGE_ROSTER_DIR = Path(envstr("FORGE_ROSTER_DIR", str(FORGE_DATA_DIR / "roster"))).resolve()
FORGE_CERT_DAYS = envint("FORGE_CERT_DAYS", 90, minimum=1)
# A roster past its `expires` is refused (so withholding a newer one cannot freeze trust); re-signed well before.
FORGE_ROSTER_VALIDITY_DAYS = envint("FORGE_ROSTER_VALIDITY_DAYS", 30, minimum=1)
FORGE_ENROLLMENT_CODE_HOURS = envint("FORGE_ENROLLMENT_CODE_HOURS", 24, minimum=1)

# --- TLS and mTLS (docs/TLS.md) ------------------------------------------------------------------------
# `runmcp` serves HTTPS on this port too (0: no TLS listener); FORGE_PLAIN_HTTP=0 leaves only HTTPS.
FORGE_TLS_PORT = envint("FORGE_TLS_PORT", 0, minimum=0)
FORGE_PLAIN_HTTP = envbool("FORGE_PLAIN_HTTP", True)
# The operator's own certificate chain and key (PEM); unset, Forge makes one under FORGE_SECRETS_DIR/tls/.
FORGE_TLS_CERT = envstr("FORGE_TLS_CERT", "")
FORGE_TLS_KEY = envstr("FORGE_TLS_KEY", "")
FORGE_TLS_KEY_TYPE = envchoice("FORGE_TLS_KEY_TYPE", "rsa4096", ("rsa4096", "p256"))

# --- Confirmations and the executor (DESIGN section 9) -------------------------------------------------
FORGE_CONFIRM_EXPIRY_SECONDS = envfloat("FORGE_CONFIRM_EXPIRY_SECONDS", 300.0, minimum=1.0)
# Per-tool expiry, e.g. "project.write.remove_pou=120,project.write.set_pou_body=600" (seconds).
FORGE_CONFIRM_EXPIRY_BY_TOOL = envseconds("FORGE_CONFIRM_EXPIRY_BY_TOOL")
# How long a write call whose client streams (and sent a progress token) waits for the decision.
FORGE_CONFIRM_WAIT_S = envfloat("FORGE_CONFIRM_WAIT_S", 60.0, minimum=0.0)
FORGE_CONFIRM_PROGRESS_SECONDS = envfloat("FORGE_CONFIRM_PROGRESS_SECONDS", 5.0, minimum=0.05)
# Capability adapters by dotted path: the executor holds no project or roster logic of its own.
FORGE_CAPABILITIES = {
    "project.file": "projects.capability.ProjectFileCapability",
    "team.roster": "caretaker.capability.RosterCapability",
}
# The executor, for the apps that may not import confirmations (forge_core.execution).
FORGE_EXECUTOR_ENTRY = "confirmations.executor.carry_out"
# Who may see and decide what concerns a project, for the apps that may not import `projects` (forge_core.rights).
FORGE_PROJECT_RIGHTS = "projects.rights"
# The exact (capability, target kind, method) rules the executor may carry out; nothing else, no wildcards.
FORGE_EXECUTOR_POLICY = frozenset(
    {
        ("project.file", "project_file", "apply_operations"),
        ("project.file", "project_file", "accept_draft"),
        ("team.roster", "team_roster", "issue_certificate"),
        ("team.roster", "team_roster", "revoke_certificate"),
        ("team.roster", "team_roster", "rotate_certificate"),
        ("team.roster", "team_roster", "sign_roster"),
        ("team.roster", "team_roster", "accept_roster"),
    }
)
# An EXECUTING contract of a process that stopped answering for this long is handed to reconciliation.
FORGE_EXECUTOR_LEASE_SECONDS = envfloat("FORGE_EXECUTOR_LEASE_SECONDS", 120.0, minimum=1.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("FORGE_LOG_LEVEL", "WARNING")},
    "loggers": {
        "forge": {"level": envstr("FORGE_LOG_LEVEL", "INFO"), "propagate": True},
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
    },
}
