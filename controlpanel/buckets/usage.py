"""A bucket's usage figures (objects, bytes): recounted by a task, debounced after writes."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.cache import cache
from django.utils import timezone

from controlpanel.buckets.models import Bucket, BucketState
from controlpanel.buckets.selectors import bucket_config
from storage import objects

STATS_PENDING_TTL_S = 300
STATS_DELAY_S = 2  # lets a burst of uploads finish before one recount


def bucket_refresh_stats(*, bucket_id: int) -> None:
    """Count the bucket's objects and bytes now and keep the figures on the row."""
    cache.delete(_stats_key(bucket_id))
    bucket = Bucket.objects.filter(pk=bucket_id, state=BucketState.READY).first()
    if bucket is None:
        return
    stats = objects.bucket_stats(bucket_config(bucket=bucket), bucket=bucket.name)
    Bucket.objects.filter(pk=bucket_id).update(
        object_count=stats.object_count, total_size=stats.total_size, stats_at=timezone.now()
    )


def _stats_key(bucket_id: int) -> str:
    return f"bucket-stats-pending:{bucket_id}"


def bucket_stats_request(*, bucket: Bucket) -> None:
    """Ask for a usage recount. One is queued at a time: the task clears the pending mark
    when it starts, so a change made before it starts is counted by it, and a change made
    after that queues the next one (the mark expires if a worker loses the task)."""
    from controlpanel.buckets.tasks import refresh_bucket_stats

    if cache.add(_stats_key(bucket.pk), 1, STATS_PENDING_TTL_S):
        refresh_bucket_stats.apply_async_on_commit((bucket.pk,), countdown=STATS_DELAY_S)


def bucket_stats_recount(*, bucket: Bucket) -> None:
    """A recount asked for by someone looking at the figures: queued at once, whether or not a
    debounced one is pending (counting twice is harmless; waiting on a lost task is not)."""
    from controlpanel.buckets.tasks import refresh_bucket_stats

    cache.set(_stats_key(bucket.pk), 1, STATS_PENDING_TTL_S)
    refresh_bucket_stats.apply_async_on_commit((bucket.pk,))


def buckets_recount_written(*, project_id: int, volumes: Sequence[str]) -> None:
    """After a job ends: recount the project's buckets it could write to (rw/rwd volumes)."""
    from storage.volumes import Mode, VolumeSpecError, parse_volume_spec

    for spec in volumes:
        try:
            volume = parse_volume_spec(spec)
        except VolumeSpecError:
            continue  # stored specs were valid when submitted; never fail a finalize over one
        if volume.mode == Mode.RO:
            continue
        bucket = Bucket.objects.filter(
            project_id=project_id, datastore=volume.alias, name=volume.bucket
        ).first()
        if bucket is not None:
            bucket_stats_request(bucket=bucket)
