"""Workload logs (jobs, notebooks): collected from the backend into the database (so they
outlive the pod), read back by sequence number (tail, follow, download), and mined for
fine-tune progress events.

One collector per live workload stores lines as they come (collector.py, in the watcher), and
the final archive takes the rest (`archive_logs`, from the finalize task). Pages and the API
only read the stored rows: 50 viewers cost what one does, and a GET never reaches the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from controlpanel.engine import curves, logarchive
from controlpanel.engine.backend import get_backend, job_ref
from controlpanel.engine.evictions import interrupted_entry
from controlpanel.engine.logwriters import Db, here
from controlpanel.engine.models import JobEvent, JobLogLine, LogArchive, Workload
from controlpanel.engine.replicas import OBSERVED_PROGRESS
from controlpanel.streams import channels
from deploy.types import LogChunk
from training.protocol import clean_text, read_event
from training.snapshot import Snapshot, curve_point

COLLECT_LIMIT = 5000
# Lines Ajuste itself adds to a log (skipped bytes, a truncated archive) start with this.
MARK = "[ajuste]"
# Progress events the timeline shows: where a preempted (or stopped) fine-tune saved its
# checkpoint, and the step the next pod of the same run resumed from.
MILESTONES = {
    "interrupted": "evicted at step {step}: its checkpoint is saved",
    "resumed": "resumed from step {step}",
}


class UnknownRun(ValueError):
    """`?run=` names no run of the job; the message says which runs exist."""


def collect_logs(*, job_id: Any, limit: int = COLLECT_LIMIT, db: Db = here) -> tuple[int, bool]:
    """Store new lines of the job's current run; returns (lines added, end of log reached).

    The backend is read without holding the job's row (a slow read never blocks reconcile);
    the lines are stored only if nobody stored lines from that cursor meanwhile. `db` runs the
    database steps (logwriters.py: the watcher's readers hold no connection)."""
    job, backend = db(lambda: _load(job_id))
    if job is None or job.logs_archived or job.launched_run < job.run:
        return 0, True
    run, cursor = job.run, job.log_cursor
    chunk = backend.read_logs(
        ref=job_ref(job), cursor=cursor or None, limit=limit, fresh=job.is_final
    )
    added = db(lambda: _commit(job_id, run, cursor, chunk))
    return max(added, 0), chunk.eof and added >= 0


def follow_logs(*, job_id: Any, keep: Callable[[], bool], db: Db = here) -> int:
    """Store the job's log as it is printed, followed as a stream (`follow=true`) while `keep()`
    and the stream last (the backend resumes from the stored cursor after a break); returns the
    lines stored. A backend without streams is read once (`collect_logs`). `db` runs the
    database steps: with the watcher's writers, the thread that waits on the stream holds no
    connection."""
    job, backend = db(lambda: _load(job_id))
    if not hasattr(backend, "follow_logs") or job is None or job.is_final:
        return collect_logs(job_id=job_id, db=db)[0]
    if job.logs_archived or job.launched_run < job.run:
        return 0
    run, cursor, total = job.run, job.log_cursor, 0
    for chunk in backend.follow_logs(ref=job_ref(job), cursor=cursor or None, keep=keep):
        added = db(partial(_commit, job_id, run, cursor, chunk))
        if added < 0:
            break  # another replica stored from this cursor: it follows the log now
        total, cursor = total + added, chunk.cursor
    return total


def _load(job_id: Any) -> tuple[Workload | None, Any]:
    """The row and the backend (built on first use: it reads the install id)."""
    job = Workload.objects.select_related("project").filter(pk=job_id).first()
    return job, get_backend()


def _commit(job_id: Any, run: int, cursor: str, chunk: LogChunk) -> int:
    """Store a chunk read from `cursor`; -1 if the row moved on meanwhile (another collector
    stored from that cursor: nothing is stored twice)."""
    lines = chunk.lines
    if chunk.gap:
        lines = (f"{MARK} {chunk.gap}", *lines)
    if chunk.skipped:
        lines = (*lines, f"{MARK} {chunk.skipped}")
    if not lines and chunk.cursor == cursor:
        return 0  # nothing new: no row written (the read is most reads of a log)
    with transaction.atomic():
        job = Workload.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
        if job is None or job.logs_archived or (job.run, job.log_cursor) != (run, cursor):
            return -1  # another collector moved on: the next read starts from its cursor
        _store(job, lines)
        job.log_cursor = chunk.cursor
        job.save(
            update_fields=["log_cursor", "log_lines", "progress", "curve_points", "updated_at"]
        )
        return len(lines)


def _store(job: Workload, lines: tuple[str, ...] | list[str]) -> None:
    start = job.log_lines
    texts = [clean_text(line) for line in lines]
    JobLogLine.objects.bulk_create(
        [
            JobLogLine(job=job, run=job.run, seq=start + i, text=text)
            for i, text in enumerate(texts, start=1)
        ],
        batch_size=1000,
    )
    progress = job.progress
    _note_progress(job, lines)
    job.log_lines = start + len(lines)
    channels.lines_stored(workload_id=job.pk, run=job.run, first=start + 1, texts=texts)
    if job.progress != progress:  # the lists' and dashboards' bars and ETAs
        channels.workload_changed(project_id=job.project_id, workload_id=job.pk, what="progress")


def archive_logs(*, job_id: Any, max_rounds: int = 1000) -> bool:
    """Collect until the end of the log (the job has ended); mark the log archived. An archive
    that stops before the end says so in the log's last line."""
    eof, empty = False, 0
    for _ in range(max_rounds):
        added, eof = collect_logs(job_id=job_id)
        empty = 0 if added else empty + 1
        if eof or empty >= 3:  # three empty reads that do not reach the end: give up
            break
    with transaction.atomic():
        job = Workload.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
        if job is None:
            return False
        if not job.logs_archived and not eof:
            _store(job, [f"{MARK} log truncated: the archive stopped before the end of the log"])
        if not job.logs_archived:
            channels.log_archived(workload_id=job.pk, run=job.run)
        job.logs_archived = True
        job.save(update_fields=["log_lines", "progress", "curve_points", "logs_archived"])
    return True


def _note_progress(job: Workload, lines: tuple[str, ...] | list[str]) -> None:
    """Keep the run's progress snapshot (a few fields, rewritten) and append the new points of
    its curve (for the bar, ETA and chart). Any job can print lines that look like events: the
    protocol checks every field."""
    snapshot = Snapshot.from_json(job.progress)
    points = []
    for line in lines:
        event = read_event(line)
        if event is None:
            continue
        snapshot = snapshot.merge(event)
        if event.get("event") in MILESTONES:
            _note_milestone(job, event)
        point = curve_point(event)
        if point is not None:
            points.append(point)
    curves.append(job, points)
    stored = job.progress if isinstance(job.progress, dict) else {}
    observed = {key: stored[key] for key in OBSERVED_PROGRESS if key in stored}
    job.progress = {**observed, **snapshot.to_json()}


def _note_milestone(job: Workload, event: dict[str, Any]) -> None:
    """One timeline entry for an `interrupted` or `resumed` event, at the event's time."""
    if not isinstance(event.get("step"), int):
        return  # a line that only looks like the event (any job can print one)
    stamp = event.get("time")
    at = datetime.fromtimestamp(stamp, UTC) if isinstance(stamp, int | float) else timezone.now()
    if event["event"] == "interrupted":  # stopped by whom, or evicted by Kueue and why
        reason = interrupted_entry(job, event["step"])
    else:
        reason = MILESTONES[event["event"]].format(step=event.get("step"))
    JobEvent.objects.create(job=job, run=job.run, state=job.state, reason=reason, at=at)


def resolve_run(*, job: Workload, value: str | None) -> int:
    """The run `?run=` names (default: the current one); raises UnknownRun."""
    if value is None or value == "":
        return job.run
    try:
        run = int(value)
    except ValueError:
        raise UnknownRun(f"run must be a whole number from 1 to {job.run}.") from None
    if not 1 <= run <= job.run:
        raise UnknownRun(f"This job has no run {run}: its runs are 1 to {job.run}.")
    return run


def run_line_count(*, job: Workload, run: int) -> int:
    """How many lines a run stored (the current run keeps the count on the row)."""
    archive = archived(job=job, run=run)
    if archive is not None:
        return 1 if archive.deleted_at else archive.lines
    if run == job.run:
        return job.log_lines
    last = JobLogLine.objects.filter(job=job, run=run).aggregate(last=Max("seq"))["last"]
    return last or 0


def archived(*, job: Workload, run: int) -> LogArchive | None:
    """The run's log in object storage, if it moved there (only an ended log can: a live one
    costs no query)."""
    if run == job.run and not job.logs_archived:
        return None
    return LogArchive.objects.filter(job_id=job.pk, run=run).first()


def lines_after(
    *, job: Workload, after: int, limit: int = 500, run: int | None = None
) -> list[JobLogLine]:
    run = run or job.run
    archive = archived(job=job, run=run)
    if archive is not None:
        texts = logarchive.lines_of(archive)[after : after + limit]
        return [
            JobLogLine(job_id=job.pk, run=run, seq=seq, text=text)
            for seq, text in enumerate(texts, start=after + 1)
        ]
    return list(
        JobLogLine.objects.filter(job=job, run=run, seq__gt=after)
        .order_by("seq")
        .only("seq", "text")[:limit]
    )


def tail(*, job: Workload, count: int = 500) -> list[JobLogLine]:
    """The last `count` lines, found by sequence number (an index range, not a scan)."""
    first = max(run_line_count(job=job, run=job.run) - count, 0)
    return lines_after(job=job, after=first, limit=count)


def iter_log_text(*, job: Workload, run: int | None = None) -> Iterator[str]:
    """The whole log of a run, streamed (constant memory for a 100k-line log)."""
    archive = archived(job=job, run=run or job.run)
    if archive is not None:
        for text in logarchive.lines_of(archive):
            yield text + "\n"
        return
    lines = (
        JobLogLine.objects.filter(job=job, run=run or job.run)
        .order_by("seq")
        .values_list("text", flat=True)
        .iterator(chunk_size=2000)
    )
    for text in lines:
        yield text + "\n"
