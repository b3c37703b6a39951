"""Job logs: collected from the backend into the database (so they outlive the pod), read back
by sequence number (tail, follow, download), and mined for fine-tune progress events.

One collector per live workload stores lines as they come (collector.py, in the watcher), and
the final archive takes the rest (`archive_logs`, from the finalize task). Pages and the API
only read the stored rows: 50 viewers cost what one does, and a GET never reaches the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.db.models import Max

from controlpanel.workloads.backend import get_backend, job_ref
from controlpanel.workloads.models import Job, JobLogLine
from training.protocol import parse_line

MAX_CURVE_POINTS = 500
COLLECT_LIMIT = 5000
MAX_TEXT = 2000
MAX_ERRORS = 20
MAX_NUMBER = 2**63  # beyond this a "number" is garbage, and float() of it may overflow

# The protocol's events kept on the row, and the fields they may store there (training/protocol.py).
# Any job can print such lines (a custom job too), so nothing else is kept and every value is
# checked: a bad one must never stop collection, and PostgreSQL refuses NaN in JSON.
KEPT_EVENTS = ("start", "progress", "done", "error")
INT_FIELDS = frozenset(
    (
        "v",
        "step",
        "max_steps",
        "world_size",
        "resumed_from_step",
        "train_examples",
        "eval_examples",
        "train_tokens",
        "trainable_params",
        "total_params",
        "tokens_seen",
        "exit_code",
    )
)
FLOAT_FIELDS = frozenset(
    (
        "time",
        "epoch",
        "epochs",
        "loss",
        "learning_rate",
        "grad_norm",
        "tokens_per_s",
        "elapsed_s",
        "eta_s",
        "gpu_mem_gb",
        "train_loss",
    )
)
TEXT_FIELDS = frozenset(
    ("model", "method", "device", "dtype", "kind", "message", "adapter_path", "merged_path")
)
_DROP = object()
# Lines Ajuste itself adds to a log (skipped bytes, a truncated archive) start with this.
MARK = "[ajuste]"


class UnknownRun(ValueError):
    """`?run=` names no run of the job; the message says which runs exist."""


def collect_logs(*, job_id: Any, limit: int = COLLECT_LIMIT) -> tuple[int, bool]:
    """Store new lines of the job's current run; returns (lines added, end of log reached).

    The backend is read without holding the job's row (a slow read never blocks reconcile);
    the lines are stored only if nobody stored lines from that cursor meanwhile."""
    job = Job.objects.select_related("project").filter(pk=job_id).first()
    if job is None or job.logs_archived or job.launched_run < job.run:
        return 0, True
    run, cursor = job.run, job.log_cursor
    chunk = get_backend().read_logs(ref=job_ref(job), cursor=cursor or None, limit=limit)
    lines = chunk.lines
    if chunk.skipped:
        lines = (*lines, f"{MARK} {chunk.skipped}")
    with transaction.atomic():
        job = Job.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
        if job is None or job.logs_archived or (job.run, job.log_cursor) != (run, cursor):
            return 0, False  # another collector moved on: the next read starts from its cursor
        _store(job, lines)
        job.log_cursor = chunk.cursor
        job.save(update_fields=["log_cursor", "log_lines", "progress", "loss_curve", "updated_at"])
        return len(lines), chunk.eof


def _store(job: Job, lines: tuple[str, ...] | list[str]) -> None:
    start = job.log_lines
    JobLogLine.objects.bulk_create(
        [
            JobLogLine(job=job, run=job.run, seq=start + i, text=_clean_text(line))
            for i, line in enumerate(lines, start=1)
        ],
        batch_size=1000,
    )
    _note_progress(job, lines)
    job.log_lines = start + len(lines)


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
        job = Job.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
        if job is None:
            return False
        if not job.logs_archived and not eof:
            _store(job, [f"{MARK} log truncated: the archive stopped before the end of the log"])
        job.logs_archived = True
        job.save(update_fields=["log_lines", "progress", "loss_curve", "logs_archived"])
    return True


def _note_progress(job: Job, lines: tuple[str, ...] | list[str]) -> None:
    """Keep the newest progress event and a bounded loss curve (for the bar, ETA and chart)."""
    for line in lines:
        event = _progress_event(line) if line.startswith("{") else None
        if event is None:
            continue
        current = job.progress if isinstance(job.progress, dict) else {}
        job.progress = {**current, **event}
        step, loss = event.get("step"), event.get("loss")
        if event["event"] == "progress" and step is not None and loss is not None:
            curve = job.loss_curve if isinstance(job.loss_curve, list) else []
            job.loss_curve = _append_point(curve, [step, loss])


def _progress_event(line: str) -> dict[str, Any] | None:
    """The checked fields of a kept event on this line, or None; never raises."""
    event = parse_line(line)
    if event is None or event.get("event") not in KEPT_EVENTS:
        return None
    kept: dict[str, Any] = {"event": event["event"], "last_event": event["event"]}
    for name, value in event.items():
        clean = _clean_field(name, value)
        if clean is not _DROP:
            kept[name] = clean
    return kept


def _clean_field(name: str, value: Any) -> Any:
    """The value to store, or _DROP for an unknown field or a value of the wrong type."""
    if name in INT_FIELDS or name in FLOAT_FIELDS:
        return None if value is None else _number(value, integer=name in INT_FIELDS)
    if name in TEXT_FIELDS:
        if value is None:
            return None
        return _short_text(value) if isinstance(value, str) else _DROP
    if name == "errors":
        return _clean_errors(value)
    return _DROP


def _number(value: Any, *, integer: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _DROP
    if isinstance(value, float) and not math.isfinite(value):
        return None  # what the protocol itself writes for a diverged loss
    if abs(value) > MAX_NUMBER:
        return _DROP
    if integer:
        return int(value) if float(value).is_integer() else _DROP
    return float(value)


def _clean_errors(value: Any) -> Any:
    """The error event's list of {file, line, message}, checked like the other fields."""
    if not isinstance(value, list):
        return _DROP
    errors = []
    for item in value[:MAX_ERRORS]:
        if isinstance(item, dict):
            line = _number(item.get("line"), integer=True)
            errors.append(
                {
                    "file": _short_text(item.get("file")),
                    "line": None if line is _DROP else line,
                    "message": _short_text(item.get("message")),
                }
            )
    return errors


def _short_text(value: Any) -> str:
    return _clean_text(value)[:MAX_TEXT] if isinstance(value, str) else ""


def _clean_text(text: str) -> str:
    """PostgreSQL stores no NUL character (in text or JSON) and no lone surrogate."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")


def _append_point(curve: list[list[float]], point: list[float]) -> list[list[float]]:
    curve = [*curve, point]
    if len(curve) > MAX_CURVE_POINTS:
        curve = curve[::2]  # halve the resolution, keep the shape
    return curve


def resolve_run(*, job: Job, value: str | None) -> int:
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


def run_line_count(*, job: Job, run: int) -> int:
    """How many lines a run stored (the current run keeps the count on the row)."""
    if run == job.run:
        return job.log_lines
    last = JobLogLine.objects.filter(job=job, run=run).aggregate(last=Max("seq"))["last"]
    return last or 0


def lines_after(
    *, job: Job, after: int, limit: int = 500, run: int | None = None
) -> list[JobLogLine]:
    return list(
        JobLogLine.objects.filter(job=job, run=run or job.run, seq__gt=after)
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
