"""Thin Celery tasks: take an id, let the service re-read the row and do the work."""

from __future__ import annotations

from celery import shared_task

from controlpanel.buckets import services
from storage.errors import StorageUnavailable


@shared_task(acks_late=True, autoretry_for=(StorageUnavailable,), retry_backoff=True, max_retries=5)
def empty_and_delete_bucket(bucket_id: int) -> None:
    services.bucket_empty_and_delete(bucket_id=bucket_id)


@shared_task(acks_late=True, autoretry_for=(StorageUnavailable,), retry_backoff=True, max_retries=3)
def refresh_bucket_stats(bucket_id: int) -> None:
    services.bucket_refresh_stats(bucket_id=bucket_id)
