"""Day rollups of usage: what the dashboards sum instead of millions of runs.

A run's day share follows the billing rule (billing/rules.py): its minute k (starting at
`start + k min`) lies in the UTC day of that instant and is priced at the version in effect
then; GPU-seconds are its exact RUNNING time in the day × GPUs. An open run counts up to
`now`. `usage_rows()` computes rows for any set of runs (the rebuild writes them; a label filter
computes them in memory from the matching runs), so both paths count the same way.

Queue waits are counted per day of admission in log buckets (`wait_bucket`): exact percentiles
over every admitted workload of a range do not scale, the buckets' are within ±2.5 %.
Each workload's span (first and last day with usage, and its totals) follows its days.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Max, Min, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from controlpanel.billing.rules import billed_minutes, minutes_until, segments
from controlpanel.dashboards.models import (
    RollupMark,
    UsageDay,
    WaitDay,
    WaitDayBy,
    WorkloadDay,
    WorkloadSpan,
)
from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import FlavorPrice

DAY = timedelta(days=1)
# Final state → the UsageDay column counting the workloads that ended in it.
ENDED_COLUMNS: dict[str, str] = {
    "DONE": "ended_done",
    "FAILED": "ended_failed",
    "ERROR": "ended_error",
    "SYNC_FAILED": "ended_sync_failed",
    "INTERRUPTED": "ended_interrupted",
    "STOPPED": "ended_stopped",
}
Key = tuple[int, str, int | None, int]  # project, kind, owner, flavor
# Wait buckets: 0 under a second, i from GAMMA^(i-1) to GAMMA^i seconds; a bucket's middle
# (geometric) is within GAMMA^0.5 (±2.5 %) of every wait in it.
GAMMA = 1.05
WAIT_ERROR = math.sqrt(GAMMA) - 1
_LOG_GAMMA = math.log(GAMMA)


def wait_bucket(seconds: float) -> int:
    """The bucket of a wait of `seconds`."""
    if seconds < 1:
        return 0
    bucket = int(math.log(seconds) / _LOG_GAMMA) + 1
    # The logarithm's rounding can put a wait on a boundary one bucket off: check the bounds.
    if seconds < GAMMA ** (bucket - 1):
        bucket -= 1
    elif seconds >= GAMMA**bucket:
        bucket += 1
    return bucket


def bucket_middle(bucket: int) -> float:
    """What a bucket's waits count as: the geometric middle of its bounds (half a second for
    bucket 0)."""
    return 0.5 if bucket == 0 else GAMMA ** (bucket - 0.5)


def bucket_percentile(counts: dict[int, int], fraction: float) -> float | None:
    """percentile_cont's definition (linear between the closest ranks) over waits counted by
    bucket, each wait taken as its bucket's middle."""
    total = sum(counts.values())
    if not total:
        return None
    rank = fraction * (total - 1)
    low, high = math.floor(rank), math.ceil(rank)
    at: dict[int, float] = {}
    seen = 0
    for bucket in sorted(counts):
        n = counts[bucket]
        for wanted in (low, high):
            if wanted not in at and seen <= wanted < seen + n:
                at[wanted] = bucket_middle(bucket)
        seen += n
        if high in at:
            break
    return at[low] + (at[high] - at[low]) * (rank - low)


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
    waits = wait_rows(first=wanted[0], last=wanted[-1])
    written = 0
    touched: set[str] = set()
    for day in wanted:
        rows, per_workload = spans[day]
        touched |= {
            str(w)
            for w in WorkloadDay.objects.filter(day=day).values_list("workload_id", flat=True)
        }
        touched |= {w for w, _ in per_workload}
        written += _write_day(day, rows, per_workload, waits.get(day, {}), now)
    spans_refresh(touched)
    return written


WaitKey = tuple[int, int, int, int]  # project, owner, flavor, bucket


