"""Fixtures shared by the end-to-end tests of jobs, notebooks and apps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from storage.datastore import DatastoreConfig
from tests.fixtures.processes import Processes


@pytest.fixture
def local_processes(
    processes: Callable[[dict[str, str]], Processes],
    panel_s3: DatastoreConfig,
    local_jobs: Any,
    settings: Any,
) -> Processes:
    """The local backend's worker, beat and watcher, running, on the test database, Redis and
    S3 (the panel's default datastore, alias LOCAL)."""
    settings.COMPUTE_BACKEND = "local"
    procs = processes(
        {
            "COMPUTE_BACKEND": "local",
            "AJUSTE_VAR_DIR": str(settings.VAR_DIR),
            "S3_ENDPOINT_URL": panel_s3.endpoint_url,
            "S3_ALIAS": "LOCAL",
            "S3_ACCESS_KEY": panel_s3.access_key,
            "S3_SECRET_KEY": panel_s3.secret_key,
        }
    )
    procs.worker()
    procs.beat()
    procs.watcher()
    return procs
