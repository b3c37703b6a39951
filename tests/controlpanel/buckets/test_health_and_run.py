"""/readyz includes the default datastore; `make run` starts the embedded object store."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from controlpanel.buckets import embedded_store
from controlpanel.buckets.health import check_storage
from storage import objects
from storage.client import clear_client_cache
from storage.datastore import DatastoreConfig


@pytest.mark.django_db
def test_readyz_reports_storage(datastore: DatastoreConfig, settings: Any) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["storage"] == "ok"
    settings.S3_SECRET_KEY = "wrong"
    clear_client_cache()
    assert check_storage() == "storage refused the credentials"
    settings.S3_ENDPOINT_URL = "http://127.0.0.1:9"
    down = Client().get("/readyz")
    # Reported, not gating: an S3 outage must not take every web replica out of the Service.
    assert down.status_code == 200
    assert down.json()["checks"]["storage"] == "storage unreachable: ConnectionRefusedError"
    assert "storage" not in down.json()["gating"]


def test_no_default_datastore_is_not_a_readiness_failure(settings: Any) -> None:
    settings.S3_ENDPOINT_URL = ""
    assert check_storage() is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(var: Path, port: int) -> tuple[dict[str, str], list[subprocess.Popen]]:
    env = {"SITE_URL": "http://127.0.0.1:8000"}
    assert embedded_store.plan_object_store(var, env, port)
    process, said = embedded_store.start_object_store(var, env)
    assert said.startswith(f"• embedded object store on http://127.0.0.1:{port} (data in {var}")
    return env, [process]


def _stop(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.terminate()
        child.wait(10)


def test_make_run_starts_the_object_store_and_exports_it(tmp_path: Path) -> None:
    port = _free_port()
    env, children = _start(tmp_path, port)
    try:
        assert env["S3_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        assert env["S3_ALIAS"] == "LOCAL"
        assert env["S3_CORS_ORIGINS"] == "http://127.0.0.1:8000,http://localhost:8000"
        config = DatastoreConfig(
            "LOCAL",
            env["S3_ENDPOINT_URL"],
            env["S3_REGION"],
            env["S3_ACCESS_KEY"],
            env["S3_SECRET_KEY"],
        )
        objects.create_bucket(config, bucket="made-under-make-run")
        assert (tmp_path / "s3_secret_key").stat().st_mode & 0o777 == 0o600
    finally:
        _stop(children)
    again, children = _start(tmp_path, port)  # the next `make run`: same data, same credentials
    try:
        assert again == env
        assert [b.name for b in objects.list_buckets(config)] == ["made-under-make-run"]
    finally:
        _stop(children)
    configured: dict[str, str] = {"S3_ENDPOINT_URL": "https://s3.example.net"}
    assert not embedded_store.plan_object_store(tmp_path, configured, port)
    assert configured == {"S3_ENDPOINT_URL": "https://s3.example.net"}  # nothing to start


def test_the_stores_cors_follows_the_webs_port(tmp_path: Path) -> None:
    """`make run` moved the web to 8001 (8000 taken): a browser upload comes from there."""
    env = {"SITE_URL": "http://127.0.0.1:8001"}
    embedded_store.plan_object_store(tmp_path, env, 9101)
    assert env["S3_CORS_ORIGINS"] == "http://127.0.0.1:8001,http://localhost:8001"
    assert env["AJUSTE_S3_PORT"] == "9101"
