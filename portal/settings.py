"""Quanta settings, read only from the environment (see docs/configuration.md).

With nothing set, Quanta runs in its embedded mode: SQLite in ``var/``, a secret key generated
there, tasks in-process, an in-memory channel layer and the local cluster backend, with DEBUG
off unless asked for. Production sets DATABASE_URL, REDIS_URL, SECRET_KEY and ALLOWED_HOSTS.
"""

from __future__ import annotations

from ipaddress import ip_network
from pathlib import Path

import dj_database_url

from portal.env import (
    ConfigError,
    envbool,
    envchoice,
    envint,
    envlist,
    envstr,
    envtimezone,
    envurl,
    secret_from_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(envstr("DATA_DIR", str(BASE_DIR / "var"))).resolve()

DEBUG = envbool("DEBUG", False)

# SECRET_KEY: production sets it (the same on every web process). Without it, one is generated
# once and kept in DATA_DIR, so that every manage.py command and the embedded mode work on a
# fresh checkout and sessions survive restarts.
_secret = envstr("SECRET_KEY", "")
if not _secret:
    try:
        _secret = secret_from_file(DATA_DIR / "secret_key", generate=True) or ""
    except OSError as exc:
        raise ConfigError(
            "SECRET_KEY", f"is not set, and {DATA_DIR / 'secret_key'} cannot be written: {exc}"
        ) from exc
SECRET_KEY = _secret

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ConfigError(
            "CSRF_TRUSTED_ORIGINS", f"{_origin!r} must start with http:// or https://"
        )

CLUSTER_BACKEND = envchoice("CLUSTER_BACKEND", "local", ("local", "kubernetes", "simulated"))
# Isolation of the local backend's workloads (docs/local-backend.md, "Isolation").
LOCAL_SANDBOX = envchoice("LOCAL_SANDBOX", "auto", ("auto", "required", "off"))
LOCAL_SANDBOX_NETWORK = envchoice("LOCAL_SANDBOX_NETWORK", "host", ("host", "none"))
LOCAL_SANDBOX_PIDS_MAX = envint("LOCAL_SANDBOX_PIDS_MAX", 4096, minimum=16)
LOCAL_CGROUP_PARENT = envstr("LOCAL_CGROUP_PARENT", "")
DEMO_PASSWORD = envstr("DEMO_PASSWORD", "")
# The living demo (console.demo_load): simulated sessions and jobs on the simulated GPU farm.
# `make run` turns it on; off everywhere else.
DEMO_LOAD = envbool("DEMO_LOAD", False)
# Datasets (workloads.datasets): registered folders live under DATASETS_DIR; uploads are
# unpacked into its "uploads" folder, each at most DATASET_UPLOAD_MAX_MB unpacked.
# Billing: PostgreSQL connections a settlement tick uses at once (1: one at a time).
BILLING_SETTLE_WORKERS = envint("BILLING_SETTLE_WORKERS", 2, minimum=1)
DATASETS_DIR = Path(envstr("DATASETS_DIR", str(DATA_DIR / "datasets"))).resolve()
DATASET_UPLOAD_MAX_MB = envint("DATASET_UPLOAD_MAX_MB", 1024, minimum=1)
# Models (workloads.model_registry): each version's files, copied in and never changed after.
MODELS_DIR = Path(envstr("MODELS_DIR", str(DATA_DIR / "models"))).resolve()
MODEL_UPLOAD_MAX_MB = envint("MODEL_UPLOAD_MAX_MB", 2048, minimum=1)
# Kubernetes: the PersistentVolumeClaim that holds MODELS_DIR (storage_uri pvc://<claim>/…).
MODELS_CLAIM = envstr("MODELS_CLAIM", "")

INSTALLED_APPS = [
    "daphne",
    "portal.apps.QuantaAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.forms",  # its widget templates, for the project's form renderer
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "guardian",
    "mozilla_django_oidc",
    "channels",
    "core",
    "portal",
    "tenants",
    "django_cas_ng",  # its tables (CAS session tickets) exist whether CAS is on or not
    "scheduling",
    "workloads",
    "billing",
    "console",
]

MIDDLEWARE = [
    "portal.metrics.RequestMetricsMiddleware",  # counts and times every answer, refusals too
    "portal.middleware.RequestLimitsMiddleware",  # core/limits.py: 400, 413, 414 at the edge
    "django.middleware.security.SecurityMiddleware",
    "portal.overload.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.middleware.UserPreferencesMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

if not DEBUG:
    # Production serves collected static files itself; DEBUG's runserver serves them directly.
    MIDDLEWARE.insert(3, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"

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
                "portal.context_processors.site",
            ],
        },
    },
]

