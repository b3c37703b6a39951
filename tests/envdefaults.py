"""Loaded with `-p tests.envdefaults` before Django is set up: tests run against the real
PostgreSQL and Redis on loopback unless the environment names others."""

import os

# One database per run (pytest-django creates test_ajuste_<pid> and drops it at the end), so
# runs started side by side never share one.
os.environ.setdefault("DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/ajuste_{os.getpid()}")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("HTTPS", "0")
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-that-is-long-enough-for-django-checks")
os.environ.setdefault("STATIC_MANIFEST", "0")
os.environ.setdefault("AJUSTE_VAR_DIR", "/tmp/ajuste-tests-var")
