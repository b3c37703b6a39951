"""Ended logs in object storage: once a run's log is complete (`logs.archive_logs`), its lines
move out of PostgreSQL into the panel's default datastore as one gzip object (JSON lines), and
PostgreSQL keeps one `LogArchive` row. Pages, the API, downloads and streams read such a run
through `logs` as if its lines were still rows. Archives older than LOG_ARCHIVE_RETENTION_DAYS
are deleted by the retention task; such a log reads as one line that says so.

A deleted workload's (or project's) archives leave the store too: deleting a `LogArchive` row,
by a cascade or not, lists its object (`LogObjectDeletion`) in the same transaction; after the
commit a task deletes the listed objects, and the retention task retries whatever a store that
was down left listed (`purge`).

Without a default datastore (S3_ENDPOINT_URL unset: `make run` on SQLite, say) logs stay in
PostgreSQL.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import threading
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.signals import pre_delete
from django.dispatch import receiver
from django.utils import timezone

from controlpanel.buckets.selectors import datastore_config
from controlpanel.engine.models import JobLogLine, LogArchive, LogObjectDeletion, Workload
from storage import objects
from storage.errors import BucketAlreadyExists, BucketNotFound

log = logging.getLogger(__name__)

MARK = "[ajuste]"
# A log this big compressed is not read back into memory (a run printing 2 GB of text).
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
# Decompressed archives kept in this process (objects never change: no invalidation).
CACHED = 8
_cache: OrderedDict[str, list[str]] = OrderedDict()
_lock = threading.Lock()


def enabled() -> bool:
    return bool(settings.S3_ENDPOINT_URL)


def object_key(job: Workload, run: int) -> str:
    return f"{job.project_id}/{job.pk}/run-{run}.jsonl.gz"


def move_to_store(*, job_id: Any, run: int) -> LogArchive | None:
    """Move a complete run's lines to object storage (idempotent: an archived run is left
    alone); None when there is nothing to do (no datastore, the log still growing)."""
    job = Workload.objects.filter(pk=job_id).first()
    if job is None or not enabled() or (run == job.run and not job.logs_archived):
        return None
    found = LogArchive.objects.filter(job=job, run=run).first()
    if found is not None:
        return found
    rows = JobLogLine.objects.filter(job=job, run=run).order_by("seq")
    body, count, last = io.BytesIO(), 0, 0
    with gzip.GzipFile(fileobj=body, mode="wb", mtime=0) as packed:
        for seq, text in rows.values_list("seq", "text").iterator(chunk_size=2000):
            packed.write(json.dumps(text, ensure_ascii=False).encode() + b"\n")
            count, last = count + 1, seq
    if count != last:
        log.warning("log of run %s of %s has gaps in its numbers: kept in PostgreSQL", run, job_id)
        return None
    config = datastore_config(settings.S3_ALIAS)
    bucket, key = settings.LOG_ARCHIVE_BUCKET, object_key(job, run)
    _ensure_bucket(config, bucket)
    objects.put_object(
        config, bucket=bucket, key=key, data=body.getvalue(), content_type="application/gzip"
    )
    with transaction.atomic():
        if not Workload.objects.select_for_update().filter(pk=job.pk).exists():
            # Deleted while its log was being written: the object goes too.
            _forget(settings.S3_ALIAS, bucket, key)
            return None
        archive, made = LogArchive.objects.get_or_create(
            job=job,
            run=run,
            defaults={
                "datastore": settings.S3_ALIAS,
                "bucket": bucket,
                "key": key,
                "lines": count,
                "size": body.tell(),
            },
        )
        if made:
            JobLogLine.objects.filter(job=job, run=run).delete()
    return archive


def move_pending(limit: int = 200) -> int:
    """Runs whose log ended but is still in PostgreSQL (the datastore was down at the end, or
    an older run of a job run again): moved now. Returns how many moved."""
    if not enabled():
        return 0
    moved = 0
    done = LogArchive.objects.values_list("job_id", "run")
    pending = (
        JobLogLine.objects.filter(seq=1)
        .exclude(job__logs_archived=False, run=F("job__run"))
        .values_list("job_id", "run")
        .order_by("job_id", "run")
    )
    skip = set(done)
    for job_id, run in pending[: limit * 4]:
        if (job_id, run) in skip or moved >= limit:
            continue
        try:
            if move_to_store(job_id=job_id, run=run) is not None:
                moved += 1
        except Exception:  # the store is down: the next round tries again
            log.warning("log of run %s of %s not moved to object storage", run, job_id)
            break
    return moved


def expire(now: Any = None) -> int:
    """Delete archives past LOG_ARCHIVE_RETENTION_DAYS (the row stays, saying when)."""
    days = settings.LOG_ARCHIVE_RETENTION_DAYS
    if not days:
        return 0
    now = now or timezone.now()
    old = LogArchive.objects.filter(deleted_at=None, archived_at__lt=now - timedelta(days=days))
    deleted = 0
    for archive in old[:500]:
        with contextlib.suppress(BucketNotFound):
            objects.delete_object(
                datastore_config(archive.datastore), bucket=archive.bucket, key=archive.key
            )
        archive.deleted_at = now
        archive.save(update_fields=["deleted_at"])
        deleted += 1
    return deleted


@receiver(pre_delete, sender=LogArchive, dispatch_uid="logarchive-forget")
def _archive_deleted(sender: Any, instance: LogArchive, **_: Any) -> None:
    """A workload's or a project's delete cascades to its archives: their objects are listed
    for deletion in the same transaction (a rolled back delete lists nothing)."""
    if instance.deleted_at is None:
        _forget(instance.datastore, instance.bucket, instance.key)


def _forget(datastore: str, bucket: str, key: str) -> None:
    listed = LogObjectDeletion.objects.create(datastore=datastore, bucket=bucket, key=key)
    from controlpanel.engine.tasks import log_objects_delete  # tasks imports this module

    log_objects_delete.delay_on_commit([listed.pk])


def purge(ids: list[int] | None = None, limit: int = 500) -> tuple[int, int]:
    """Delete the listed objects (`ids`, or the oldest `limit`): each one deleted from the store
    leaves the list; at the first failure (the store down) the rest wait for the next try.
    Returns (deleted, still listed of those asked)."""
    pending = LogObjectDeletion.objects.order_by("requested_at", "pk")
    if ids is not None:
        pending = pending.filter(pk__in=ids)
    listed = list(pending[:limit])
    for done, item in enumerate(listed):
        try:
            with contextlib.suppress(BucketNotFound):
                objects.delete_object(
                    datastore_config(item.datastore), bucket=item.bucket, key=item.key
                )
        except Exception as exc:
            log.warning("log object %s/%s not deleted yet: %s", item.bucket, item.key, exc)
            LogObjectDeletion.objects.filter(pk=item.pk).update(
                attempts=F("attempts") + 1, last_error=str(exc)[:300]
            )
            return done, len(listed) - done
        item.delete()
        with _lock:
            _cache.pop(item.key, None)
    return len(listed), 0


def lines_of(archive: LogArchive) -> list[str]:
    """Every line of an archived run (one line saying so when the retention deleted it)."""
    if archive.deleted_at is not None:
        return [deleted_line(archive)]
    with _lock:
        if archive.key in _cache:
            _cache.move_to_end(archive.key)
            return _cache[archive.key]
    data = objects.read_object(
        datastore_config(archive.datastore),
        bucket=archive.bucket,
        key=archive.key,
        max_bytes=MAX_ARCHIVE_BYTES,
    )
    lines = [json.loads(line) for line in gzip.decompress(data).splitlines()]
    with _lock:
        _cache[archive.key] = lines
        while len(_cache) > CACHED:
            _cache.popitem(last=False)
    return lines


def deleted_line(archive: LogArchive) -> str:
    when = archive.deleted_at.strftime("%Y-%m-%d") if archive.deleted_at else ""
    return (
        f"{MARK} this log was deleted on {when}: ended logs are kept "
        f"{settings.LOG_ARCHIVE_RETENTION_DAYS} days (LOG_ARCHIVE_RETENTION_DAYS)"
    )


def _ensure_bucket(config: Any, bucket: str) -> None:
    with contextlib.suppress(BucketAlreadyExists):
        objects.create_bucket(config, bucket=bucket)