# Every form renders through one field template: errors inside their field (core/forms.py).
FORM_RENDERER = "core.forms.QuantaFormRenderer"

# --- Database -------------------------------------------------------------------------------
_database_url = envurl(
    "DATABASE_URL",
    f"sqlite:///{DATA_DIR / 'quanta.sqlite3'}",
    ("sqlite", "postgres", "postgresql", "postgis"),
)
try:
    _db = dj_database_url.parse(
        _database_url,
        conn_max_age=envint("DB_CONN_MAX_AGE", 0, minimum=0),
        conn_health_checks=True,
    )
except ValueError as exc:
    raise ConfigError("DATABASE_URL", str(exc)) from exc
if _db["ENGINE"].endswith("sqlite3"):
    Path(_db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Several threads (web, in-process tasks) share one file: wait for locks, don't fail.
    # IMMEDIATE takes the write lock when a transaction starts, so a writer waits for another
    # instead of failing at once with "database is locked" when both upgrade their reads.
    _db.setdefault("OPTIONS", {}).update(timeout=20, transaction_mode="IMMEDIATE")
DATABASES = {"default": _db}

# The web process's database budget: at most WEB_CONCURRENCY requests are in Django at once
# (each holds a thread and a connection); the next wait WEB_QUEUE_SECONDS, then get 503 with
# Retry-After (portal/overload.py). Keep WEB_CONCURRENCY × web processes + workers below
# PostgreSQL's max_connections (100 by default).
WEB_CONCURRENCY = envint("WEB_CONCURRENCY", 32, minimum=1)
WEB_QUEUE_SECONDS = envint("WEB_QUEUE_SECONDS", 10, minimum=0)
# Connections the listening socket holds before the server accepts them (`manage.py serve`;
# daphne in production: `-e tcp:port=8000:interface=0.0.0.0:backlog=1024`).
WEB_BACKLOG = envint("WEB_BACKLOG", 1024, minimum=1)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker, channel layer, cache ----------------------------------------------
REDIS_URL = envurl("REDIS_URL", "", ("redis", "rediss", "unix"))

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py gives up on a read after 5 s by default, exactly as long as
            # channels-redis blocks waiting for a message: raise it so quiet consumers
            # (live pages, notebook kernels) are not dropped; and let many pages connect.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15, "max_connections": 10_000}]
            },
        }
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery reads the CELERY_* names (portal/celery.py). Without Redis, tasks run in-process.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # a worker killed mid-task: the task is redelivered
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True  # a task that failed for good is not redelivered
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# At least once, within a minute: a message taken by a worker that died unacknowledged goes
# back to the queue after CELERY_VISIBILITY_TIMEOUT seconds (kombu's default is an hour).
# Longer tasks are redelivered while they still run; ours are idempotent, and the Kubernetes
# watcher holds a lock, so a second copy declines at once. What Redis loses outright (a
# restart with nothing on disk) the periodic reconcile repairs.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 50, minimum=5),
}
# A broker that is down fails a publish within about a second (it is logged, and the sweeper
# repairs), instead of holding the request that committed for kombu's default retries.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TIMEZONE = "UTC"

# --- Authentication ---------------------------------------------------------------------------
AUTH_USER_MODEL = "tenants.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# One-time sign-in links for people without a password (tenants.services.sign_in_links) are
# Django's password-reset tokens: they end after this many days unused.
SIGN_IN_LINK_DAYS = envint("SIGN_IN_LINK_DAYS", 7, minimum=1)
PASSWORD_RESET_TIMEOUT = SIGN_IN_LINK_DAYS * 24 * 3600
ANONYMOUS_USER_NAME = None  # django-guardian: no anonymous user row

