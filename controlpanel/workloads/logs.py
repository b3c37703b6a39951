"""Job logs: collected from the backend into the database (so they outlive the pod), read back
by sequence number (tail, follow, download), and mined for fine-tune progress events.

Collection is pull-through: whoever needs fresh lines (a page poll, the API, the final archive)
asks the backend for the lines after the stored cursor, under the job's row lock, so viewers
share one collection and no line is stored twice. No Celery worker follows a log.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import transaction

from controlpanel.workloads.backend import get_backend, job_ref
from controlpanel.workloads.models import Job, JobLogLine
from training.protocol import parse_line

MAX_CURVE_POINTS = 500
COLLECT_LIMIT = 5000


def collect_logs(*, job_id: Any, limit: int = COLLECT_LIMIT) -> tuple[int, bool]:
    """Store new lines of the job's current run; returns (lines added, end of log reached)."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(of=("self",))
            .select_related("project")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.logs_archived or job.launched_run < job.run:
            return 0, True
        chunk = get_backend().read_logs(
            ref=job_ref(job), cursor=job.log_cursor or None, limit=limit
        )
        start = job.log_lines
        JobLogLine.objects.bulk_create(
            [
                JobLogLine(job=job, run=job.run, seq=start + i, text=line)
                for i, line in enumerate(chunk.lines, start=1)
            ],
            batch_size=1000,
        )
        _note_progress(job, chunk.lines)
        job.log_cursor = chunk.cursor
        job.log_lines = start + len(chunk.lines)
        job.save(update_fields=["log_cursor", "log_lines", "progress", "loss_curve", "updated_at"])
        return len(chunk.lines), chunk.eof


def archive_logs(*, job_id: Any, max_rounds: int = 1000) -> bool:
    """Collect until the end of the log (the job has ended); mark the log archived."""
    for _ in range(max_rounds):
        added, eof = collect_logs(job_id=job_id)
        if eof or added == 0:
            break
    return Job.objects.filter(pk=job_id).update(logs_archived=True) > 0


def _note_progress(job: Job, lines: tuple[str, ...]) -> None:
    """Keep the newest progress event and a bounded loss curve (for the bar, ETA and chart)."""
    for line in lines:
        event = parse_line(line) if line.startswith("{") else None
        if not event:
            continue
        kind = event.get("event")
        if kind in ("start", "progress", "done", "error"):
            job.progress = {**job.progress, **event, "last_event": kind}
        if kind == "progress" and event.get("loss") is not None:
            job.loss_curve = _append_point(job.loss_curve, [event["step"], event["loss"]])


def _append_point(curve: list[list[float]], point: list[float]) -> list[list[float]]:
    curve = [*curve, point]
    if len(curve) > MAX_CURVE_POINTS:
        curve = curve[::2]  # halve the resolution, keep the shape
    return curve


def lines_after(*, job: Job, after: int, limit: int = 500) -> list[JobLogLine]:
    return list(
        JobLogLine.objects.filter(job=job, run=job.run, seq__gt=after)
        .order_by("seq")
        .only("seq", "text")[:limit]
    )


def tail(*, job: Job, count: int = 500) -> list[JobLogLine]:
    """The last `count` lines, found by sequence number (an index range, not a scan)."""
    first = max(job.log_lines - count, 0)
    return lines_after(job=job, after=first, limit=count)


def iter_log_text(*, job: Job, run: int | None = None) -> Iterator[str]:
    """The whole log of a run, streamed (constant memory for a 100k-line log)."""
    lines = (
        JobLogLine.objects.filter(job=job, run=run or job.run)
        .order_by("seq")
        .values_list("text", flat=True)
        .iterator(chunk_size=2000)
    )
    for text in lines:
        yield text + "\n"
