"""Idle GPUs in money, priced hour by hour from the ledger (the beat task `idle_money_task`).

"Allocated but idle": a workload held GPUs (a billed minute) and they sat below its project's
threshold. Each billed minute of a run holds exactly one DCGM evaluation (one a minute); the
minute's idle share is the share of the workload's GPUs below the threshold then, and its idle
money that share of what the ledger bills for the minute (its line's price × units / 60). So a
run whose single GPU sat at 0 % for 20 billed minutes has 20 × unit price a minute × units.

"Unallocated": GPUs the cluster has that no pod held (DCGM reports them without a pod), in
GPU-minutes by model; nobody's bill, the site admins' capacity.

An hour is priced again until it is over and Prometheus answered for it (`IdleHour.complete`);
each pricing replaces the hour's rows, so pricing twice gives the same rows."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlpanel.billing.models import Line
from controlpanel.dashboards.dcgm import STEP_S, held_gpus, unheld_gpus
from controlpanel.engine.models import JobRun
from controlpanel.reclaim.models import IdleCost, IdleHour, UnheldGpus
from controlpanel.reclaim.policy import Point, points_of

log = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
SETTLED = timedelta(minutes=10)  # after its end, an hour's samples and ledger lines are in
CATCH_UP = timedelta(hours=48)  # how far back a missed hour is still priced
HOURS_PER_RUN = 6
COST_PLACES = Decimal("0.000001")
MINUTE_PLACES = Decimal("0.0001")


def hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def idle_money_catch_up(*, now: datetime | None = None) -> int:
    """Price the hours not priced completely (the oldest first, a few a run); how many were
    priced completely."""
    if not settings.DCGM_PROMETHEUS_URL:
        return 0
    now = now or timezone.now()
    current = hour_of(now)
    first = current - CATCH_UP
    complete = set(
        IdleHour.objects.filter(hour__gte=first, complete=True).values_list("hour", flat=True)
    )
    hours = [first + HOUR * n for n in range(int(CATCH_UP / HOUR) + 1)]
    todo = [hour for hour in hours if hour not in complete][:HOURS_PER_RUN]
    return sum(idle_hour_price(hour=hour, now=now) for hour in todo)


def idle_hour_price(*, hour: datetime, now: datetime | None = None) -> int:
    """Price one UTC hour (its rows replaced); 1 when it is complete, else 0 (Prometheus did
    not answer, or the hour is not over: it is priced again)."""
    now = now or timezone.now()
    end = min(hour + HOUR - timedelta(seconds=STEP_S), now)
    runs = _gpu_runs(hour)
    namespaces = "|".join(sorted({run.project.namespace for run in runs}))
    series = held_gpus(namespace=namespaces, start=hour, end=end) if runs else None
    unheld, unheld_problem = unheld_gpus(start=hour, end=end)
    if (series is not None and series.problem) or unheld_problem:
        log.info(
            "idle money: %s not priced: %s", hour, (series and series.problem) or unheld_problem
        )
        return 0
    by_workload = series.by_workload() if series is not None else {}
    lines = _usage_lines(runs)
    costs = []
    for run in runs:
        points = points_of(
            by_workload.get(str(run.job_id), []), percent=run.project.gpu_idle_percent
        )
        cost = _run_cost(run, points, lines.get(run.pk, []), hour)
        if cost is not None:
            costs.append(cost)
    complete = now >= hour + HOUR + SETTLED
    with transaction.atomic():
        IdleCost.objects.filter(hour=hour).delete()
        IdleCost.objects.bulk_create(costs)
        UnheldGpus.objects.filter(hour=hour).delete()
        UnheldGpus.objects.bulk_create(
            UnheldGpus(hour=hour, gpu_model=model[:100], gpu_minutes=sum(counts.values()))
            for model, counts in unheld.items()
        )
        IdleHour.objects.update_or_create(
            hour=hour, defaults={"priced_at": now, "complete": complete}
        )
    return int(complete)


def _gpu_runs(hour: datetime) -> list[JobRun]:
    """The runs on a GPU flavor that ran within the hour, of workloads still there (a deleted
    one's id is gone, and with it its pods' names)."""
    overlapping = Q(finished_at=None) | Q(finished_at__gt=hour)
    rows = JobRun.objects.filter(overlapping, started_at__lt=hour + HOUR, job__isnull=False)
    rows = rows.exclude(flavor__gpu_model="")
    return list(rows.select_related("project", "flavor", "job", "job__owner"))


def _usage_lines(runs: list[JobRun]) -> dict[int, list[Line]]:
    found: dict[int, list[Line]] = defaultdict(list)
    lines = Line.objects.filter(run__in=runs, first_minute__isnull=False)
    for line in lines.only(
        "run_id", "run_start", "first_minute", "minutes", "price_per_hour", "units", "currency"
    ):
        found[line.run_id].append(line)
    return found


def _run_cost(
    run: JobRun, points: list[Point], lines: list[Line], hour: datetime
) -> IdleCost | None:
    """The run's idle GPU-minutes and money within the hour: each evaluation inside one of its
    billed minutes, priced by that minute's line."""
    gpu_minutes, cost, currency = Decimal(0), Decimal(0), ""
    gpus = run.units * max(1, run.flavor.gpus_per_unit)
    for point in points:
        line = _line_at(lines, point.time)
        if line is None or not point.gpus or not point.idle:
            continue
        share = Decimal(point.idle) / Decimal(point.gpus)
        gpu_minutes += share * gpus
        cost += line.price_per_hour * line.units * share / 60
        currency = line.currency
    if not gpu_minutes:
        return None
    owner = run.job.owner if run.job else None
    return IdleCost(
        run=run,
        project=run.project,
        owner=owner,
        owner_name=owner.get_username() if owner else "",
        workload_name=run.job.name if run.job else "",
        hour=hour,
        threshold=run.project.gpu_idle_percent,
        gpu_minutes=gpu_minutes.quantize(MINUTE_PLACES),
        cost=cost.quantize(COST_PLACES),
        currency=currency,
    )


def _line_at(lines: list[Line], at: datetime) -> Line | None:
    """The usage line billing the minute that holds `at` (None: not a billed minute)."""
    for line in lines:
        first = line.run_start + timedelta(minutes=line.first_minute or 0)
        if first <= at < first + timedelta(minutes=line.minutes):
            return line
    return None