# Campus sign-in through OpenID Connect (docs/authentication.md). Enabled when a client id
# is set; every endpoint must then be given.
OIDC_RP_CLIENT_ID = envstr("OIDC_RP_CLIENT_ID", "")
OIDC_ENABLED = bool(OIDC_RP_CLIENT_ID)
OIDC_RP_CLIENT_SECRET = envstr("OIDC_RP_CLIENT_SECRET", "")
OIDC_RP_SIGN_ALGO = envchoice("OIDC_RP_SIGN_ALGO", "RS256", ("RS256", "HS256", "ES256"))
OIDC_RP_SCOPES = envstr("OIDC_RP_SCOPES", "openid email profile")
OIDC_OP_AUTHORIZATION_ENDPOINT = envurl("OIDC_OP_AUTHORIZATION_ENDPOINT", "", ("http", "https"))
OIDC_OP_TOKEN_ENDPOINT = envurl("OIDC_OP_TOKEN_ENDPOINT", "", ("http", "https"))
OIDC_OP_USER_ENDPOINT = envurl("OIDC_OP_USER_ENDPOINT", "", ("http", "https"))
OIDC_OP_JWKS_ENDPOINT = envurl("OIDC_OP_JWKS_ENDPOINT", "", ("http", "https"))
OIDC_USERNAME_CLAIM = envstr("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_STUDENT_NUMBER_CLAIM = envstr("OIDC_STUDENT_NUMBER_CLAIM", "")
OIDC_PROVIDER_NAME = envstr("OIDC_PROVIDER_NAME", "Campus sign-in")
if OIDC_ENABLED:
    for _name in (
        "OIDC_OP_AUTHORIZATION_ENDPOINT",
        "OIDC_OP_TOKEN_ENDPOINT",
        "OIDC_OP_USER_ENDPOINT",
    ):
        if not globals()[_name]:
            raise ConfigError(_name, "is required when OIDC_RP_CLIENT_ID is set")
    if OIDC_RP_SIGN_ALGO != "HS256" and not OIDC_OP_JWKS_ENDPOINT:
        raise ConfigError("OIDC_OP_JWKS_ENDPOINT", f"is required for {OIDC_RP_SIGN_ALGO}")
    AUTHENTICATION_BACKENDS.insert(0, "tenants.auth.CampusOIDCBackend")
OIDC_TIMEOUT = envint("OIDC_TIMEOUT", 10, minimum=1)  # seconds; a hung IdP must not hang us
OIDC_CREATE_USER = True
LOGIN_REDIRECT_URL_FAILURE = "/login/"
OIDC_STORE_ID_TOKEN = False
OIDC_ROLE_CLAIM = envstr("OIDC_ROLE_CLAIM", "")

# What every campus sign-in (OIDC, LDAP, CAS) shares: the role rule (docs/authentication.md).
# A role attribute value in CAMPUS_TEACHER_VALUES makes a teacher, any other a student; the
# role becomes a membership of CAMPUS_ROLE_TENANT (a tenant's slug) when that is set.
CAMPUS_TEACHER_VALUES = envlist("CAMPUS_TEACHER_VALUES", "teacher,faculty")
CAMPUS_ROLE_TENANT = envstr("CAMPUS_ROLE_TENANT", "")

# Campus sign-in through LDAP: the sign-in form's username and password are checked against
# the directory (search for the entry, then bind as it). Off unless LDAP_URL is set.
LDAP_URL = envurl("LDAP_URL", "", ("ldap", "ldaps"))
LDAP_ENABLED = bool(LDAP_URL)
LDAP_START_TLS = envbool("LDAP_START_TLS", False)
LDAP_BIND_DN = envstr("LDAP_BIND_DN", "")
LDAP_BIND_PASSWORD = envstr("LDAP_BIND_PASSWORD", "")
LDAP_USER_SEARCH_BASE = envstr("LDAP_USER_SEARCH_BASE", "")
LDAP_USER_FILTER = envstr("LDAP_USER_FILTER", "(uid={username})")
LDAP_USERNAME_ATTRIBUTE = envstr("LDAP_USERNAME_ATTRIBUTE", "uid")
LDAP_NAME_ATTRIBUTE = envstr("LDAP_NAME_ATTRIBUTE", "cn")
LDAP_EMAIL_ATTRIBUTE = envstr("LDAP_EMAIL_ATTRIBUTE", "mail")
LDAP_STUDENT_NUMBER_ATTRIBUTE = envstr("LDAP_STUDENT_NUMBER_ATTRIBUTE", "")
LDAP_ROLE_ATTRIBUTE = envstr("LDAP_ROLE_ATTRIBUTE", "")
LDAP_TIMEOUT = envint("LDAP_TIMEOUT", 5, minimum=1)  # seconds, to connect and for each answer
if LDAP_ENABLED:
    if not LDAP_USER_SEARCH_BASE:
        raise ConfigError("LDAP_USER_SEARCH_BASE", "is required when LDAP_URL is set")
    if "{username}" not in LDAP_USER_FILTER:
        raise ConfigError("LDAP_USER_FILTER", "must contain {username}")
    AUTHENTICATION_BACKENDS.append("tenants.auth.CampusLDAPBackend")

# Campus sign-in through CAS (统一身份认证), with django-cas-ng. Off unless CAS_SERVER_URL is set.
CAS_SERVER_URL = envurl("CAS_SERVER_URL", "", ("http", "https"))
CAS_ENABLED = bool(CAS_SERVER_URL)
CAS_VERSION = envchoice("CAS_VERSION", "3", ("2", "3"))
CAS_PROVIDER_NAME = envstr("CAS_PROVIDER_NAME", "Campus sign-in (CAS)")
# django-cas-ng's name for "the CAS user itself" is "cas:user"; the environment says it empty.
CAS_USERNAME_ATTRIBUTE = envstr("CAS_USERNAME_ATTRIBUTE", "") or "cas:user"
CAS_NAME_ATTRIBUTE = envstr("CAS_NAME_ATTRIBUTE", "displayName")
CAS_EMAIL_ATTRIBUTE = envstr("CAS_EMAIL_ATTRIBUTE", "mail")
CAS_STUDENT_NUMBER_ATTRIBUTE = envstr("CAS_STUDENT_NUMBER_ATTRIBUTE", "")
CAS_ROLE_ATTRIBUTE = envstr("CAS_ROLE_ATTRIBUTE", "")
CAS_LOGOUT_COMPLETELY = envbool("CAS_LOGOUT_COMPLETELY", True)
CAS_TIMEOUT = envint("CAS_TIMEOUT", 10, minimum=1)  # seconds for ticket validation
if CAS_SERVER_URL and not CAS_SERVER_URL.endswith("/"):
    CAS_SERVER_URL += "/"  # the client joins "login", "p3/serviceValidate" onto it


def CAS_SESSION_FACTORY() -> object:
    from tenants.auth import cas_session

    return cas_session()


CAS_VERIFY_SSL_CERTIFICATE = True
CAS_REDIRECT_URL = "/"
CAS_IGNORE_REFERER = True  # after sign-in go to ?next= or "/", never to a Referer's site
CAS_LOGIN_MSG = None  # django-cas-ng's own messages are English only
CAS_LOGGED_MSG = None
CAS_CREATE_USER = True
CAS_ADMIN_REDIRECT = False
if CAS_ENABLED:
    AUTHENTICATION_BACKENDS.append("tenants.auth.CampusCASBackend")

# --- REST API -----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.auth.PersonalTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    # Parsers that refuse deep JSON, oversized bodies, NUL and lone surrogates (core/parsers.py);
    # a browsable API whose forms never list objects (portal/renderers.py; docs/api.md).
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.StrictJSONParser",
        "core.parsers.StrictFormParser",
        "core.parsers.StrictMultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "portal.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Quanta API",
    "DESCRIPTION": "Campus GPU platform: tenants, quotas, workloads, scheduling and billing.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Swagger UI is served from this install (drf-spectacular-sidecar), never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"InvoiceStateEnum": "billing.choices.InvoiceState"},
}

