"""Thin Celery tasks: take an id, let the service re-read the row and do the work."""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from controlpanel.buckets import services
from storage.errors import StorageUnavailable


# A bucket of millions of objects takes long: an hour per try, and a try cut short by it
# goes on where it stopped (the bucket is still EMPTYING; deleted objects stay deleted).
@shared_task(
    acks_late=True,
    autoretry_for=(StorageUnavailable, SoftTimeLimitExceeded),
    retry_backoff=True,
    max_retries=5,
    soft_time_limit=3600,
    time_limit=3660,
)
def empty_and_delete_bucket(bucket_id: int) -> None:
    services.bucket_empty_and_delete(bucket_id=bucket_id)


@shared_task(acks_late=True, autoretry_for=(StorageUnavailable,), retry_backoff=True, max_retries=3)
def refresh_bucket_stats(bucket_id: int) -> None:
    services.bucket_refresh_stats(bucket_id=bucket_id)
