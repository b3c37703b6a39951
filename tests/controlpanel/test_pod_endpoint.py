"""S3_POD_ENDPOINT_URL: where job pods reach the default datastore when the panel reaches it
by a name only its own network resolves (`http://s3:8333` under Compose)."""

from __future__ import annotations

from typing import Any

from controlpanel.buckets.selectors import datastore_config
from deploy.manifests.projects import make_datastore_secret
from deploy.types import ProjectRequest
from storage.datastore import DatastoreConfig

KEY = "AJUSTE_DATASTORE_S3_ENDPOINT_URL"


def _settings(settings: Any, pod: str) -> None:
    settings.S3_ENDPOINT_URL, settings.S3_POD_ENDPOINT_URL = "http://s3:8333", pod
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY, settings.S3_ALIAS = "k", "s", "S3"


def test_pods_get_the_pod_endpoint_and_the_panel_keeps_its_own(db: Any, settings: Any) -> None:
    _settings(settings, "http://docker-host.corp:8333")
    config = datastore_config("S3")
    assert config.endpoint_url == "http://s3:8333"  # what the panel and local processes use
    project = ProjectRequest(
        slug="vision", namespace="ajuste-vision", gpu_quota=1, datastores=(config,)
    )
    assert make_datastore_secret(project=project)["stringData"]["S3.endpoint_url"] == (
        "http://docker-host.corp:8333"
    )
    assert config.to_env()[KEY] == "http://s3:8333"


def test_unset_pods_use_the_endpoint(db: Any, settings: Any) -> None:
    _settings(settings, "")
    config = datastore_config("S3")
    assert config.to_env(pod=True)[KEY] == "http://s3:8333"
    assert DatastoreConfig.from_env("S3", config.to_env(pod=True)).endpoint_url == (
        "http://s3:8333"
    )
