"""Buckets into the audit log, through the real services against the session's S3 server."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.audit.log import REQUEST
from controlpanel.audit.models import AuditEvent
from controlpanel.buckets import services
from controlpanel.buckets.models import Bucket
from controlpanel.projects.access import ProjectAccess
from storage import objects
from storage.datastore import DatastoreConfig
from tests.controlpanel.audit.test_audit import in_request, only
from tests.controlpanel.buckets.conftest import access, datastore, grant, name  # noqa: F401

pytestmark = pytest.mark.django_db


def test_bucket_create_attach_delete(
    datastore: DatastoreConfig,  # noqa: F811
    access: ProjectAccess,  # noqa: F811
    owner: Any,
    name: str,  # noqa: F811
    grant: Any,  # noqa: F811
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    created = only("bucket.create")
    assert (created.actor, created.project, created.target_type) == (
        owner,
        access.project,
        "bucket",
    )
    assert (created.target_id, created.details) == (str(bucket.pk), {"name": name})

    other = f"{name}-x"
    objects.create_bucket(datastore, bucket=other)
    grant(other)
    attached = services.bucket_attach(access=access, by=owner, name=other)
    event = only("bucket.attach")
    assert (event.actor, event.target_id, event.details) == (
        owner,
        str(attached.pk),
        {"name": other},
    )

    attached_pk = attached.pk
    in_request(owner, lambda: services.bucket_delete(access=access, bucket=attached))
    detached = only("bucket.delete")
    assert (detached.actor, detached.target_id, detached.details) == (
        owner,
        str(attached_pk),
        {"name": other},
    )
    assert detached.ip == "203.0.113.7"
    assert objects.bucket_exists(datastore, bucket=other)  # a detach keeps the data

    bucket_pk = bucket.pk
    assert services.bucket_delete(access=access, bucket=bucket) is True
    gone = AuditEvent.objects.filter(action="bucket.delete", target_id=str(bucket_pk)).get()
    assert (gone.actor, gone.project_slug) == (None, access.project.slug)  # no request: no actor
    assert not Bucket.objects.filter(pk=bucket_pk).exists()
    for event in AuditEvent.objects.all():
        text = str(event.details)
        assert datastore.secret_key not in text and datastore.access_key not in text


def test_the_middleware_forgets_the_request_afterwards(owner: Any) -> None:
    in_request(owner, lambda: None)
    assert REQUEST.get() is None
