"""Day rollups of usage: what the dashboards sum instead of millions of runs.

A run's day share follows the billing rule (billing/rules.py): its minute k (starting at
`start + k min`) lies in the UTC day of that instant and is priced at the version in effect
then; GPU-seconds are its exact RUNNING time in the day × GPUs. An open run counts up to
`now`. `usage_rows()` computes rows for any set of runs (the rebuild writes them; a label filter
computes them in memory from the matching runs), so both paths count the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from controlpanel.billing.rules import billed_minutes, minutes_until, segments
from controlpanel.dashboards.models import RollupMark, UsageDay, WorkloadDay
from controlpanel.flavors.models import FlavorPrice
from controlpanel.workloads.models import JobRun, JobState, NotebookState, Workload

DAY = timedelta(days=1)
# Final state → the UsageDay column counting the workloads that ended in it.
ENDED_COLUMNS: dict[str, str] = {
    JobState.DONE: "ended_done",
    JobState.FAILED: "ended_failed",
    JobState.ERROR: "ended_error",
    JobState.SYNC_FAILED: "ended_sync_failed",
    JobState.INTERRUPTED: "ended_interrupted",
    NotebookState.STOPPED: "ended_stopped",
}
Key = tuple[int, str, int | None, int]  # project, kind, owner, flavor


@dataclass
class Usage:
    """What one UsageDay row holds, in memory."""

    gpu_seconds: float = 0.0
    unit_minutes: int = 0
    price_minutes: Decimal = Decimal(0)
    runs_started: int = 0
    ended: dict[str, int] = field(default_factory=dict)


def day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def runs_overlapping(runs: QuerySet[JobRun], start: datetime, end: datetime) -> QuerySet[JobRun]:
    """Runs with RUNNING time in [start, end)."""
    return runs.filter(started_at__lt=end, started_at__isnull=False).filter(
        Q(finished_at=None) | Q(finished_at__gt=start)
    )


def run_share(
    run: dict[str, Any], start: datetime, end: datetime, now: datetime, prices: Sequence[Any]
) -> tuple[float, int, Decimal]:
    """(GPU-seconds, billed minutes × units, Σ minutes × units × price) of `run` in [start, end)."""
    began, ended = run["started_at"], run["finished_at"] or now
    overlap = (min(ended, end) - max(began, start)).total_seconds()
    gpu_seconds = max(0.0, overlap) * run["units"] * run["flavor__gpus_per_unit"]
    total = billed_minutes(began, ended)
    first, last = minutes_until(began, start), min(total, minutes_until(began, end))
    if last <= first:
        return gpu_seconds, 0, Decimal(0)
    price_minutes = Decimal(0)
    for seg in segments(began, total, prices):
        n = min(last, seg.first + seg.minutes) - max(first, seg.first)
        if n > 0 and seg.price is not None:
            price_minutes += n * run["units"] * seg.price
    return gpu_seconds, (last - first) * run["units"], price_minutes


RUN_FIELDS = (
    "job_id",
    "project_id",
    "flavor_id",
    "units",
    "started_at",
    "finished_at",
    "job__kind",
    "job__owner_id",
    "flavor__gpus_per_unit",
)


def price_versions() -> dict[int, list[tuple[datetime, Decimal]]]:
    versions: dict[int, list[tuple[datetime, Decimal]]] = defaultdict(list)
    for flavor_id, valid_from, price in FlavorPrice.objects.values_list(
        "flavor_id", "valid_from", "price_per_hour"
    ):
        versions[flavor_id].append((valid_from, price))
    return versions


DayRows = tuple[dict[Key, Usage], dict[tuple[str, int], tuple[float, Decimal]]]


def usage_rows(
    *, day: date, runs: QuerySet[JobRun], workloads: QuerySet[Workload], now: datetime
) -> DayRows:
    """One day's rows by (project, kind, owner, flavor), and by (workload, project)."""
    return span_rows(first=day, last=day, runs=runs, workloads=workloads, now=now)[day]