def wait_rows(*, first: date, last: date) -> dict[date, dict[WaitKey, int]]:
    """Workloads admitted each day from `first` to `last`, by (project, owner, flavor, wait
    bucket)."""
    result: dict[date, dict[WaitKey, int]] = defaultdict(lambda: defaultdict(int))
    admitted = Workload.objects.filter(
        admitted_at__gte=day_start(first),
        admitted_at__lt=day_start(last) + DAY,
        queued_at__lte=F("admitted_at"),
    )
    for project_id, owner_id, flavor_id, queued, admitted_at in admitted.values_list(
        "project_id", "owner_id", "flavor_id", "queued_at", "admitted_at"
    ).iterator(chunk_size=5000):
        if admitted_at is None or queued is None:  # not so: the filter needs both
            continue
        bucket = wait_bucket((admitted_at - queued).total_seconds())
        result[admitted_at.astimezone(UTC).date()][(project_id, owner_id, flavor_id, bucket)] += 1
    return result


SPAN_CHUNK = 2000


def spans_refresh(workload_ids: Iterable[str]) -> None:
    """Recompute the spans of these workloads from their WorkloadDay rows (none: no span)."""
    ids = sorted(workload_ids)
    for n in range(0, len(ids), SPAN_CHUNK):
        chunk = ids[n : n + SPAN_CHUNK]
        found = (
            WorkloadDay.objects.filter(workload_id__in=chunk)
            .values("workload_id", "project_id", "workload__owner_id", "workload__flavor_id")
            .annotate(
                first=Min("day"), last=Max("day"), g=Sum("gpu_seconds"), p=Sum("price_minutes")
            )
            .order_by()
        )
        with transaction.atomic():
            WorkloadSpan.objects.filter(workload_id__in=chunk).delete()
            WorkloadSpan.objects.bulk_create(
                [
                    WorkloadSpan(
                        workload_id=row["workload_id"],
                        project_id=row["project_id"],
                        owner_id=row["workload__owner_id"],
                        flavor_id=row["workload__flavor_id"],
                        first_day=row["first"],
                        last_day=row["last"],
                        multi_day=row["first"] < row["last"],
                        gpu_seconds=row["g"],
                        price_minutes=row["p"],
                    )
                    for row in found
                ],
                batch_size=SPAN_CHUNK,
            )


def _write_day(
    day: date,
    rows: dict[Key, Usage],
    per_workload: dict[tuple[str, int], tuple[float, Decimal]],
    waits: dict[WaitKey, int],
    now: datetime,
) -> int:
    """Replace the day's rollups (usage, per workload, waits) in one transaction."""
    with transaction.atomic():
        UsageDay.objects.filter(day=day).delete()
        WorkloadDay.objects.filter(day=day).delete()
        WaitDay.objects.filter(day=day).delete()
        WaitDayBy.objects.filter(day=day).delete()
        _write_waits(day, waits)
        _write_usage(day, rows)
        _write_workloads(day, per_workload)
        RollupMark.objects.update_or_create(day=day, defaults={"rebuilt_at": now})
    return len(rows) + len(per_workload)


def _write_waits(day: date, waits: dict[WaitKey, int]) -> None:
    per_project: dict[tuple[int, int], int] = defaultdict(int)
    for (project_id, _, _, bucket), count in waits.items():
        per_project[(project_id, bucket)] += count
    WaitDay.objects.bulk_create(
        [
            WaitDay(project_id=project_id, day=day, bucket=bucket, count=count)
            for (project_id, bucket), count in per_project.items()
        ],
        batch_size=5000,
    )
    WaitDayBy.objects.bulk_create(
        [
            WaitDayBy(
                project_id=project_id,
                day=day,
                owner_id=owner_id,
                flavor_id=flavor_id,
                bucket=bucket,
                count=count,
            )
            for (project_id, owner_id, flavor_id, bucket), count in waits.items()
        ],
        batch_size=5000,
    )


def _write_usage(day: date, rows: dict[Key, Usage]) -> None:
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


def _write_workloads(day: date, per_workload: dict[tuple[str, int], tuple[float, Decimal]]) -> None:
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


def recent_days(now: datetime | None = None) -> list[date]:
    """What the periodic rebuild refreshes: yesterday (runs that ended after midnight, late
    observations) and today."""
    today = (now or timezone.now()).astimezone(UTC).date()
    return [today - DAY, today]
