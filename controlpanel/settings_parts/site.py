"""Where the panel lives and who may reach it: paths, DEBUG/HTTPS, SECRET_KEY, hosts, SITE_URL."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from controlpanel.env import env_bool, env_list, env_str

__all__ = [
    "ALLOWED_HOSTS",
    "BASE_DIR",
    "CSRF_TRUSTED_ORIGINS",
    "DEBUG",
    "HTTPS",
    "SECRET_KEY",
    "SECRET_KEY_FALLBACKS",
    "SITE_URL",
    "VAR_DIR",
]

BASE_DIR = Path(__file__).resolve().parent.parent.parent
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
