"""/healthz and /readyz: readiness gates on what the web process needs (the database and an
up-to-date schema); the broker and storage are reported, with short timeouts and no retries."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.test import Client

from controlpanel.core import health
from controlpanel.core.management.commands.migrate_locked import LOCK_KEY
from storage.client import clear_client_cache


def _in_thread(*args: str, **options: Any) -> None:
    try:
        call_command(*args, **options)
    finally:
        connections.close_all()  # this thread's own connection


def test_healthz_answers_without_login(db: Any) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_probes_need_no_allowed_host_nor_https(db: Any, settings: Any) -> None:
    # As the kubelet asks: the pod's IP as Host, plain http, production's redirect on.
    settings.ALLOWED_HOSTS, settings.SECURE_SSL_REDIRECT = ["ajuste.example.com"], True
    for path in ("/healthz", "/readyz"):
        assert Client().get(path, HTTP_HOST="10.1.2.3:8000").status_code == 200
    assert Client().get("/", HTTP_HOST="10.1.2.3:8000").status_code == 400


def test_readyz_checks_database_migrations_and_broker(db: Any) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["migrations"] == "ok"
    assert body["checks"]["broker"] == "ok"
    assert body["gating"] == ["database", "migrations"]


def test_an_unreachable_broker_is_reported_but_does_not_gate(db: Any, settings: Any) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["broker"].startswith("broker unreachable")
    assert health.check_database() is None


@pytest.fixture
def silent_s3() -> Iterator[tuple[str, list[socket.socket]]]:
    """An endpoint that accepts connections and never answers (a hung S3), counting them."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    listener.close()
    for conn in accepted:
        conn.close()


def test_a_hung_store_is_reported_after_one_attempt_and_does_not_gate(
    db: Any, settings: Any, silent_s3: tuple[str, list[socket.socket]]
) -> None:
    endpoint, accepted = silent_s3
    settings.S3_ENDPOINT_URL = endpoint
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY, settings.S3_ALIAS = "k", "s", "HUNG"
    clear_client_cache()
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["storage"] == "storage unreachable"
    # The TCP probe, then exactly one S3 request: the shared client would have retried 5 times.
    assert len(accepted) == 2


@pytest.fixture
def unapplied(transactional_db: Any) -> Iterator[str]:
    """The newest migration of `workloads` marked as not applied (as after an upgrade whose
    migrations have not run yet); put back afterwards."""
    name = health.MigrationExecutor(connection).loader.graph.leaf_nodes("workloads")[0][1]
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'workloads' AND name = %s", [name]
        )
    yield f"workloads.{name}"
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_migrations (app, name, applied) VALUES ('workloads', %s, now())",
            [name],
        )


def test_readyz_is_503_while_a_migration_is_unapplied(unapplied: str) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == f"1 migration(s) not applied: {unapplied}"


def test_wait_for_migrations_names_what_it_waits_for(unapplied: str) -> None:
    with pytest.raises(CommandError, match=f"not applied yet: {unapplied}"):
        call_command("wait_for_migrations", timeout=0.01, interval=0.01)


def test_wait_for_migrations_returns_once_they_are_applied(unapplied: str) -> None:
    done = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            _in_thread("wait_for_migrations", interval=0.05)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=wait)
    thread.start()
    assert not done.wait(0.5)  # still waiting: the migration is missing
    app, name = unapplied.split(".", 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, now())",
            [app, name],
        )
    thread.join(30)
    assert done.is_set() and errors == []
    with connection.cursor() as cursor:  # the fixture puts it back itself
        cursor.execute("DELETE FROM django_migrations WHERE app = %s AND name = %s", [app, name])


def _waiting_for_the_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return bool(cursor.fetchone()[0])


def test_migrate_locked_waits_for_a_concurrent_migration(transactional_db: Any) -> None:
    out = StringIO()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])  # another pod migrating
        thread = threading.Thread(
            target=_in_thread, args=("migrate_locked",), kwargs={"stdout": out}
        )
        thread.start()
        for _ in range(400):
            if _waiting_for_the_lock():
                break
            threading.Event().wait(0.05)
        assert _waiting_for_the_lock()
        assert "migration lock held" not in out.getvalue()
        cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    thread.join(120)
    assert "migration lock held" in out.getvalue()
    assert "No migrations to apply" in out.getvalue()
