"""Reads for the dashboards: headline numbers, chart series and tables of one project (or of
every project, for admins), over a range of days with optional filters.

Usage (GPU-hours, cost, ends by state) comes from the day rollups (rollups.py) summed in SQL;
a label filter cannot use them (labels are free-form), so it computes the same rows in memory
from the matching runs, with the same function. What is live (running, waiting, idle
notebooks) and the queue waits are read from the workload rows, through the indexes the
dashboards' migration adds.

Queue wait percentiles come from the day histograms of waits (WaitDay, or WaitDayBy for a filter
by user or flavor: ±2.5 %); a label filter reads the matching workloads' waits exactly. "Top by
cost" reads the workloads whose span lies inside the range by their total, and sums the days of
those that straddle its ends.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Aggregate, F, FloatField, Q, QuerySet, Sum
from django.db.models.functions import Extract, TruncDate
from django.utils import timezone

from controlpanel.billing import selectors as billing
from controlpanel.billing.rules import amount, month_of, next_month
from controlpanel.dashboards.filters import DashboardFilters
from controlpanel.dashboards.models import (
    RollupMark,
    UsageDay,
    WaitDay,
    WaitDayBy,
)
from controlpanel.dashboards.rollups import bucket_percentile, usage_rows
from controlpanel.engine.models import JobRun, Workload
from controlpanel.engine.selectors import with_label
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project

ENDED = (
    "ended_done",
    "ended_failed",
    "ended_error",
    "ended_sync_failed",
    "ended_interrupted",
    "ended_stopped",
)


SUMS = ("gpu_seconds", "price_minutes", *ENDED)


@dataclass(frozen=True)
class Scope:
    """One project, or every project (None: the admins' all-projects view)."""

    project: Project | None

    def of(self, rows: QuerySet[Any], field: str = "project") -> QuerySet[Any]:
        return rows if self.project is None else rows.filter(**{field: self.project})


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont (exact, interpolated) over an expression."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


def percentile(values: list[float], fraction: float) -> float | None:
    """percentile_cont's definition, for SQLite (linear between the closest ranks)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def workloads(scope: Scope, f: DashboardFilters) -> QuerySet[Workload]:
    """The workloads the filters keep (every kind)."""
    rows = scope.of(Workload.objects.all())
    if f.user:
        rows = rows.filter(owner__username=f.user)
    if f.flavor:
        rows = rows.filter(flavor__name=f.flavor)
    if f.label:
        rows = with_label(rows, f.label)
    return rows


def _rollup(scope: Scope, f: DashboardFilters) -> QuerySet[UsageDay]:
    rows = scope.of(UsageDay.objects.filter(day__gte=f.first, day__lte=f.last))
    if f.user:
        rows = rows.filter(owner__username=f.user)
    if f.flavor:
        rows = rows.filter(flavor__name=f.flavor)
    return rows


GROUP_FIELDS = {"day": "day", "kind": "kind", "owner": "owner__username", "flavor": "flavor__name"}


def _memory_rows(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    """The rollup rows of the range computed from the matching runs (a label filter)."""
    chosen = workloads(scope, f)
    runs = JobRun.objects.filter(job__in=chosen.values("pk"))
    names: dict[int | None, str] = dict(
        chosen.values_list("owner_id", "owner__username").distinct()
    )
    flavors = dict(chosen.values_list("flavor_id", "flavor__name").distinct())
    now, result = timezone.now(), []
    for day in f.days:
        rows, _ = usage_rows(day=day, runs=runs, workloads=chosen, now=now)
        for (_, kind, owner_id, flavor_id), u in rows.items():
            row = {"day": day, "kind": kind, "owner": names.get(owner_id), "flavor": ""}
            row["flavor"] = flavors.get(flavor_id, "")
            row |= {"gpu_seconds": u.gpu_seconds, "price_minutes": u.price_minutes}
            result.append(row | {name: u.ended.get(name, 0) for name in ENDED})
    return result


class Usage:
    """The range's usage rows, summed by any grouping (in SQL, or in memory for a label)."""

    def __init__(self, scope: Scope, f: DashboardFilters) -> None:
        self.scope, self.f = scope, f
        self.memory = _memory_rows(scope, f) if f.label else None
        self._waits: tuple[dict[str, float | None], list[dict[str, Any]]] | None = None

    @property
    def waits_exact(self) -> bool:
        """Whether the waits are read exactly (a label filter) or from the day histograms
        (±2.5 %)."""
        return bool(self.f.label)

    def waits(self) -> tuple[dict[str, float | None], list[dict[str, Any]]]:
        """Queue wait p50/p95 over the range, and per day (read once for the page)."""
        if self._waits is None:
            if self.waits_exact:
                self._waits = (
                    wait_percentiles(self.scope, self.f),
                    waits_by_day(self.scope, self.f),
                )
            else:
                self._waits = bucketed_waits(self.scope, self.f)
        return self._waits

    def grouped(self, *by: str, kinds: Collection[str] | None = None) -> list[dict[str, Any]]:
        if self.memory is not None:
            return _group_memory(self.memory, by, kinds)
        rows = _rollup(self.scope, self.f)
        if kinds is not None:
            rows = rows.filter(kind__in=kinds)
        if not by:
            sums = rows.aggregate(**{f"s_{n}": Sum(n) for n in SUMS})
            return [{n: sums[f"s_{n}"] or 0 for n in SUMS}]
        fields = [GROUP_FIELDS[name] for name in by]
        found = rows.values(*fields).annotate(**{f"s_{n}": Sum(n) for n in SUMS}).order_by(*fields)
        return [
            {name: row[GROUP_FIELDS[name]] for name in by} | {n: row[f"s_{n}"] or 0 for n in SUMS}
            for row in found
        ]


def _group_memory(
    rows: Iterable[dict[str, Any]], by: tuple[str, ...], kinds: Collection[str] | None
) -> list[dict[str, Any]]:
    sums: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        if kinds is not None and row["kind"] not in kinds:
            continue
        key = tuple(row[name] for name in by)
        total = sums.setdefault(key, dict(zip(by, key, strict=True)) | dict.fromkeys(SUMS, 0))
        for name in SUMS:
            total[name] += row[name]
    return [sums[key] for key in sorted(sums, key=lambda k: tuple(str(v) for v in k))]


def queue_waits(scope: Scope, f: DashboardFilters) -> QuerySet[Workload]:
    """Workloads admitted in the range (their latest run): each one's wait in the queue."""
    return workloads(scope, f).filter(
        admitted_at__gte=f.start, admitted_at__lt=f.end, queued_at__lte=F("admitted_at")
    )


def wait_percentiles(scope: Scope, f: DashboardFilters) -> dict[str, float | None]:
    """Queue wait p50 and p95 in seconds (None: nothing admitted in the range)."""
    rows = queue_waits(scope, f)
    if connection.vendor == "postgresql":
        wait = _wait_seconds()
        found = rows.aggregate(p50=Percentile(wait, 0.5), p95=Percentile(wait, 0.95))
        return {"p50": found["p50"], "p95": found["p95"]}
    waits = [
        (a - q).total_seconds()
        for q, a in rows.values_list("queued_at", "admitted_at")
        if a is not None
    ]
    return {"p50": percentile(waits, 0.5), "p95": percentile(waits, 0.95)}


def bucketed_waits(
    scope: Scope, f: DashboardFilters
) -> tuple[dict[str, float | None], list[dict[str, Any]]]:
    """wait_percentiles and waits_by_day from the day histograms (within ±2.5 %): by owner and
    flavor too for a filter by user or flavor."""
    ids = filter_ids(f)
    if ids is None:
        return {"p50": None, "p95": None}, []
    table = WaitDayBy if ids else WaitDay
    rows = (
        scope.of(table.objects.filter(day__gte=f.first, day__lte=f.last, **ids))
        .values_list("day", "bucket")
        .annotate(n=Sum("count"))
        .order_by()
    )
    total: dict[int, int] = defaultdict(int)
    by_day: dict[date, dict[int, int]] = defaultdict(dict)
    for day, bucket, n in rows:
        total[bucket] += n
        by_day[day][bucket] = n
    headline = {"p50": bucket_percentile(total, 0.5), "p95": bucket_percentile(total, 0.95)}
    days = [
        {"day": d, "p50": bucket_percentile(c, 0.5), "p95": bucket_percentile(c, 0.95)}
        for d, c in sorted(by_day.items())
    ]
    return headline, days


def _wait_seconds() -> Any:
    return Extract(F("admitted_at") - F("queued_at"), "epoch")


def waits_by_day(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    """p50 and p95 of the queue wait per day of admission."""
    rows = queue_waits(scope, f)
    if connection.vendor == "postgresql":
        wait = _wait_seconds()
        found = (
            rows.annotate(d=TruncDate("admitted_at"))
            .values("d")
            .annotate(p50=Percentile(wait, 0.5), p95=Percentile(wait, 0.95))
            .order_by("d")
        )
        return [{"day": r["d"], "p50": r["p50"], "p95": r["p95"]} for r in found]
    by_day: dict[date, list[float]] = defaultdict(list)
    for queued, admitted in rows.values_list("queued_at", "admitted_at"):
        if admitted is None:
            continue
        by_day[admitted.date()].append((admitted - queued).total_seconds())
    return [
        {"day": d, "p50": percentile(w, 0.5), "p95": percentile(w, 0.95)}
        for d, w in sorted(by_day.items())
    ]


@dataclass(frozen=True)
class Spend:
    """The month's spend (the billing ledger plus open runs up to now), budget, forecast."""

    month: date
    spent: Decimal
    budget: Decimal
    forecast: Decimal
    currency: str

    @property
    def percent(self) -> int | None:
        return int(self.spent * 100 / self.budget) if self.budget else None


def month_spend(scope: Scope, *, now: datetime | None = None) -> Spend:
    now = now or timezone.now()
    month = month_of(now)
    ledger = billing.month_total(month=month, project=scope.project)
    live = billing.open_runs_since_recorded(month=month, now=now, project=scope.project)
    spent = amount(ledger.price_minutes + live.price_minutes)
    start = datetime(month.year, month.month, 1, tzinfo=now.tzinfo)
    end = datetime(next_month(month).year, next_month(month).month, 1, tzinfo=now.tzinfo)
    elapsed = (now - start) / (end - start)
    forecast = (spent / Decimal(str(elapsed))).quantize(Decimal("0.01")) if elapsed else spent
    if scope.project is not None:
        budget = scope.project.monthly_budget
    else:
        budget = Project.objects.aggregate(b=Sum("monthly_budget"))["b"] or Decimal(0)
    return Spend(month, spent, budget, forecast, settings.CURRENCY)


def rolled_up_at(f: DashboardFilters) -> datetime | None:
    """When the range's latest day was last rolled up (None: never)."""
    mark = RollupMark.objects.filter(day=f.last).first()
    return mark.rebuilt_at if mark else None


def filter_choices(scope: Scope) -> dict[str, list[str]]:
    if scope.project is not None:
        users = list(scope.project.members.order_by("username").values_list("username", flat=True))
    else:
        users = list(
            get_user_model()
            .objects.filter(Q(memberships__isnull=False) | Q(is_staff=True))
            .distinct()
            .order_by("username")
            .values_list("username", flat=True)[:500]
        )
    flavors = list(Flavor.objects.order_by("sort_order", "name").values_list("name", flat=True))
    return {"users": users, "flavors": flavors}


def filter_ids(f: DashboardFilters) -> dict[str, int] | None:
    """The user and flavor filters as ids, to filter the rollups that carry them without a
    join (None: a name nobody has, nothing matches)."""
    ids: dict[str, int | None] = {}
    if f.user:
        users = get_user_model().objects.filter(username=f.user)
        ids["owner_id"] = users.values_list("pk", flat=True).first()
    if f.flavor:
        flavors = Flavor.objects.filter(name=f.flavor)
        ids["flavor_id"] = flavors.values_list("pk", flat=True).first()
    return {k: v for k, v in ids.items() if v is not None} if None not in ids.values() else None