# --- Internationalisation ---------------------------------------------------------------------
LANGUAGE_CODE = envchoice("LANGUAGE_CODE", "en", ("en", "zh-hans"))
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = envtimezone("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Email: notices (core.notices) -----------------------------------------------------------
# The console backend in the embedded (DEBUG) mode prints each mail; production sends by SMTP.
EMAIL_BACKEND = envstr(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "quanta@localhost")
# The portal's address as people reach it, for the links in emails (empty: paths only).
PORTAL_URL = envstr("PORTAL_URL", "")

# --- Static files -------------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Collected files; the images set it outside DATA_DIR so a data volume never hides them.
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(DATA_DIR / "staticfiles"))).resolve()
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Security (production) ---------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "SAMEORIGIN"
SECURE_CONTENT_TYPE_NOSNIFF = True
# HSTS, sent on HTTPS answers only (the embedded server's plain HTTP gets none). Subdomains and
# preloading would bind every host of the university's domain: its decision, off by default.
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
# The reverse proxy terminates TLS and redirects plain HTTP (docs/operations.md); the embedded
# server has no TLS to redirect to.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
SILENCED_SYSTEM_CHECKS = [
    *([] if SECURE_SSL_REDIRECT else ["security.W008"]),  # the proxy redirects, see above
    *([] if SECURE_HSTS_INCLUDE_SUBDOMAINS else ["security.W005"]),  # the university's choice
    *([] if SECURE_HSTS_PRELOAD else ["security.W021"]),  # likewise
    # X_FRAME_OPTIONS is SAMEORIGIN, not DENY: apps behind the notebook proxy frame their own
    # pages (JupyterLab's HTML viewer, noVNC), on the portal's origin.
    "security.W019",
]

