"""Django settings, read once from the environment (see README, "Configuration").

A bad value stops start-up with a message naming the variable.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from controlpanel.accounts.oidc_settings import read_oidc_settings
from controlpanel.api.rates import env_rate
from controlpanel.env import env_bool, env_choice, env_int, env_list, env_percent, env_str
from controlpanel.usercontent.domain import parse_content_domain
from deploy import images
from deploy.egress import parse_cidrs, parse_dns, parse_egress, parse_node_local_dns

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("AJUSTE_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)
# HTTPS decides secure cookies, HSTS and the redirect; `make run` serves plain http on loopback.
HTTPS = env_bool("HTTPS", not DEBUG)

SECRET_KEY = env_str("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is not set (required unless DEBUG=1).")
    SECRET_KEY = "django-insecure-development-only-key-do-not-use-in-production"  # noqa: S105
# Earlier SECRET_KEYs, comma-separated (or SECRET_KEY_FALLBACKS_FILE): sessions, signed links
# and datastore credentials stored under them stay readable after SECRET_KEY is rotated.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])

# Loopback only unless set, DEBUG included (Django itself allows only localhost under DEBUG).
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Public URL of the panel, used in e-mails, webhooks and notebook links.
SITE_URL = (env_str("SITE_URL") or "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "controlpanel.core",
    "controlpanel.accounts",
    "controlpanel.projects",
    "controlpanel.buckets",
    "controlpanel.flavors",
    "controlpanel.engine",
    "controlpanel.queues",
    # The workload kinds (controlpanel/kinds.py): their models keep the engine's app label.
    "controlpanel.jobs",
    "controlpanel.notebooks",
    "controlpanel.served",
    "controlpanel.billing",
    "controlpanel.dashboards",
    "controlpanel.audit",
    "controlpanel.usercontent",
    "controlpanel.sweeps",
    "controlpanel.reclaim",
    "controlpanel.api",
]

MIDDLEWARE = [
    # X-Request-ID in, out and on every log line and task sent (controlpanel/core/requestid.py).
    "controlpanel.core.requestid.RequestIdMiddleware",
    # Every request timed; a /metrics scrape with the bearer token answered before the host and
    # HTTPS checks, as the probes are (controlpanel/core/metrics).
    "controlpanel.core.metrics.http.RequestMetricsMiddleware",
    "controlpanel.core.metrics.http.MetricsScrapeMiddleware",
    # /healthz and /readyz for probes, before the ALLOWED_HOSTS and HTTPS checks.
    "controlpanel.core.middleware.HealthProbeMiddleware",
    # Notebooks' and apps' own hosts, and the user-content gateway's questions: answered before
    # the panel's session, cookies and host checks (controlpanel/usercontent/middleware.py).
    "controlpanel.usercontent.middleware.UserContentMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The request being served, for the audit log's actor, address and request id.
    "controlpanel.audit.log.AuditRequestMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",
    # A view's bare 400/403/404/405 becomes the styled page for a browser (core/errorpages.py).
    "controlpanel.core.errorpages.ErrorPageMiddleware",
]

ROOT_URLCONF = "controlpanel.urls"
WSGI_APPLICATION = "controlpanel.wsgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

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
                "controlpanel.core.context_processors.shell",
            ],
            "builtins": ["controlpanel.core.templatetags.units"],
        },
    }
]


def _database() -> dict[str, Any]:
    url = env_str("DATABASE_URL")
    if not url:
        # Embedded default for `make run`: SQLite in WAL mode with a busy timeout, since web,
        # worker and beat write at once. Tests and production use PostgreSQL.
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "ajuste.sqlite3",
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    try:
        config = dj_database_url.parse(url, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60))
    except Exception as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from exc
    if not config.get("ENGINE"):
        raise ImproperlyConfigured("DATABASE_URL names an unsupported database scheme.")
    config["CONN_HEALTH_CHECKS"] = True
    return dict(config)


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# SQLite (`make run`) drops the covering indexes' INCLUDE columns: slower dashboards at most,
# said four times at every start among the lines that matter (#32).
SILENCED_SYSTEM_CHECKS = ["models.W040"] if "sqlite" in DATABASES["default"]["ENGINE"] else []

REDIS_URL = env_str("REDIS_URL") or "redis://127.0.0.1:6379/0"
if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(
        f"REDIS_URL={REDIS_URL!r} must start with redis://, rediss:// or unix://."
    )

# Every key Ajuste writes in Redis (cache and broker queues) starts with this prefix, so two
# installs (or two test runs) can share one Redis database without taking each other's tasks.
REDIS_KEY_PREFIX = env_str("REDIS_KEY_PREFIX") or "ajuste"

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": REDIS_KEY_PREFIX,
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Passwords (off with OIDC_ONLY=1), then the OpenID Connect sign-in's sessions.
    "controlpanel.accounts.backends.PasswordBackend",
    "controlpanel.accounts.backends.OidcBackend",
]

# People (controlpanel/accounts): an invitation link works this many days; single sign-on
# with OpenID Connect from OIDC_* (controlpanel/accounts/oidc_settings.py; off without
# OIDC_ISSUER). README: "Inviting people and single sign-on".
INVITATION_DAYS = env_int("INVITATION_DAYS", 7, minimum=1)
_oidc = read_oidc_settings()
OIDC_ISSUER = _oidc["OIDC_ISSUER"]
OIDC_DISCOVERY_URL = _oidc["OIDC_DISCOVERY_URL"]
OIDC_CLIENT_ID = _oidc["OIDC_CLIENT_ID"]
OIDC_CLIENT_SECRET = _oidc["OIDC_CLIENT_SECRET"]
OIDC_SCOPES = _oidc["OIDC_SCOPES"]
OIDC_GROUPS_CLAIM = _oidc["OIDC_GROUPS_CLAIM"]
OIDC_GROUP_MAPPING = _oidc["OIDC_GROUP_MAPPING"]
OIDC_USERNAME_CLAIM = _oidc["OIDC_USERNAME_CLAIM"]
OIDC_PROVIDER_NAME = _oidc["OIDC_PROVIDER_NAME"]
OIDC_ONLY = _oidc["OIDC_ONLY"]
OIDC_TIMEOUT_SECONDS = _oidc["OIDC_TIMEOUT_SECONDS"]

# django-axes: throttle repeated login failures per username and address.
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_int("AXES_COOLOFF_MINUTES", 15, minimum=1) / 60
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Behind a proxy, failures count against the client's address (in X-Forwarded-For, that many
# proxies from the right), not the proxy's: one client cannot lock everyone out of an account.
AXES_TRUSTED_PROXY_COUNT = env_int("AXES_TRUSTED_PROXY_COUNT", 1, minimum=1)
AXES_CLIENT_IP_CALLABLE = (
    "controlpanel.accounts.client_ip.client_ip" if env_bool("BEHIND_PROXY", False) else None
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "var" / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "controlpanel.core.staticfinders.VendorFinder",  # htmx and Chart.js from node_modules/
]
# Source maps are for the browser's developer tools only: serving them uncompressed saves every
# collectstatic (each `make run`) compressing several MiB of them with brotli and gzip.
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = [
    *("jpg", "jpeg", "png", "gif", "webp", "zip", "gz", "tgz", "bz2", "tbz", "xz", "br"),
    *("swf", "flv", "woff", "woff2", "3gp", "3gpp", "asf", "avi", "m4v", "mov", "mp4"),
    *("mpeg", "mpg", "webm", "wmv", "map"),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
if env_bool("STATIC_MANIFEST", not DEBUG) is False:
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
elif env_bool("STATIC_COMPRESS", True) is False:
    # Hashed names without the gzip/brotli copies (`make run`: 38 s of CPU for a loopback).
    STORAGES["staticfiles"] = {
        "BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"
    }

# Security headers. With DEBUG=0 and HTTPS=1 (the default), `check --deploy` reports nothing.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS and env_bool("SECURE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
if env_bool("BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]

# A strict Content-Security-Policy: no inline scripts, nothing from other origins.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'", *env_list("CSP_CONNECT_SRC", [])],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'self'"],
        "object-src": ["'none'"],
    }
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlpanel.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "controlpanel.api.schema.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "controlpanel.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "controlpanel.api.errors.exception_handler",
    # API_THROTTLE_TOKEN / API_THROTTLE_USER below; a 429 with Retry-After past them.
    "DEFAULT_THROTTLE_CLASSES": [
        "controlpanel.api.throttling.TokenRateThrottle",
        "controlpanel.api.throttling.UserRateThrottle",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# API requests per API token and per user (all their tokens and their session together), in
# windows shared by every web process through the cache: "1200/min", "20/s", "5000/hour",
# "100/10s", or "off".
API_THROTTLE_TOKEN = env_rate("API_THROTTLE_TOKEN", env_str("API_THROTTLE_TOKEN"), "1200/min")
API_THROTTLE_USER = env_rate("API_THROTTLE_USER", env_str("API_THROTTLE_USER"), "2400/min")
SPECTACULAR_SETTINGS = {
    "TITLE": "Ajuste API",
    "DESCRIPTION": (
        "GPU notebooks, training jobs and object storage on your own Kubernetes cluster."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "controlpanel.jobs.states.JobState",
        "NotebookStateEnum": "controlpanel.notebooks.states.NotebookState",
        "AppStateEnum": "controlpanel.served.states.AppState",
    },
    # The live log streams, served before Django, described beside the logs.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlpanel.streams.schema.describe_streams",
    ],
}

# Celery: Redis broker, JSON only, late acks, one message at a time per worker process.
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 3600,
    "global_keyprefix": f"{REDIS_KEY_PREFIX}:",
}
CELERY_TASK_ALWAYS_EAGER = False
# Every record has `request_id` (controlpanel/core/requestid.py): the worker prints it too.
CELERY_WORKER_LOG_FORMAT = (
    "[%(asctime)s: %(levelname)s/%(processName)s] request_id=%(request_id)s %(message)s"
)
CELERY_WORKER_TASK_LOG_FORMAT = (
    "[%(asctime)s: %(levelname)s/%(processName)s] request_id=%(request_id)s "
    "%(task_name)s[%(task_id)s]: %(message)s"
)
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict = {}
# Several beat replicas (a rolling update's new pod beside the old one) send each periodic task
# once: only the one holding the Lease does (controlpanel/engine/leaderbeat.py).
CELERY_BEAT_SCHEDULER = "controlpanel.engine.leaderbeat:LeaderScheduler"
# Leader election on the Kubernetes backend (engine/leader.py): beat and the watcher run their
# work in the one replica holding a coordination.k8s.io Lease in KUBERNETES_NAMESPACE; another
# takes over within LEADER_LEASE_SECONDS of the holder's last renewal. On in k8s/config.env;
# off by default (make run and Compose run one of each): every replica acts.
LEADER_ELECTION = env_bool("LEADER_ELECTION", False)
LEADER_LEASE_SECONDS = env_int("LEADER_LEASE_SECONDS", 15, minimum=2)
# Every watcher replica collects the logs it owns (controlpanel/engine/shards.py): a replica not
# heard from for LOG_SHARD_TTL_SECONDS is gone, and the others take its logs over. Each log read
# has its own deadline (LOG_READ_DEADLINE_SECONDS); a followed log silent for
# LOG_FOLLOW_IDLE_SECONDS is opened again from its cursor.
LOG_SHARD_TTL_SECONDS = env_int("LOG_SHARD_TTL_SECONDS", 10, minimum=2)
LOG_READ_DEADLINE_SECONDS = env_int("LOG_READ_DEADLINE_SECONDS", 10, minimum=1)
LOG_FOLLOW_IDLE_SECONDS = env_int("LOG_FOLLOW_IDLE_SECONDS", 60, minimum=1)
# A followed log's thread holds no database connection: it hands its batches to LOG_WRITERS
# threads of its replica (controlpanel/engine/logwriters.py), one connection each, however
# many logs the replica follows.
LOG_WRITERS = env_int("LOG_WRITERS", 4, minimum=1)
# Every task ends: a hung call past the soft limit raises in it (retried where the task says),
# past the hard one its process is replaced. Tasks that need longer say so on their decorator.
# (The prefork pool enforces them; the deadlines below bound the calls in any pool.)
CELERY_TASK_SOFT_TIME_LIMIT = 300
CELERY_TASK_TIME_LIMIT = 360
# E-mails and webhooks wait on servers we do not run: a queue of their own, which its own worker
# consumes (Procfile `notifier`), so a receiver that hangs holds up no reconcile.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    "controlpanel.workloads.tasks.job_notify": {"queue": "notifications"},
    "controlpanel.workloads.tasks.job_webhook": {"queue": "notifications"},
    "controlpanel.billing.tasks.budget_alert_notify": {"queue": "notifications"},
    "controlpanel.billing.tasks.budget_alert_webhook": {"queue": "notifications"},
    "controlpanel.reclaim.tasks.gpu_idle_notify": {"queue": "notifications"},
    "controlpanel.reclaim.tasks.gpu_idle_webhook": {"queue": "notifications"},
}

EMAIL_BACKEND = env_str("EMAIL_BACKEND") or (
    "django.core.mail.backends.console.EmailBackend"
    if not env_str("EMAIL_HOST")
    else "django.core.mail.backends.smtp.EmailBackend"
)
EMAIL_HOST = env_str("EMAIL_HOST") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# Seconds each step of talking to the mail server may wait (connect, each answer).
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL") or "ajuste@localhost"
# Where controlpanel.core.mailfiles keeps each message (`make run`'s backend unless EMAIL_HOST).
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH") or str(VAR_DIR / "mail")

COMPUTE_BACKEND = env_choice("COMPUTE_BACKEND", "local", ("local", "kubernetes"))
# Who queues the work: the panel's own admission (`builtin`: per-project quotas, first in first
# out), or Kueue (`kueue`, a cluster with Kueue v0.19.2 installed: one ClusterQueue per project
# in a cohort, borrowing, priorities, preemption; controlpanel/queues). Kueue needs kubernetes
# (system check ajuste.E120).
QUEUE_ENGINE = env_choice("QUEUE_ENGINE", "builtin", ("builtin", "kueue"))
# How often beat reconciles Kueue's configuration (also after each project or flavor change).
QUEUES_RECONCILE_SECONDS = env_int("QUEUES_RECONCILE_SECONDS", 600, minimum=10)
# How often beat asks Kueue where waiting work stands (the visibility API, once per project
# with waiting work) and reads the ClusterQueues' usage for the capacity view.
QUEUES_OBSERVE_SECONDS = env_int("QUEUES_OBSERVE_SECONDS", 10, minimum=1)
# With Kueue: how many times one run of a job may be evicted (preempted) and requeued; the next
# eviction fails it with the reason, so a job that keeps losing its GPUs does not wait forever.
QUEUE_MAX_EVICTIONS = env_int("QUEUE_MAX_EVICTIONS", 10, minimum=0)
# The local backend runs workloads as this machine's user: a server reachable by other host
# names than loopback, or with more than one active user, refuses to start with it unless the
# operator accepts one trust domain (controlpanel/engine/checks.py).
AJUSTE_LOCAL_BACKEND_TRUSTED = env_bool("AJUSTE_LOCAL_BACKEND_TRUSTED", False)
# What the local backend's jobs may use at once, all projects together (0: this machine's
# cores and memory, detected); lower them in a container whose limits are below the machine's.
AJUSTE_LOCAL_CPUS = env_int("AJUSTE_LOCAL_CPUS", 0, minimum=0)
AJUSTE_LOCAL_MEMORY_GIB = env_int("AJUSTE_LOCAL_MEMORY_GIB", 0, minimum=0)

# Object storage: the default datastore (`make run` starts an embedded one and sets these).
S3_ENDPOINT_URL = (env_str("S3_ENDPOINT_URL") or "").rstrip("/")
S3_ACCESS_KEY = env_str("S3_ACCESS_KEY") or ""
S3_SECRET_KEY = env_str("S3_SECRET_KEY") or ""
S3_REGION = env_str("S3_REGION") or "us-east-1"
S3_ALIAS = env_str("S3_ALIAS") or "LOCAL"
if S3_ENDPOINT_URL and not S3_ENDPOINT_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"S3_ENDPOINT_URL={S3_ENDPOINT_URL!r} must start with http(s)://.")
if S3_ENDPOINT_URL and not (S3_ACCESS_KEY and S3_SECRET_KEY):
    raise ImproperlyConfigured("S3_ENDPOINT_URL is set: set S3_ACCESS_KEY and S3_SECRET_KEY too.")
# Where browsers and host-side CLIs reach the default datastore, when S3_ENDPOINT_URL is an
# address only the panel resolves (http://minio:9000 under Compose): presigned URLs and the
# page's CSP use it. Unset: S3_ENDPOINT_URL.
S3_PUBLIC_ENDPOINT_URL = (env_str("S3_PUBLIC_ENDPOINT_URL") or "").rstrip("/")
if S3_PUBLIC_ENDPOINT_URL and not (
    S3_PUBLIC_ENDPOINT_URL.startswith(("http://", "https://"))
    and S3_PUBLIC_ENDPOINT_URL.split("://", 1)[1].strip()
):
    raise ImproperlyConfigured(
        f"S3_PUBLIC_ENDPOINT_URL={S3_PUBLIC_ENDPOINT_URL!r} must be an http(s):// URL."
    )
# Where job and notebook pods reach the default datastore, when S3_ENDPOINT_URL is an address
# only the panel resolves (http://minio:9000 under Compose, the panel on another network):
# the pods' credential file <ALIAS>.endpoint_url and their egress rule use it. Unset:
# S3_ENDPOINT_URL.
S3_POD_ENDPOINT_URL = (env_str("S3_POD_ENDPOINT_URL") or "").rstrip("/")
if S3_POD_ENDPOINT_URL and not (
    S3_POD_ENDPOINT_URL.startswith(("http://", "https://"))
    and S3_POD_ENDPOINT_URL.split("://", 1)[1].strip()
):
    raise ImproperlyConfigured(
        f"S3_POD_ENDPOINT_URL={S3_POD_ENDPOINT_URL!r} must be an http(s):// URL."
    )
# What the default datastore gives job and notebook pods (see the datastore admin page):
# `shared` (its own keys: they reach every bucket they can), `embedded-scoped` (the embedded
# store issues per-project keys; `make run` sets it) or `sts` (AssumeRole on S3_ROLE_ARN with a
# session policy limited to the project's buckets; S3_STS_ENDPOINT_URL where STS answers,
# S3_CREDENTIAL_DURATION_S how long the keys last).
S3_CREDENTIAL_MODE = env_choice(
    "S3_CREDENTIAL_MODE", "shared", ("shared", "embedded-scoped", "sts")
)
S3_ROLE_ARN = env_str("S3_ROLE_ARN") or ""
S3_STS_ENDPOINT_URL = (env_str("S3_STS_ENDPOINT_URL") or "").rstrip("/")
S3_CREDENTIAL_DURATION_S = env_int("S3_CREDENTIAL_DURATION_S", 3600, minimum=900)
if S3_CREDENTIAL_MODE == "sts" and not S3_ROLE_ARN:
    raise ImproperlyConfigured("S3_CREDENTIAL_MODE=sts: set S3_ROLE_ARN, the role pods assume.")
# On a cluster `shared` with more than one project is an explicit choice (system check
# ajuste.E102 refuses to start otherwise): every pod then reaches every project's buckets.
S3_SHARED_CREDENTIALS_ACKNOWLEDGED = env_bool("S3_SHARED_CREDENTIALS_ACKNOWLEDGED", False)
if S3_CREDENTIAL_DURATION_S > 43200:
    raise ImproperlyConfigured(
        "S3_CREDENTIAL_DURATION_S must be at most 43200 (12 h, STS's limit)."
    )
# Origins allowed to upload from a browser into the buckets Ajuste creates (bucket CORS).
S3_CORS_ORIGINS = env_list("S3_CORS_ORIGINS", [SITE_URL])
# Fernet keys for datastore credentials at rest (first encrypts, all decrypt: rotation);
# unset, one is derived from SECRET_KEY (then rotating SECRET_KEY needs SECRET_KEY_FALLBACKS).
FIELD_ENCRYPTION_KEY = env_list("FIELD_ENCRYPTION_KEY", [])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Every line carries the request id ("-" outside a request; a task's is its request's).
    "filters": {"request_id": {"()": "controlpanel.core.requestid.RequestIdFilter"}},
    "formatters": {
        "plain": {
            "format": "%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s"
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL") or "INFO"},
    # httpx and httpcore say every request's URL at INFO/DEBUG: a webhook's secret path, every
    # call an app's proxy relays. Their warnings still show.
    "loggers": {name: {"level": "WARNING"} for name in ("axes", "httpx", "httpcore")},
}

# /metrics for Prometheus: `Authorization: Bearer <METRICS_TOKEN>`; a site admin's session
# always reads it; empty: 404 to everyone else (controlpanel/core/metrics).
METRICS_TOKEN = env_str("METRICS_TOKEN") or ""

# Workloads. The Kubernetes backend uses in-cluster config, else KUBECONFIG; KUBERNETES_API_HOST
# names an API server directly (`kubectl proxy`, which adds the credentials: none are sent).
KUBERNETES_API_HOST = env_str("KUBERNETES_API_HOST") or None
KUBERNETES_SERVICE_ACCOUNT = env_str("KUBERNETES_SERVICE_ACCOUNT") or "ajuste-controller"
KUBERNETES_NAMESPACE = env_str("KUBERNETES_NAMESPACE") or "ajuste"
# Where the cluster reaches the panel's web Service (notebook and app forward-auth): derived
# from the namespace the panel runs in unless given (another Service name, an external URL).
KUBERNETES_PANEL_URL = (
    env_str("KUBERNETES_PANEL_URL") or f"http://ajuste-web.{KUBERNETES_NAMESPACE}.svc.cluster.local"
).rstrip("/")
if (
    urlsplit(KUBERNETES_PANEL_URL).scheme not in ("http", "https")
    or not urlsplit(KUBERNETES_PANEL_URL).hostname
):
    raise ImproperlyConfigured("KUBERNETES_PANEL_URL: an http:// or https:// URL with a host")
# Read pods and workloads one project namespace at a time (clusters that grant no cluster-wide
# reads; k8s/components/namespaced gives the RBAC): the sweep lists each project namespace.
KUBERNETES_NAMESPACED = env_bool("KUBERNETES_NAMESPACED", False)
# Images a kustomize overlay moved (deploy.images.MOVABLE: the serving and editors' images):
# a workload asking for the default runs the moved one.
AJUSTE_IMAGE_MAP = images.moved_images({name: env_str(name) or "" for name in images.MOVABLE})
# One API call (connect aside) waits this long for its answer, then is retried (deploy/kubernetes/
# api.py): a hung API server holds a worker thread for minutes at most, not forever.
KUBERNETES_REQUEST_TIMEOUT_SECONDS = env_int("KUBERNETES_REQUEST_TIMEOUT_SECONDS", 30, minimum=1)
AJUSTE_FINETUNE_IMAGE = env_str("AJUSTE_FINETUNE_IMAGE") or images.FINETUNE_IMAGE
AJUSTE_SYNC_IMAGE = env_str("AJUSTE_SYNC_IMAGE") or None
MAX_GPUS_PER_JOB = env_int("MAX_GPUS_PER_JOB", 4, minimum=1)
# A job's `nodes` (pods of MAX_GPUS_PER_JOB GPUs at most each) run together under torchrun.
MAX_NODES_PER_JOB = env_int("MAX_NODES_PER_JOB", 8, minimum=1)
# The Celery worker touches this file every WORKER_HEARTBEAT_SECONDS from its own thread; the
# liveness probe checks it without the broker (controlpanel/core/heartbeat.py). Empty: off.
WORKER_HEARTBEAT_FILE = env_str("WORKER_HEARTBEAT_FILE", str(VAR_DIR / "worker-heartbeat"))
WORKER_HEARTBEAT_SECONDS = env_int("WORKER_HEARTBEAT_SECONDS", 15, minimum=1)
# What project pods may reach besides DNS (their namespaces deny egress by default): the
# datastores' endpoints unless KUBERNETES_EGRESS_FROM_DATASTORES=0, plus KUBERNETES_EGRESS
# (`CIDR[:PORT]` or `namespace/NAME[:PORT]`, comma-separated). See deploy/egress.py.
try:
    KUBERNETES_EGRESS = parse_egress(env_str("KUBERNETES_EGRESS") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_EGRESS: {exc}") from None
KUBERNETES_EGRESS_FROM_DATASTORES = env_bool("KUBERNETES_EGRESS_FROM_DATASTORES", True)
# DNS goes only to these resolvers (`NAMESPACE/LABEL=VALUE`, `NAMESPACE` or CIDRs) and to a
# node-local cache's address; wide egress rules leave out the private and link-local ranges
# but those KUBERNETES_EGRESS_ALLOW_PRIVATE lists (CIDRs). See deploy/egress.py.
try:
    KUBERNETES_DNS = parse_dns(env_str("KUBERNETES_DNS") or "kube-system/k8s-app=kube-dns")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_DNS: {exc}") from None
try:
    KUBERNETES_NODE_LOCAL_DNS = parse_node_local_dns(env_str("KUBERNETES_NODE_LOCAL_DNS") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_NODE_LOCAL_DNS: {exc}") from None
try:
    KUBERNETES_EGRESS_ALLOW_PRIVATE = parse_cidrs(env_str("KUBERNETES_EGRESS_ALLOW_PRIVATE") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_EGRESS_ALLOW_PRIVATE: {exc}") from None
KUBERNETES_IMAGE_PULL_SECRETS = tuple(env_list("KUBERNETES_IMAGE_PULL_SECRETS", []))
KUBERNETES_STORAGE_CLASS = env_str("KUBERNETES_STORAGE_CLASS") or None
JOB_WORKSPACE_GIB = env_int("JOB_WORKSPACE_GIB", 50, minimum=1)
# The workspace claim of a notebook on a cluster (GiB).
NOTEBOOK_WORKSPACE_GIB = env_int("NOTEBOOK_WORKSPACE_GIB", 20, minimum=1)
# APP_KEDA: KEDA is installed, so autoscaled apps use a ScaledObject (scale to zero).
APP_KEDA = env_bool("APP_KEDA", False)
# Where the panel's "Try it" reaches an app, and the user-content gateway a notebook or an app,
# on a cluster: its Service, inside the cluster ({service}, {namespace} and {port} are filled
# in; the project's network policy lets the gateway's pods, and the web pods to apps, through).
APP_SERVICE_URL = (
    env_str("APP_SERVICE_URL") or "http://{service}.{namespace}.svc.cluster.local:{port}"
).rstrip("/")
try:
    _service_url = urlsplit(APP_SERVICE_URL.format(service="s", namespace="n", port=80))
except (KeyError, IndexError, ValueError) as exc:
    raise ImproperlyConfigured(
        f"APP_SERVICE_URL: only {{service}}, {{namespace}} and {{port}} may be filled in ({exc!r})"
    ) from None
if _service_url.scheme not in ("http", "https") or not _service_url.hostname:
    raise ImproperlyConfigured("APP_SERVICE_URL: an http:// or https:// URL with a host")
# "Try it" (controlpanel/served/try_guard.py): a try ends this many seconds after the click,
# answered or not, and a person has at most TRY_IT_PER_USER tries open at once.
TRY_IT_DEADLINE_SECONDS = env_int("TRY_IT_DEADLINE_SECONDS", 60, minimum=1)
TRY_IT_PER_USER = env_int("TRY_IT_PER_USER", 2, minimum=1)
APP_MODEL_GIB = env_int("APP_MODEL_GIB", 20, minimum=1)
# User content (DESIGN.md rule 17): every notebook and app on a host of its own under
# USER_CONTENT_DOMAIN (`nb-<id>.<domain>`), never on the panel's; on a cluster behind the
# user-content gateway (images/gateway), under `make run` proxied by the panel itself on its own
# port (`localhost:<port>`: browsers resolve *.localhost to loopback). Required on a cluster
# (system check ajuste.E110). A ticket of Open is good for TICKET_SECONDS, the host's cookie
# for SESSION_SECONDS; the gateway keeps a notebook's yes for CACHE_SECONDS (the bound on
# how long a removed member, a logged-out session or a stopped notebook still gets through).
try:
    _site_port = urlsplit(SITE_URL).port
    _content_domain = env_str("USER_CONTENT_DOMAIN") or (
        f"localhost{f':{_site_port}' if _site_port else ''}" if COMPUTE_BACKEND == "local" else ""
    )
    USER_CONTENT_DOMAIN = parse_content_domain(_content_domain) if _content_domain else None
except ValueError as exc:
    raise ImproperlyConfigured(f"USER_CONTENT_DOMAIN: {exc}") from None
USER_CONTENT_TICKET_SECONDS = env_int("USER_CONTENT_TICKET_SECONDS", 60, minimum=5)
USER_CONTENT_SESSION_SECONDS = env_int("USER_CONTENT_SESSION_SECONDS", 43200, minimum=60)
USER_CONTENT_CACHE_SECONDS = env_int("USER_CONTENT_CACHE_SECONDS", 5, minimum=0)
# The user-content gateway's throttling (images/gateway/ajuste-gateway: the same names and
# defaults), kept by the panel's own proxy under `make run` (controlpanel/usercontent/throttle.py):
# requests a second per client address and the burst above it, the same per Authorization
# header, and ticket exchanges a minute per address.
AJUSTE_GATEWAY_RATE = env_int("AJUSTE_GATEWAY_RATE", 100, minimum=1)
AJUSTE_GATEWAY_BURST = env_int("AJUSTE_GATEWAY_BURST", 400, minimum=1)
AJUSTE_GATEWAY_KEY_RATE = env_int("AJUSTE_GATEWAY_KEY_RATE", 50, minimum=1)
AJUSTE_GATEWAY_KEY_BURST = env_int("AJUSTE_GATEWAY_KEY_BURST", 200, minimum=1)
AJUSTE_GATEWAY_SIGNIN_RATE = env_int("AJUSTE_GATEWAY_SIGNIN_RATE", 60, minimum=1)
AJUSTE_GATEWAY_SIGNIN_BURST = env_int("AJUSTE_GATEWAY_SIGNIN_BURST", 30, minimum=1)
# Ingresses of their own with ingress-nginx's forward-auth served notebooks and apps before the
# gateway did: their settings say nothing any more, and a value left set is refused.
for _retired in (
    "NOTEBOOK_HOST", "NOTEBOOK_AUTH_URL", "NOTEBOOK_TLS_SECRET", "NOTEBOOK_INGRESS_CLASS",
    "APP_HOST", "APP_AUTH_URL", "APP_TLS_SECRET", "APP_INGRESS_CLASS",
    "KUBERNETES_INGRESS_NAMESPACE",
):  # fmt: skip
    if env_str(_retired):
        raise ImproperlyConfigured(
            f"{_retired} is retired: notebooks and apps are served by the user-content gateway "
            "on hosts under USER_CONTENT_DOMAIN (README: Configuration)."
        )
# Where KEDA reads an app's request rate (the panel's ajuste_app_requests_total, scraped).
APP_PROMETHEUS_URL = (
    env_str("APP_PROMETHEUS_URL") or "http://prometheus-operated.monitoring.svc:9090"
)
CURRENCY = env_str("CURRENCY") or "EUR"
# Tax on invoices, in percent of the billed amount (shown on the billing pages and invoices).
BILLING_TAX_RATE = env_percent("BILLING_TAX_RATE", "0")
JOB_SWEEP_SECONDS = env_int("JOB_SWEEP_SECONDS", 10, minimum=1)
JOB_SWEEP_LOCK_SECONDS = env_int("JOB_SWEEP_LOCK_SECONDS", 120, minimum=1)
# A final row whose finalize (notice, quota, log archive) has not happened this long after its
# end lost its task (a worker killed, a broker down): the sweep sends it again.
JOB_FINALIZE_GRACE_SECONDS = env_int("JOB_FINALIZE_GRACE_SECONDS", 120, minimum=1)
# The sweep deletes a run's Jobs and pods once its row has ended (or moved on to another run)
# this long ago, and the objects are as old: nothing is left holding GPUs. A run of this
# install that no row names (made after a restored dump) is stopped this long after the sweep
# first noticed it (engine/orphans.py; raise it for a restore: docs/deploy-kubernetes.md).
JOB_ORPHAN_GRACE_SECONDS = env_int("JOB_ORPHAN_GRACE_SECONDS", 300, minimum=0)
# ...and its workspace claim (a notebook's, a job run's) is deleted only this long after it was
# first noticed: a restore is noticed well within a day (listed on the capacity page meanwhile).
WORKSPACE_ORPHAN_GRACE_SECONDS = env_int("WORKSPACE_ORPHAN_GRACE_SECONDS", 7 * 86400, minimum=86400)
# A failed webhook is retried 8 times, the first after about this, doubling up to a minute.
WEBHOOK_RETRY_BASE_MS = env_int("WEBHOOK_RETRY_BASE_MS", 2000, minimum=1)
# One webhook POST, all of it (name lookup, connection, request, answer), ends within this.
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
# Uploads (API and browser): the largest object a multipart upload may make (GiB; S3's own
# cap is 5 TiB), and how many uploads one user may start in an hour (0: no limit).
UPLOAD_MAX_BYTES = env_int("UPLOAD_MAX_GIB", 5120, minimum=1) * 1024**3
UPLOADS_PER_HOUR = env_int("UPLOADS_PER_HOUR", 10000, minimum=0)
# Webhooks reach public addresses only (controlpanel/core/public_http.py): ALLOW lets private
# ranges through (a receiver on the company network), DENY refuses more (the cluster's pod and
# service ranges when they are public); DENY wins.
WEBHOOK_ALLOW_CIDRS = env_list("WEBHOOK_ALLOW_CIDRS", [])
WEBHOOK_DENY_CIDRS = env_list("WEBHOOK_DENY_CIDRS", [])
for _name, _cidrs in (
    ("WEBHOOK_ALLOW_CIDRS", WEBHOOK_ALLOW_CIDRS),
    ("WEBHOOK_DENY_CIDRS", WEBHOOK_DENY_CIDRS),
):
    for _cidr in _cidrs:
        try:
            ipaddress.ip_network(_cidr, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{_name}: {_cidr!r} is not an address range such as 10.0.0.0/8."
            ) from None
# Short-lived pod credentials (STS) of projects with live work are renewed this often.
POD_CREDENTIALS_RENEW_SECONDS = env_int("POD_CREDENTIALS_RENEW_SECONDS", 900, minimum=60)
CELERY_BEAT_SCHEDULE["pod-credentials-renew"] = {
    "task": "controlpanel.workloads.tasks.pod_credentials_renew",
    "schedule": float(POD_CREDENTIALS_RENEW_SECONDS),
    "options": {"expires": float(POD_CREDENTIALS_RENEW_SECONDS)},
}
# Open runs are billed up to now, and runs a crash left unrecorded are recorded, this often.
BILLING_CATCH_UP_SECONDS = env_int("BILLING_CATCH_UP_SECONDS", 300, minimum=10)
if QUEUE_ENGINE == "kueue":
    CELERY_BEAT_SCHEDULE["queues-reconcile"] = {
        "task": "controlpanel.queues.tasks.queues_reconcile_task",
        "schedule": float(QUEUES_RECONCILE_SECONDS),
        "options": {"expires": float(QUEUES_RECONCILE_SECONDS)},
    }
    CELERY_BEAT_SCHEDULE["queues-observe"] = {
        "task": "controlpanel.queues.tasks.queues_observe_task",
        "schedule": float(QUEUES_OBSERVE_SECONDS),
        "options": {"expires": float(QUEUES_OBSERVE_SECONDS)},
    }
CELERY_BEAT_SCHEDULE["billing-catch-up"] = {
    "task": "controlpanel.billing.tasks.billing_catch_up",
    "schedule": float(BILLING_CATCH_UP_SECONDS),
    "options": {"expires": float(BILLING_CATCH_UP_SECONDS)},
}
# The dashboards' rollups of today and yesterday are rebuilt this often (their numbers lag by
# at most this), and GPU utilisation is read from DCGM_PROMETHEUS_URL (empty: no data).
DASHBOARD_ROLLUP_SECONDS = env_int("DASHBOARD_ROLLUP_SECONDS", 60, minimum=10)
CELERY_BEAT_SCHEDULE["dashboards-rollup"] = {
    "task": "controlpanel.dashboards.tasks.dashboards_rollup",
    "schedule": float(DASHBOARD_ROLLUP_SECONDS),
    "options": {"expires": float(DASHBOARD_ROLLUP_SECONDS)},
}
# GPU utilisation by pod from a Prometheus that scrapes NVIDIA's DCGM exporter (its base URL,
# http(s)://host:port[/prefix]; empty: the pages say "no data"). DCGM_METRIC: the exporter's
# DCGM_FI_DEV_GPU_UTIL (percent) or DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio, shown as percent).
DCGM_PROMETHEUS_URL = (env_str("DCGM_PROMETHEUS_URL") or "").rstrip("/")
if DCGM_PROMETHEUS_URL and (
    urlsplit(DCGM_PROMETHEUS_URL).scheme not in ("http", "https")
    or not urlsplit(DCGM_PROMETHEUS_URL).hostname
):
    raise ImproperlyConfigured(
        f"DCGM_PROMETHEUS_URL: {DCGM_PROMETHEUS_URL!r} is not an http(s) URL such as "
        "http://prometheus.monitoring:9090."
    )
DCGM_METRIC = env_choice(
    "DCGM_METRIC", "DCGM_FI_DEV_GPU_UTIL", ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
)
DCGM_TIMEOUT_SECONDS = env_int("DCGM_TIMEOUT_SECONDS", 3, minimum=1)
# The GPU idle policy (controlpanel/reclaim): running GPU workloads' DCGM samples are read this
# often (a warning or a stop comes on this beat); idle GPUs are priced hour by hour.
GPU_IDLE_CHECK_SECONDS = env_int("GPU_IDLE_CHECK_SECONDS", 60, minimum=10)
CELERY_BEAT_SCHEDULE["reclaim-check"] = {
    "task": "controlpanel.reclaim.tasks.gpu_idle_check_task",
    "schedule": float(GPU_IDLE_CHECK_SECONDS),
    "options": {"expires": float(GPU_IDLE_CHECK_SECONDS)},
}
CELERY_BEAT_SCHEDULE["reclaim-money"] = {
    "task": "controlpanel.reclaim.tasks.idle_money_task",
    "schedule": 300.0,
    "options": {"expires": 300.0},
}
CELERY_BEAT_SCHEDULE["jobs-sweep"] = {
    "task": "controlpanel.workloads.tasks.jobs_sweep",
    "schedule": float(JOB_SWEEP_SECONDS),
    "options": {"expires": float(JOB_SWEEP_SECONDS)},
}

# Ended logs (engine/logarchive.py): once a run's log is complete it moves out of PostgreSQL to
# the default datastore (S3_ENDPOINT_URL), one gzip object per run in LOG_ARCHIVE_BUCKET (made if
# missing); without S3_ENDPOINT_URL logs stay in PostgreSQL. Archives older than
# LOG_ARCHIVE_RETENTION_DAYS are deleted (0: kept forever). A failed run's kept workspace claim
# (a push to retry, data to rescue) is deleted WORKSPACE_KEPT_DAYS after the run ended
# (engine/workspaces.py). Both are done by one periodic task.
LOG_ARCHIVE_BUCKET = env_str("LOG_ARCHIVE_BUCKET") or "ajuste-logs"
LOG_ARCHIVE_RETENTION_DAYS = env_int("LOG_ARCHIVE_RETENTION_DAYS", 90, minimum=0)
WORKSPACE_KEPT_DAYS = env_int("WORKSPACE_KEPT_DAYS", 7, minimum=1)
RETENTION_SECONDS = env_int("RETENTION_SECONDS", 600, minimum=10)
CELERY_BEAT_SCHEDULE["retention"] = {
    "task": "controlpanel.workloads.tasks.retention",
    "schedule": float(RETENTION_SECONDS),
    "options": {"expires": float(RETENTION_SECONDS)},
}

# Sweeps (controlpanel/sweeps): how often each running sweep is advanced (pruning reads the
# trials' loss curves, finished trials make room for new ones); a trial's end advances it too.
SWEEP_TICK_SECONDS = env_int("SWEEP_TICK_SECONDS", 5, minimum=1)
CELERY_BEAT_SCHEDULE["sweeps-tick"] = {
    "task": "controlpanel.sweeps.tasks.sweeps_tick",
    "schedule": float(SWEEP_TICK_SECONDS),
    "options": {"expires": float(SWEEP_TICK_SECONDS)},
}
# Optional: finished fine-tunes mirrored to this MLflow tracking server (one experiment per
# project: parameters, loss per step, the adapter's location). Empty: no export.
MLFLOW_TRACKING_URI = env_str("MLFLOW_TRACKING_URI")

# Live pages (controlpanel/streams): Server-Sent Events served by the ASGI server
# (controlpanel.asgi, the Procfile's `events`). STREAMS_URL is where pages open them: the
# events server's own URL (make run sets it), or the panel's (SITE_URL) behind a gateway that
# routes /p/*/events/ and /api/v1/*/logs/stream/ to it; empty, pages poll. They poll too when
# a stream cannot be held.
STREAMS_URL = (env_str("STREAMS_URL") or "").rstrip("/")
STREAMS_ALLOWED_ORIGINS = env_list("STREAMS_ALLOWED_ORIGINS", [SITE_URL])
STREAMS_MAX_PER_USER = env_int("STREAMS_MAX_PER_USER", 20, minimum=1)
STREAMS_HEARTBEAT_SECONDS = env_int("STREAMS_HEARTBEAT_SECONDS", 15, minimum=1)
# An open stream asks again whether its viewer may follow it when told (a logout, a
# deactivation, a lost project) and, in case a message was lost, this often.
STREAMS_RECHECK_SECONDS = env_int("STREAMS_RECHECK_SECONDS", 300, minimum=1)
# The threads an events process reads rows on, each holding a database connection only while
# it reads: the most connections one events process opens at once.
STREAMS_READ_THREADS = env_int("STREAMS_READ_THREADS", 8, minimum=1)
if STREAMS_URL:  # pages may open EventSources there
    _streams = urlsplit(STREAMS_URL)
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["connect-src"].append(
        f"{_streams.scheme}://{_streams.netloc}"
    )
