"""Django settings, read once from the environment (see README, "Configuration").

A bad value stops start-up with a message naming the variable. Coherent groups of settings live in
controlpanel/settings_parts (each names what it gives in __all__) and are star-imported here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from controlpanel.accounts.oidc_settings import read_oidc_settings
from controlpanel.env import env_bool, env_int, env_list, env_str
from controlpanel.settings_parts.api import *  # noqa: F403
from controlpanel.settings_parts.compute import *  # noqa: F403
from controlpanel.settings_parts.periodic import *  # noqa: F403
from controlpanel.settings_parts.periodic import beat_schedule
from controlpanel.settings_parts.site import *  # noqa: F403
from controlpanel.settings_parts.site import BASE_DIR, DEBUG, HTTPS, VAR_DIR
from controlpanel.settings_parts.storage import *  # noqa: F403
from controlpanel.settings_parts.streams import *  # noqa: F403
from controlpanel.settings_parts.streams import STREAMS_URL
from controlpanel.settings_parts.usercontent import *  # noqa: F403

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
        # worker and beat write at once. Tests and production use PostgreSQL. Connections are
        # kept as PostgreSQL's are: a new one per request, with its pragmas and functions, was
        # a tenth of a web thread's time under make run's probe (#27).
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "ajuste.sqlite3",
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60),
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
CELERY_BEAT_SCHEDULE: dict = beat_schedule
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

if STREAMS_URL:  # pages may open EventSources there
    _streams = urlsplit(STREAMS_URL)
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["connect-src"].append(
        f"{_streams.scheme}://{_streams.netloc}"
    )
