"""Fixtures of the app tests that serve a real model on the local backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.usercontent.domain import parse_content_domain
from storage.datastore import DatastoreConfig
from tests.fixtures.apps import tiny_model_and_adapter, upload
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import api_client_for


@pytest.fixture
def tiny_weights(project: Project, panel_s3: DatastoreConfig, tmp_path: Path) -> str:
    """A project bucket holding a tiny Llama at `tiny-llama/` and a LoRA adapter of it at
    `runs/1/adapter/`: its name."""
    bucket = project_bucket(project, panel_s3).name  # a new name: the S3 server outlives a test
    model_dir, adapter_dir = tiny_model_and_adapter(tmp_path / "assets")
    upload(panel_s3, bucket, "tiny-llama", model_dir)
    upload(panel_s3, bucket, "runs/1/adapter", adapter_dir)
    return bucket


@pytest.fixture
def deploy_tiny_app(
    tiny_weights: str, owner: Any, settings: Any, live_server: Any
) -> Callable[[str], tuple[App, dict[str, Any]]]:
    """`deploy_tiny_app(name)`: the owner creates an app of the tiny model and its adapter
    through the API; the app and the API's answer. Apps are served on their own host under
    the live server's `localhost:<port>`, as settings.py derives it from SITE_URL under make run."""
    settings.SITE_URL = live_server.url
    settings.USER_CONTENT_DOMAIN = parse_content_domain(urlsplit(live_server.url).netloc)

    def deploy(name: str) -> tuple[App, dict[str, Any]]:
        created = api_client_for(owner).post(
            "/api/v1/apps/",
            {
                "project": "alpha",
                "name": name,
                "model": f"{tiny_weights}@LOCAL/tiny-llama",
                "adapter": f"{tiny_weights}@LOCAL/runs/1/adapter",
                "flavor": "ai1-1-cpu",
            },
            format="json",
        )
        assert created.status_code == 201, created.json()
        return App.objects.get(pk=created.json()["id"]), created.json()

    return deploy
