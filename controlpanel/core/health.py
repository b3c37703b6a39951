"""Readiness checks: each returns None when healthy, else a short reason."""

from __future__ import annotations

from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connection

Check = Callable[[], str | None]


def check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return f"database unreachable: {type(exc).__name__}"
    return None


def check_broker() -> str | None:
    try:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2)
        client.ping()
    except Exception as exc:
        return f"broker unreachable: {type(exc).__name__}"
    return None


# Apps append to this list (storage adds its check when it is ready).
READINESS_CHECKS: dict[str, Check] = {"database": check_database, "broker": check_broker}


def readiness() -> dict[str, str]:
    return {name: (check() or "ok") for name, check in READINESS_CHECKS.items()}
