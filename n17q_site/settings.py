"""N17Q settings: everything that differs between machines comes from environment variables.

The embedded default (no variables set) is a working single-machine console: SQLite, a file-based
Celery broker and the filesystem blob store under N17Q_DATA_DIR. Production sets DATABASE_URL,
REDIS_URL, N17Q_SECRET_KEY and N17Q_DEBUG=0; see the README's configuration table.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import dj_database_url
from pythonjsonlogger.core import RESERVED_ATTRS as JSON_LOG_RESERVED_ATTRS

from .env import ConfigurationError, env_bool, env_int, env_list, env_price_table, env_retention_classes, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
# One data folder for `make demo` and every command run from this checkout: both default to ./var, so the
# README's commands after `make demo` read the demo's database (docker/demo.sh uses this same default).
DATA_DIR = Path(env_str("N17Q_DATA_DIR", str(BASE_DIR / "var"))).resolve()
# Made on demand: a bare `manage.py migrate` on a fresh clone must not fail with "unable to open database file".
# A folder that cannot be made is left to the database to report.
with contextlib.suppress(OSError):
    DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("N17Q_DEBUG", True)
_DEV_KEY = "n17q-development-key-not-for-production"
# The demo writes a key of its own into its data folder (docker/demo.sh) and runs with N17Q_DEBUG=0; a command
# run against that folder reads the same key, so the keyed digests it writes agree with the web process's.
SECRET_KEY_FILE = DATA_DIR / "secret_key"
_file_key = SECRET_KEY_FILE.read_text().strip() if SECRET_KEY_FILE.is_file() else ""
SECRET_KEY = env_str("N17Q_SECRET_KEY", _file_key or (_DEV_KEY if DEBUG else None))
if not DEBUG and SECRET_KEY == _DEV_KEY:
    raise ConfigurationError("N17Q_SECRET_KEY must be set when N17Q_DEBUG=0")
ALLOWED_HOSTS = env_list("N17Q_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("N17Q_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # The console's own apps, from the bottom layer up (pyproject's import-linter contract holds the direction):
    # accounts (tokens, roles, audit) <- runs (the run graph) <- fixtures_review <- replays <- n17q_site (the site:
    # settings, URLs, health, the demo loader). console holds what every app's pages share (template tags).
    "console",
    "accounts",
    "runs",
    "fixtures_review",
    "replays",
    # The OTLP/HTTP receiver (issue 17): builds on runs (it imports through the run importer); only the site imports it.
    "otlp_receiver",
    "n17q_site",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A Content-Security-Policy on every response, error pages and the admin included (see CONTENT_SECURITY_POLICY).
    "csp.middleware.CSPMiddleware",
    # SQLite's "database is locked" (a write waiting past the busy timeout behind an import) answers 503 with
    # Retry-After, never a 500: above every middleware that writes (the session's row, the audit log's).
    "console.busy.BusyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.audit.AuditRequestMiddleware",
    "n17q_site.logs.RequestLogMiddleware",
    # Everything needs a login (DESIGN §8); views that must not (the login page) opt out explicitly.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # ...and a role: a signed-in user without one reads nothing (accounts/permissions.py).
    "accounts.permissions.RoleRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "n17q_site.urls"
WSGI_APPLICATION = "n17q_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.roles",
            ],
        },
    }
]

_default_db = f"sqlite:///{DATA_DIR / 'n17q.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(env_str("DATABASE_URL", _default_db), conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the worker write while the web process reads; the timeout rides out short write locks.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        # A 64 MB page cache keeps the event indexes in memory while a large bundle is imported.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
if _test_db := env_str("N17Q_TEST_DATABASE_NAME", ""):
    # Two test runs against one PostgreSQL server (a developer's and a helper's) must not share a database.
    DATABASES["default"]["TEST"] = {"NAME": _test_db}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory: the replay integration tests start a real Celery worker process that must open the
    # test database too. One file per test process, removed by the test runner at the end.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:run-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("N17Q_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]

# Content-addressed blob store. The filesystem is the default; any Django storage backend (an
# S3-compatible one from django-storages, say) can serve by naming it in N17Q_BLOB_STORAGE_BACKEND.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": DATA_DIR / "media"}},
    "blobs": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": DATA_DIR / "blobs"}},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
if _blob_backend := env_str("N17Q_BLOB_STORAGE_BACKEND", ""):
    # The named backend reads its own configuration (bucket, endpoint, keys) from its own variables.
    STORAGES["blobs"] = {"BACKEND": _blob_backend, "OPTIONS": {}}

# Bundle import limits: archives past these are refused before anything is written.
# Failed sign-ins allowed per window, per account and address, per address, per account (accounts/signin.py).
N17Q_SIGNIN_WINDOW_S = env_int("N17Q_SIGNIN_WINDOW_S", 15 * 60, minimum=1)
N17Q_SIGNIN_PAIR_LIMIT = env_int("N17Q_SIGNIN_PAIR_LIMIT", 5, minimum=1)
N17Q_SIGNIN_ADDRESS_LIMIT = env_int("N17Q_SIGNIN_ADDRESS_LIMIT", 30, minimum=1)
N17Q_SIGNIN_ACCOUNT_LIMIT = env_int("N17Q_SIGNIN_ACCOUNT_LIMIT", 100, minimum=1)
N17Q_MAX_BUNDLE_BYTES = env_int("N17Q_MAX_BUNDLE_BYTES", 2 * 1024**3, minimum=1024)
N17Q_MAX_BUNDLE_MEMBERS = env_int("N17Q_MAX_BUNDLE_MEMBERS", 200_000, minimum=3)
# On SQLite an import commits in slices and publishes its run last, so that other writes (a capture, a sign-in, a
# review action) never wait behind it for long (runs/import_slices.py, issue 31). Off: one transaction, as on
# PostgreSQL always (the benchmark compares the two). An import whose heartbeat is older than N17Q_IMPORT_STALE_S
# (or whose process on this host is gone) is taken for crashed: the next import, or the sweep, removes its rows.
N17Q_IMPORT_SLICES = env_bool("N17Q_IMPORT_SLICES", True)
N17Q_IMPORT_STALE_S = env_int("N17Q_IMPORT_STALE_S", 300, minimum=1)
# Replays (n17q_engine.sandbox): a sandbox without its own network namespace is refused unless this is set,
# and then every replay it runs is labelled isolation "degraded" (shown as `isolation: none`, in red). For development
# only: with production settings (N17Q_DEBUG=0) every process refuses to start with it (issue 34; seeds 000 and 001:
# "the absence of traffic was backed by the absence of a route").
N17Q_ALLOW_DEGRADED_ISOLATION = env_bool("N17Q_ALLOW_DEGRADED_ISOLATION", False)
if N17Q_ALLOW_DEGRADED_ISOLATION and not DEBUG:
    raise ConfigurationError(
        "N17Q_ALLOW_DEGRADED_ISOLATION=1 is refused with production settings (N17Q_DEBUG=0): a replay without its own "
        "network namespace is for development only"
    )
N17Q_REPLAY_TIMEOUT_S = env_int("N17Q_REPLAY_TIMEOUT_S", 300, minimum=1)
N17Q_REPLAY_MEMORY_MB = env_int("N17Q_REPLAY_MEMORY_MB", 1024, minimum=128)
# The process a trace file or an Inspect log is converted in (n17q_engine.formats.convert_worker, issue 35): its
# address space (RLIMIT_AS) and CPU time (RLIMIT_CPU). Its converters cap what they read; these bound the rest (the
# 100,000-span file's converting process peaks near 350 MB resident). Reached: a one-line refusal, nothing imported.
N17Q_CONVERT_MEMORY_MB = env_int("N17Q_CONVERT_MEMORY_MB", 2048, minimum=128)
N17Q_CONVERT_CPU_S = env_int("N17Q_CONVERT_CPU_S", 300, minimum=1)
# The live model relay (replays/relay.py, issue 33): at most this many model calls of one replay reach the approved
# endpoint; the rest are refused (the agent gets an error answer) and the replay's record counts them.
N17Q_MODEL_RELAY_MAX_CALLS = env_int("N17Q_MODEL_RELAY_MAX_CALLS", 100, minimum=1)
# The model price table (n17q_engine.pricing, issue 38): per million tokens in and out, by model, from
# N17Q_MODEL_PRICES (JSON) or N17Q_MODEL_PRICES_FILE. Empty by default: prices change, and a stale shipped table
# would state costs nobody checked; an unpriced model's calls say "no price", never 0.
N17Q_MODEL_PRICES = env_price_table("N17Q_MODEL_PRICES")
# A worker holds a replay by a lease it renews with every progress line (replays/services.py); a replay whose
# lease ran out, or whose process on this host is gone, is queued again by the recovery pass, at most
# N17Q_REPLAY_MAX_ATTEMPTS claims in all, then marked interrupted at its last checkpoint.
N17Q_REPLAY_LEASE_S = env_int("N17Q_REPLAY_LEASE_S", 60, minimum=2)
N17Q_REPLAY_MAX_ATTEMPTS = env_int("N17Q_REPLAY_MAX_ATTEMPTS", 5, minimum=1)
N17Q_REPLAY_REQUEUE_S = env_int("N17Q_REPLAY_REQUEUE_S", 120, minimum=1)
N17Q_REPLAY_RECOVERY_S = env_int("N17Q_REPLAY_RECOVERY_S", 30, minimum=1)
# The OTLP/HTTP receiver (otlp_receiver): a trace becomes a run once its root span has ended and nothing has arrived
# for N17Q_OTLP_QUIET_SECONDS; a finalisation claim older than N17Q_OTLP_FINALIZE_LEASE_S is taken over. A request
# body is refused (413) past N17Q_OTLP_MAX_BODY_BYTES as sent, or N17Q_OTLP_MAX_DECODED_BYTES decompressed.
N17Q_OTLP_QUIET_SECONDS = env_int("N17Q_OTLP_QUIET_SECONDS", 30, minimum=1)
N17Q_OTLP_FINALIZE_LEASE_S = env_int("N17Q_OTLP_FINALIZE_LEASE_S", 600, minimum=10)
N17Q_OTLP_MAX_BODY_BYTES = env_int("N17Q_OTLP_MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024)
N17Q_OTLP_MAX_DECODED_BYTES = env_int("N17Q_OTLP_MAX_DECODED_BYTES", 64 * 1024 * 1024, minimum=1024)
N17Q_OTLP_RATE = env_str("N17Q_OTLP_RATE", "6000/min")  # requests per harness token (an exporter's batches)
N17Q_OTLP_QUEUE = env_str("N17Q_OTLP_QUEUE", "celery")
# Decoded bytes one harness token may send the receiver per window (issue 35): past it, 429 with Retry-After (the
# seconds until the window ends). At least one request's worth (N17Q_OTLP_MAX_DECODED_BYTES), so a request that fits
# the receiver always fits an empty window.
N17Q_OTLP_TOKEN_BYTES = env_int("N17Q_OTLP_TOKEN_BYTES", 1024**3, minimum=1024)
N17Q_OTLP_TOKEN_BYTES_WINDOW_S = env_int("N17Q_OTLP_TOKEN_BYTES_WINDOW_S", 60, minimum=1)
if N17Q_OTLP_TOKEN_BYTES < N17Q_OTLP_MAX_DECODED_BYTES:
    raise ConfigurationError(
        f"N17Q_OTLP_TOKEN_BYTES ({N17Q_OTLP_TOKEN_BYTES}) is below N17Q_OTLP_MAX_DECODED_BYTES "
        f"({N17Q_OTLP_MAX_DECODED_BYTES}): a request the receiver takes would never fit a token's window"
    )
# The budget of a web request that reads an upload (a bundle, a trace file, a log, an OTLP request, a capture, a HAR
# file or cassette; n17q_engine.budget): CPU seconds of its thread and wall-clock seconds, checked at the parsers'
# chunk boundaries; past either, 422 with one line and nothing stored. Below gunicorn's N17Q_WEB_TIMEOUT_S (300), so
# the worker answers rather than being killed. `import_run` and the other commands have no such budget.
N17Q_UPLOAD_CPU_S = env_int("N17Q_UPLOAD_CPU_S", 120, minimum=1)
N17Q_UPLOAD_WALL_S = env_int("N17Q_UPLOAD_WALL_S", 240, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024  # larger uploads stream to a temporary file

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.auth.HarnessTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Signed in and holding a role (accounts/permissions.py); an operation that needs more names it on its view.
    "DEFAULT_PERMISSION_CLASSES": ["accounts.permissions.HasRole"],
    # JSON only. DRF's browsable pages style themselves inline, which the CSP blocks (a browser opening
    # /health/ or /api/v1/runs/ got a page with a dozen violations); people read the API at /api/v1/docs/.
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies bounded in one place (console/api_parsers.py): a too-deep or too-large body is a 400, never a 500.
    "DEFAULT_PARSER_CLASSES": [
        "console.api_parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "console.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "console.pagination.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "console.openapi.exception_handler",
    # Harness tokens are throttled per token, and refused keys per client address (accounts/throttles.py).
    "DEFAULT_THROTTLE_CLASSES": ["accounts.throttles.HarnessTokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "harness_token": env_str("N17Q_TOKEN_RATE", "600/min"),
        "harness_token_failure": env_str("N17Q_TOKEN_FAILURE_RATE", "20/min"),
    },
    # 0: the client is REMOTE_ADDR. DRF's default (None) would believe any X-Forwarded-For a client sends,
    # which lets one client pose as many to the throttles. Behind N trusted proxies, set N17Q_NUM_PROXIES=N.
    "NUM_PROXIES": env_int("N17Q_NUM_PROXIES", 0, minimum=0),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "N17Q API",
    "DESCRIPTION": "Run bundles, run graphs, lineage findings, captures and replays.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and the docs need a role, like the API; any token may read them (they describe, they hold no data).
    "SERVE_PERMISSIONS": ["accounts.permissions.HasRole", "accounts.auth.AnyTokenScope"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Deep links put a link inside each operation's expand button, a control nested in a control that screen
    # readers cannot reach (axe: nested-interactive); the docs page works without them.
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    # Two "mode" choice sets (a run's, and the modes a replay launches in): each named, none named by a hash.
    "ENUM_NAME_OVERRIDES": {"RunModeEnum": "runs.models.Mode", "ReplayModeEnum": "replays.services.MODES"},
}

# The cache holds throttle counts, which every web process must share: Redis when there is one (its own
# database if N17Q_CACHE_URL names one), else a folder under the data directory (the processes of one machine).
_cache_url = env_str("N17Q_CACHE_URL", env_str("REDIS_URL", ""))
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _cache_url, "KEY_PREFIX": "n17q"}
    if _cache_url
    else {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(DATA_DIR / "cache")}
}

# Celery. Without REDIS_URL the broker is a folder on disk, so `make demo` needs no server at all.
REDIS_URL = env_str("REDIS_URL", "")
CELERY_TASK_TIME_LIMIT = env_int("N17Q_REPLAY_TIME_LIMIT_S", 3600, minimum=10)
if CELERY_TASK_TIME_LIMIT <= N17Q_REPLAY_TIMEOUT_S:
    raise ConfigurationError(
        f"N17Q_REPLAY_TIME_LIMIT_S ({CELERY_TASK_TIME_LIMIT}) must be above N17Q_REPLAY_TIMEOUT_S "
        f"({N17Q_REPLAY_TIMEOUT_S}): the task must outlive its sandbox to record how the sandbox ended"
    )
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # Above the longest replay: Redis hands an unacknowledged message to another worker after this long, and
    # a replay still running then would be delivered twice (harmless, the claim stops the second, but wasteful).
    _visibility = env_int("N17Q_VISIBILITY_TIMEOUT_S", 3 * 3600, minimum=60)
    if _visibility <= CELERY_TASK_TIME_LIMIT:
        raise ConfigurationError(
            f"N17Q_VISIBILITY_TIMEOUT_S ({_visibility}) must be above N17Q_REPLAY_TIME_LIMIT_S "
            f"({CELERY_TASK_TIME_LIMIT}), the longest a replay task may run"
        )
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, int | str | bool] = {"visibility_timeout": _visibility}
else:
    _broker_dir = DATA_DIR / "broker"
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        # Broadcast (pidbox) messages; kombu's default is ./control in whatever folder the worker started.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
# The queue replays are sent to (a worker started without -Q consumes "celery"); tests use one of their own.
N17Q_REPLAY_QUEUE = env_str("N17Q_REPLAY_QUEUE", "celery")
CELERY_TASK_IGNORE_RESULT = True  # state lives in our own tables, not in a result backend
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker that loses the broker (Redis restarted) keeps reconnecting, and lets the replay it is running finish:
# the replay's state lives in the database, and its claim makes a redelivered message a no-op.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Our logging configuration (JSON lines) applies in the worker too, instead of Celery's own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Each worker records a heartbeat this often (replays/heartbeat.py); /health/ wants one within three intervals.
N17Q_HEARTBEAT_S = env_int("N17Q_HEARTBEAT_S", 10, minimum=1)

# Retention and sensitivity classes (docs/retention.md; seed 001 "Retention preserved the failure"): each declared
# class keeps material for its period, counted from when it was recorded, then the periodic sweep removes the bytes
# and leaves a deletion record. A bundle's `blobs.<digest>.retention` and a capture's `retention` name a class; a
# name not declared here is kept (removal cannot be undone, so an unknown class never deletes anything).
N17Q_RETENTION_CLASSES = env_retention_classes(
    "N17Q_RETENTION_CLASSES", "standard=forever:internal,transient=30d:internal,sensitive=7d:sensitive"
)
# The class a capture gets when it names none.
N17Q_CAPTURE_RETENTION_CLASS = env_str("N17Q_CAPTURE_RETENTION_CLASS", "standard")
if N17Q_CAPTURE_RETENTION_CLASS not in N17Q_RETENTION_CLASSES:
    raise ConfigurationError(
        f"N17Q_CAPTURE_RETENTION_CLASS={N17Q_CAPTURE_RETENTION_CLASS!r} is not a class N17Q_RETENTION_CLASSES declares"
    )
# How often Celery beat sends the retention sweep (`celery -A n17q_site beat`, or a worker started with -B).
N17Q_RETENTION_SWEEP_S = env_int("N17Q_RETENTION_SWEEP_S", 3600, minimum=60)
CELERY_BEAT_SCHEDULE = {
    "retention-sweep": {
        "task": "n17q.retention_sweep",
        "schedule": float(N17Q_RETENTION_SWEEP_S),
        # A sweep that waited longer than an interval is superseded by the next one: nothing is lost, it is
        # idempotent and takes no arguments.
        "options": {"expires": float(N17Q_RETENTION_SWEEP_S)},
    },
    # The rows of an import that crashed while writing in slices (runs/import_slices.py: SQLite), once it is stale.
    "abandoned-imports-sweep": {
        "task": "n17q.abandoned_imports_sweep",
        "schedule": float(max(N17Q_IMPORT_STALE_S, 60)),
        "options": {"expires": float(max(N17Q_IMPORT_STALE_S, 60))},
    },
}
# Beat's own bookkeeping goes in the data folder (the image's root file system is read-only).
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

# Content-Security-Policy (django-csp): only this origin's own files run or style a page. No 'unsafe-inline' and
# no 'unsafe-eval' anywhere: the templates carry no inline script, style or handler (a test reads them all),
# htmx is told not to eval or inject its indicator styles (base.html), and the API docs use the split Swagger
# view whose start-up script is a file of its own. `data:` images are Swagger UI's icons in its stylesheet.
_SELF, _NONE = "'self'", "'none'"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [_SELF],
        "script-src": [_SELF],
        "style-src": [_SELF],
        "img-src": [_SELF, "data:"],
        "font-src": [_SELF],
        "connect-src": [_SELF],
        "object-src": [_NONE],
        "base-uri": [_NONE],
        "form-action": [_SELF],
        "frame-ancestors": [_NONE],
    }
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie; kept default-compatible
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("N17Q_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    SECURE_HSTS_SECONDS = env_int("N17Q_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("N17Q_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Preloading puts the domain in browsers' built-in HSTS lists, which takes months to undo: the owner of
        # the domain decides it (N17Q_HSTS_PRELOAD=1), not our default. HSTS itself is on (one year, subdomains).
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    SECURE_SSL_REDIRECT = env_bool("N17Q_SSL_REDIRECT", True)
    # A container's health check asks over plain HTTP from inside; a redirect would read as unhealthy.
    SECURE_REDIRECT_EXEMPT = [r"^health/$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Logs: JSON lines in production (one object per record, for a log shipper), readable lines in development.
LOG_FORMAT = env_str("N17Q_LOG_FORMAT", "plain" if DEBUG else "json")
if LOG_FORMAT not in ("json", "plain"):
    raise ConfigurationError(f"N17Q_LOG_FORMAT={LOG_FORMAT!r} is not json or plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": ["levelname", "name", "message"],
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": True,
            # django.request attaches the request object itself; its method and path are logged by n17q.request.
            "reserved_attrs": [*JSON_LOG_RESERVED_ATTRS, "request"],
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT},
        # A logger with no handler at all falls back to Python's last-resort stderr handler for its warnings.
        "discard": {"class": "logging.NullHandler"},
    },
    "root": {"handlers": ["console"], "level": env_str("N17Q_LOG_LEVEL", "INFO")},
    # One line per request, n17q.request's (n17q_site/logs.py). Django's own handlers would print django.request
    # records a second time (its debug console handler) besides our root handler, runserver's django.server
    # repeats every request as an access line, and django.request logs each 4xx, a 403 with the whole traceback
    # of PermissionDenied. What remains of them: django.request's errors (a 500 and its traceback), once.
    "loggers": {
        "django": {"handlers": [], "propagate": True},
        "django.server": {"handlers": ["discard"], "propagate": False},
        "django.request": {"handlers": [], "level": "ERROR", "propagate": True},
    },
}
