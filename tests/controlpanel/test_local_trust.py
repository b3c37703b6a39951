"""A server running the local backend where other people reach it refuses to start: a job
there runs as the panel's OS user, beside its secret key, database and credentials."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlpanel.engine.checks import local_backend_problems, local_backend_users_check
from tests.fixtures.processes import Processes, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dropped = {"DJANGO_ALLOW_ASYNC_UNSAFE", "COMPUTE_BACKEND", "ALLOWED_HOSTS"}
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_public_host_name_refuses_the_local_backend() -> None:
    refused = _check({"ALLOWED_HOSTS": "127.0.0.1,panel.example.com"})
    assert refused.returncode != 0
    assert "ajuste.E001" in refused.stderr
    assert "ALLOWED_HOSTS names panel.example.com" in refused.stderr
    assert "AJUSTE_LOCAL_BACKEND_TRUSTED=1" in refused.stderr
    trusted = _check({"ALLOWED_HOSTS": "panel.example.com", "AJUSTE_LOCAL_BACKEND_TRUSTED": "1"})
    assert trusted.returncode == 0, trusted.stderr
    cluster = {"COMPUTE_BACKEND": "kubernetes", "USER_CONTENT_DOMAIN": "usercontent.example.net"}
    on_a_cluster = _check({"ALLOWED_HOSTS": "panel.example.com", **cluster})  # else E110
    assert on_a_cluster.returncode == 0, on_a_cluster.stderr


@pytest.mark.parametrize("hosts", ["127.0.0.1,localhost", "[::1],ajuste.localhost,127.0.0.2"])
def test_loopback_only_is_fine(hosts: str) -> None:
    assert _check({"ALLOWED_HOSTS": hosts}).returncode == 0


def test_a_second_active_user_refuses_the_local_backend(
    owner: Any, member: Any, settings: Any
) -> None:
    settings.COMPUTE_BACKEND, settings.AJUSTE_LOCAL_BACKEND_TRUSTED = "local", False
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    errors = local_backend_users_check(None, databases=["default"])
    assert [e.id for e in errors] == ["ajuste.E001"]
    assert "2 active users" in errors[0].msg
    member.is_active = False
    member.save()
    assert local_backend_problems() == []  # `make run`: one admin, loopback


def test_the_worker_refuses_to_start(transactional_db: None, processes: Any) -> None:
    from tests.fixtures.panel import UserFactory

    UserFactory(username="ann")
    UserFactory(username="bob")
    procs: Processes = processes({"AJUSTE_LOCAL_BACKEND_TRUSTED": "0"})
    worker = procs.worker()
    wait_for(lambda: worker.poll() is not None, 60, "the worker to exit", procs)
    assert worker.returncode != 0
    assert "COMPUTE_BACKEND=local with 2 active users" in procs.logs()


def test_gunicorn_refuses_to_load_the_app() -> None:
    """gunicorn runs no system checks: loading controlpanel.wsgi refuses instead."""
    env = {k: v for k, v in os.environ.items() if k != "COMPUTE_BACKEND"}
    loaded = subprocess.run(
        [sys.executable, "-c", "import controlpanel.wsgi"],
        cwd=ROOT,
        env=env | {"ALLOWED_HOSTS": "panel.example.com"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode != 0
    assert "COMPUTE_BACKEND=local with ALLOWED_HOSTS names panel.example.com" in loaded.stderr