def span_rows(
    *, first: date, last: date, runs: QuerySet[JobRun], workloads: QuerySet[Workload], now: datetime
) -> dict[date, DayRows]:
    """The rows of every day from `first` to `last`, reading each run once (a run spanning
    days is cut at each midnight)."""
    start, end = day_start(first), day_start(last) + DAY
    prices = price_versions()
    result: dict[date, DayRows] = {}
    for n in range((last - first).days + 1):
        result[first + timedelta(days=n)] = (defaultdict(Usage), {})
    for run in runs_overlapping(runs, start, end).values(*RUN_FIELDS).iterator(chunk_size=5000):
        key = (run["project_id"], run["job__kind"] or "", run["job__owner_id"], run["flavor_id"])
        versions = prices.get(run["flavor_id"], [])
        began, ended = run["started_at"], run["finished_at"] or now
        day = max(began.astimezone(UTC).date(), first)
        while day <= last and day_start(day) < ended:
            rows, per_workload = result[day]
            day_begin = day_start(day)
            gpu_seconds, unit_minutes, price_minutes = run_share(
                run, day_begin, day_begin + DAY, now, versions
            )
            usage = rows[key]
            usage.gpu_seconds += gpu_seconds
            usage.unit_minutes += unit_minutes
            usage.price_minutes += price_minutes
            usage.runs_started += day_begin <= began < day_begin + DAY
            if run["job_id"] is not None:
                wkey = (str(run["job_id"]), run["project_id"])
                seconds, money = per_workload.get(wkey, (0.0, Decimal(0)))
                per_workload[wkey] = (seconds + gpu_seconds, money + price_minutes)
            day += DAY
    ended_rows = (
        workloads.filter(finished_at__gte=start, finished_at__lt=end, state__in=ENDED_COLUMNS)
        .annotate(day=TruncDate("finished_at", tzinfo=UTC))
        .values("day", "project_id", "kind", "owner_id", "flavor_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in ended_rows:
        key = (row["project_id"], row["kind"], row["owner_id"], row["flavor_id"])
        result[row["day"]][0][key].ended[ENDED_COLUMNS[row["state"]]] = row["n"]
    return result


def days_rebuild(days: Iterable[date], *, now: datetime | None = None) -> int:
    """Rebuild the rollups of `days` whole (idempotent); returns the rows written."""
    now = now or timezone.now()
    wanted = sorted(set(days))
    if not wanted:
        return 0
    spans = span_rows(
        first=wanted[0],
        last=wanted[-1],
        runs=JobRun.objects.all(),
        workloads=Workload.objects.all(),
        now=now,
    )
    written = 0
    for day in wanted:
        rows, per_workload = spans[day]
        written += _write_day(day, rows, per_workload, now)
    return written


def _write_day(
    day: date,
    rows: dict[Key, Usage],
    per_workload: dict[tuple[str, int], tuple[float, Decimal]],
    now: datetime,
) -> int:
    with transaction.atomic():
        UsageDay.objects.filter(day=day).delete()
        WorkloadDay.objects.filter(day=day).delete()
        UsageDay.objects.bulk_create(
            [
                UsageDay(
                    project_id=project_id,
                    day=day,
                    kind=kind,
                    owner_id=owner_id,
                    flavor_id=flavor_id,
                    gpu_seconds=u.gpu_seconds,
                    unit_minutes=u.unit_minutes,
                    price_minutes=u.price_minutes,
                    runs_started=u.runs_started,
                    **u.ended,
                )
                for (project_id, kind, owner_id, flavor_id), u in rows.items()
            ],
            batch_size=2000,
        )
        # A workload deleted meanwhile has no row to point to (its usage stays in UsageDay).
        ids = [w for w, _ in per_workload]
        alive = {str(pk) for pk in Workload.objects.filter(pk__in=ids).values_list("pk", flat=True)}
        WorkloadDay.objects.bulk_create(
            [
                WorkloadDay(
                    workload_id=wid,
                    project_id=project_id,
                    day=day,
                    gpu_seconds=seconds,
                    price_minutes=money,
                )
                for (wid, project_id), (seconds, money) in per_workload.items()
                if wid in alive
            ],
            batch_size=5000,
        )
        RollupMark.objects.update_or_create(day=day, defaults={"rebuilt_at": now})
    return len(rows) + len(per_workload)


def recent_days(now: datetime | None = None) -> list[date]:
    """What the periodic rebuild refreshes: yesterday (runs that ended after midnight, late
    observations) and today."""
    today = (now or timezone.now()).astimezone(UTC).date()
    return [today - DAY, today]
