"""Object storage: the default datastore, what it gives pods, and the credentials' keys at rest."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from controlpanel.env import env_bool, env_choice, env_int, env_list, env_str
from controlpanel.settings_parts.site import SITE_URL

__all__ = [
    "FIELD_ENCRYPTION_KEY",
    "S3_ACCESS_KEY",
    "S3_ALIAS",
    "S3_CORS_ORIGINS",
    "S3_CREDENTIAL_DURATION_S",
    "S3_CREDENTIAL_MODE",
    "S3_ENDPOINT_URL",
    "S3_POD_ENDPOINT_URL",
    "S3_PUBLIC_ENDPOINT_URL",
    "S3_REGION",
    "S3_ROLE_ARN",
    "S3_SECRET_KEY",
    "S3_SHARED_CREDENTIALS_ACKNOWLEDGED",
    "S3_STS_ENDPOINT_URL",
]

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