# Notebook kernels send large outputs (plots, dataframes) in one WebSocket message; daphne's
# default cap of 1 MiB would cut them off. `manage.py serve` reads these; production passes the
# same numbers to daphne on its command line (docker-compose.yml).
DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE = 64 * 1024 * 1024
DAPHNE_WEBSOCKET_MAX_FRAME_SIZE = 64 * 1024 * 1024

# --- Apps of the local backend (docs/local-backend.md) ----------------------------------------
# VS Code in the browser: code-server's binary. Default: what `make apps` installed into
# .apps/code-server, else `code-server` on PATH; without it VS Code is not offered.
_CODE_SERVER_DEFAULT = BASE_DIR / ".apps" / "code-server" / "node_modules" / ".bin" / "code-server"
CODE_SERVER_BIN = envstr(
    "CODE_SERVER_BIN", str(_CODE_SERVER_DEFAULT) if _CODE_SERVER_DEFAULT.exists() else "code-server"
)
# The desktop's browser side: noVNC's files (Debian's novnc package).
NOVNC_DIR = envstr("NOVNC_DIR", "/usr/share/novnc")
# A PyCharm installation (its bin/pycharm.sh starts in a desktop); empty: PyCharm not offered.
PYCHARM_HOME = envstr("PYCHARM_HOME", "")
# Model serving (docs/serving.md): the model servers' interpreter (its own venv, with
# scikit-learn; `make apps` installs it into .apps/serving), else serving is not offered here.
SERVING_PYTHON = envstr("SERVING_PYTHON", str(BASE_DIR / ".apps" / "serving" / "bin" / "python"))
# Requests per second an endpoint takes by default (its own limit may differ), and how long a
# request to an endpoint scaled to zero waits for its first replica (a cold start).
SERVING_RATE_LIMIT = envint("SERVING_RATE_LIMIT", 50, minimum=1)
SERVING_COLD_START_SECONDS = envint("SERVING_COLD_START_SECONDS", 60, minimum=1)
# GPU utilisation (docs/operations.md): sampled every GPU_SAMPLE_SECONDS into a history kept
# GPU_HISTORY_HOURS (each sample as taken for the last GPU_FULL_RESOLUTION_MINUTES, then
# averaged into GPU_DOWNSAMPLE_MINUTES buckets); Kubernetes reads DCGM exporter series from
# the Prometheus at PROMETHEUS_URL. GPU-aware culling stops a warned workload after
# GPU_CULL_GRACE_MINUTES unless its owner keeps it (docs/workloads.md).
GPU_SAMPLE_SECONDS = envint("GPU_SAMPLE_SECONDS", 60, minimum=5)
GPU_HISTORY_HOURS = envint("GPU_HISTORY_HOURS", 24, minimum=1)
GPU_FULL_RESOLUTION_MINUTES = envint("GPU_FULL_RESOLUTION_MINUTES", 60, minimum=1)
GPU_DOWNSAMPLE_MINUTES = envint("GPU_DOWNSAMPLE_MINUTES", 10, minimum=1)
GPU_CULL_GRACE_MINUTES = envint("GPU_CULL_GRACE_MINUTES", 15, minimum=1)
PROMETHEUS_URL = envurl("PROMETHEUS_URL", "", ("http", "https"))
# More paths every local task may read (read-only in the sandbox), comma-separated.
LOCAL_READONLY_PATHS = envlist("LOCAL_READONLY_PATHS", "")

