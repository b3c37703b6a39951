"""Ended logs in object storage: once a run's log is complete (`logs.archive_logs`), its lines
move out of PostgreSQL into the panel's default datastore as one gzip object (JSON lines), and
PostgreSQL keeps one `LogArchive` row. Pages, the API, downloads and streams read such a run
through `logs` as if its lines were still rows. Archives older than LOG_ARCHIVE_RETENTION_DAYS
are deleted by the retention task; such a log reads as one line that says so.

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
from django.utils import timezone

from controlpanel.buckets.selectors import datastore_config
from controlpanel.engine.models import JobLogLine, LogArchive, Workload
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
