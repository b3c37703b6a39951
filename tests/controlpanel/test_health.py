from __future__ import annotations

from typing import Any

from django.test import Client

from controlpanel.core import health


def test_healthz_answers_without_login(db: Any) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_database_and_broker(db: Any) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"] == "ok"


def test_readyz_reports_an_unreachable_broker(db: Any, settings: Any) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("broker unreachable")
    assert health.check_database() is None