# /metrics (portal/metrics.py): a scraper sends METRICS_TOKEN as a bearer token, or connects
# from a network of METRICS_ALLOW; with neither set, only this host may scrape.
METRICS_TOKEN = envstr("METRICS_TOKEN", "")
METRICS_ALLOW = envlist("METRICS_ALLOW", "")
for _net in METRICS_ALLOW:
    try:
        ip_network(_net, strict=False)
    except ValueError:
        raise ConfigError(
            "METRICS_ALLOW", f"{_net!r} is not an address or network (10.0.0.0/8, ::1)"
        ) from None

# Personal API tokens: how often (seconds) the last-used time is written at most.
API_TOKEN_TOUCH_INTERVAL = envint("API_TOKEN_TOUCH_INTERVAL", 60, minimum=0)

# The SSH gateway for remote IDEs, scp and sftp (docs/ssh.md). `manage.py serve` runs it in the
# same process, `manage.py ssh_gateway` on its own; port 0 turns it off.
SSH_GATEWAY_HOST = envstr("SSH_GATEWAY_HOST", "127.0.0.1")
SSH_GATEWAY_PORT = envint("SSH_GATEWAY_PORT", 2222, minimum=0, maximum=65535)
SSH_HOST_KEY_FILE = Path(envstr("SSH_HOST_KEY_FILE", str(DATA_DIR / "ssh_host_ed25519_key")))
SSH_PUBLIC_HOST = envstr("SSH_PUBLIC_HOST", "")  # what the how-to shows; default: the page's host
# Whether the staff of a class may ssh into its students' workloads, as they may open them
# through the notebook proxy (workloads.permissions.can_control).
SSH_STAFF_ACCESS = envbool("SSH_STAFF_ACCESS", True)

LOG_LEVEL = envchoice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
# One handler, at the root: every line once, in one format. Django's own handlers (its
# DEBUG-only console handler on "django", "django.server"'s) are replaced, or each request
# would be written twice. A refusal (4xx) never carries a traceback; below DEBUG it is left to
# the server's access line, and tasks that just ran say nothing (core/logs.py).
_quiet = LOG_LEVEL != "DEBUG"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {
        "no_traceback": {"()": "core.logs.ClientErrorsWithoutTraceback"},
        "drop_client_errors": {"()": "core.logs.DropClientErrors"},
        "quiet_tasks": {"()": "core.logs.QuietTaskSuccess"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django": {"handlers": [], "propagate": True},
        "django.server": {"handlers": [], "propagate": True},
        "django.request": {
            "handlers": [],
            "propagate": True,
            "filters": ["no_traceback", *(["drop_client_errors"] if _quiet else [])],
        },
        "celery.app.trace": {
            "handlers": [],
            "propagate": True,
            "filters": ["quiet_tasks"] if _quiet else [],
        },
        # asyncssh reports every connection and channel at INFO; the gateway logs its own.
        "asyncssh": {"level": "WARNING"},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
