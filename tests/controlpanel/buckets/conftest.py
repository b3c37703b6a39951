"""The panel's default datastore pointed at the session's real S3 server (tests/fixtures/s3.py),
buckets cleaned up after each test, and Celery tasks run inline."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache.backends.locmem import LocMemCache

from controlpanel.buckets.models import BucketGrant
from controlpanel.projects.access import ProjectAccess, project_access
from storage import objects
from storage.datastore import DatastoreConfig
from storage.errors import StorageError


@pytest.fixture
def datastore(settings: Any, s3_server: DatastoreConfig) -> Iterator[DatastoreConfig]:
    """The default datastore `LOCAL` is the test S3 server; S3 buckets the test leaves behind
    are deleted with their objects."""
    settings.S3_ENDPOINT_URL = s3_server.endpoint_url
    settings.S3_PUBLIC_ENDPOINT_URL = ""
    settings.S3_ACCESS_KEY = s3_server.access_key
    settings.S3_SECRET_KEY = s3_server.secret_key
    settings.S3_REGION = s3_server.region
    settings.S3_ALIAS = "LOCAL"
    settings.S3_CORS_ORIGINS = ["http://testserver"]
    before = {b.name for b in objects.list_buckets(s3_server)}
    yield s3_server
    for info in objects.list_buckets(s3_server):
        if info.name not in before:
            with contextlib.suppress(StorageError):
                objects.delete_bucket(s3_server, bucket=info.name, force=True)


@pytest.fixture
def name() -> str:
    """A fresh bucket name."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def access(owner: Any, project: Any) -> ProjectAccess:
    return project_access(user=owner, slug=project.slug)


@pytest.fixture
def grant(project: Any, admin_user: Any) -> Callable[..., BucketGrant]:
    """`grant(name, to=project)`: an admin grants the existing bucket `name` on LOCAL to a
    project (alpha unless `to` says), so that it may attach it."""

    def make(name: str, to: Any = None) -> BucketGrant:
        return BucketGrant.objects.create(
            datastore="LOCAL", name=name, project=to or project, granted_by=admin_user
        )

    return make


@pytest.fixture
def eager_tasks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Celery tasks run in the calling thread, with a private cache for the usage-refresh
    debounce (so no key of an earlier test or run holds a refresh back)."""
    from controlpanel.buckets import usage
    from controlpanel.celery import app

    monkeypatch.setattr(usage, "cache", LocMemCache(f"buckets-{uuid.uuid4()}", {}))
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous
