"""Readiness checks: each returns None when healthy, else a short reason.

Only what the web process needs to answer a request gates readiness (`GATING`: the database,
and a schema as new as the code). The broker and the object store are reported in the body but
never take a replica out of the Service: during a Redis or S3 outage pages still render, and
removing every replica would turn a partial outage into a full one. Reported checks run
concurrently with short timeouts and no retries, so /readyz answers within about 2 s."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from redis.backoff import NoBackoff
from redis.retry import Retry

Check = Callable[[], str | None]
BROKER_TIMEOUT_S = 1.5


def check_database() -> str | None:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return f"database unreachable: {type(exc).__name__}"
    return None


def unapplied_migrations() -> list[str]:
    """`app.name` of every migration the code has and the database has not applied."""
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    targets = executor.loader.graph.leaf_nodes()
    return [f"{m.app_label}.{m.name}" for m, _ in executor.migration_plan(targets)]


def check_migrations() -> str | None:
    try:
        missing = unapplied_migrations()
    except Exception as exc:
        return f"migrations unknown: {type(exc).__name__}"
    if missing:
        return f"{len(missing)} migration(s) not applied: {', '.join(missing[:5])}"
    return None


def check_broker() -> str | None:
    try:
        client = redis.Redis.from_url(
            settings.CELERY_BROKER_URL,
            socket_timeout=BROKER_TIMEOUT_S,
            socket_connect_timeout=BROKER_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"broker unreachable: {type(exc).__name__}"
    return None


# Apps add to these (buckets adds "storage" to READINESS_CHECKS when it is ready). A check
# whose name is in GATING makes /readyz answer 503; the others are reported only.
READINESS_CHECKS: dict[str, Check] = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
}
GATING = frozenset({"database", "migrations"})


def readiness() -> dict[str, str]:
    """Every check's result ("ok" or why not): reported ones in threads, gating ones here
    (a database connection belongs to its thread; a pool thread's would never be closed)."""
    reported = {n: c for n, c in READINESS_CHECKS.items() if n not in GATING}
    with ThreadPoolExecutor(max_workers=max(1, len(reported))) as pool:
        futures = {name: pool.submit(_closing, check) for name, check in reported.items()}
        results = {n: (c() or "ok") for n, c in READINESS_CHECKS.items() if n in GATING}
        results |= {name: (future.result() or "ok") for name, future in futures.items()}
    return {name: results[name] for name in READINESS_CHECKS}


def _closing(check: Check) -> str | None:
    try:
        return check()
    finally:
        connections.close_all()  # this thread's own, if the check opened one


def is_ready(results: dict[str, str]) -> bool:
    return all(results[name] == "ok" for name in GATING if name in results)
