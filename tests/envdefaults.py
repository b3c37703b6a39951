"""Loaded with `-p tests.envdefaults` before Django is set up: tests run against the real
PostgreSQL and Redis on loopback unless the environment names others."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ajuste")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("HTTPS", "0")
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-that-is-long-enough-for-django-checks")
os.environ.setdefault("STATIC_MANIFEST", "0")
os.environ.setdefault("AJUSTE_VAR_DIR", "/tmp/ajuste-tests-var")
