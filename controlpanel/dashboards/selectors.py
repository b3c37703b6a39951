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

import json
import math
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Aggregate, F, FloatField, Q, QuerySet, Sum
from django.utils import timezone

from controlpanel.billing import selectors as billing
from controlpanel.billing.rules import amount, month_of, next_month
from controlpanel.dashboards.filters import DashboardFilters
from controlpanel.dashboards.models import (
    RollupMark,
    UsageDay,
    WaitDay,
    WaitDayBy,
    WorkloadDay,
    WorkloadSpan,
)
from controlpanel.dashboards.rollups import bucket_percentile, usage_rows
from controlpanel.engine.admission import WAITING_STATES, shares_machine
from controlpanel.engine.models import JobRun, Workload
from controlpanel.engine.registry import kind_of, kinds, states_of
from controlpanel.engine.selectors import with_label
from controlpanel.projects.models import Project

# What the dashboards show of each kind (registry.py): its failures, the kinds whose ends are
# judged (success rate, ends by state), and those whose running rows stop when idle.
FAILED_STATES = states_of(lambda kind: kind.failures)
JUDGED = [kind.name for kind in kinds() if kind.judged_by_ends]
PLURALS = {kind.name: kind.plural for kind in kinds()} | {"": "deleted"}
ENDED = (
    "ended_done",
    "ended_failed",
    "ended_error",
    "ended_sync_failed",
    "ended_interrupted",
    "ended_stopped",
)
SUMS = ("gpu_seconds", "price_minutes", *ENDED)
TABLE_ROWS = 20


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
    ids = _filter_ids(f)
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
    from django.db.models.functions import Extract

    return Extract(F("admitted_at") - F("queued_at"), "epoch")


def waits_by_day(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    """p50 and p95 of the queue wait per day of admission."""
    rows = queue_waits(scope, f)
    if connection.vendor == "postgresql":
        from django.db.models.functions import TruncDate

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


def waiting_now(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    """What waits for admission now, oldest first, with its place in its queue (the project's,
    or every project's on one machine) and why."""
    shown = list(
        workloads(scope, f)
        .filter(state__in=WAITING_STATES, admitted_at=None)
        .select_related("project", "owner", "flavor")
        .only(*TABLE_ONLY, "state_reason", "queued_at")
        .order_by("queued_at")[: TABLE_ROWS * 5]
    )
    if not shown:
        return []
    queue = Workload.objects.filter(state__in=WAITING_STATES, admitted_at=None)
    one_machine = shares_machine()
    if not one_machine:
        queue = queue.filter(project__in={w.project_id for w in shown})
    order: dict[Any, list[Any]] = defaultdict(list)
    for pk, project_id in queue.order_by("queued_at", "pk").values_list("pk", "project_id"):
        order[None if one_machine else project_id].append(pk)
    places = {pk: n for ids in order.values() for n, pk in enumerate(ids, start=1)}
    now = timezone.now()
    return [
        _row(w)
        | {"position": places.get(w.pk), "waiting_s": (now - w.queued_at).total_seconds()}
        | {"reason": w.state_reason}
        for w in shown
    ]


TABLE_ONLY = (
    "id",
    "name",
    "kind",
    "state",
    "gpu",
    "project__slug",
    "project__name",
    "owner__username",
    "flavor__name",
    "flavor__gpus_per_unit",
)


def _row(w: Workload) -> dict[str, Any]:
    return {
        "id": w.pk,
        "name": w.name,
        "kind": w.kind,
        "state": w.state,
        "project": w.project.slug,
        "owner": w.owner.username,
        "flavor": w.flavor.name,
        "gpus": w.gpu * w.flavor.gpus_per_unit,
    }


def idle_notebooks(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    """Running workloads of the kinds that stop when idle (notebooks), the longest idle first,
    with the time left before the idle stop."""
    now = timezone.now()
    idling = [kind for kind in kinds() if kind.idle_deadline]
    rows = (
        workloads(scope, f)
        .filter(kind__in=[k.name for k in idling], state__in={k.running for k in idling})
        .select_related("project", "owner", "flavor")
        .only(*TABLE_ONLY, "last_activity_at", "project__notebook_idle_minutes")
        .order_by(F("last_activity_at").asc(nulls_last=True))[:TABLE_ROWS]
    )
    result = []
    for nb in rows:
        deadline = kind_of(nb).idle_deadline_of()(nb)  # type: ignore[misc]
        idle = (now - nb.last_activity_at).total_seconds() if nb.last_activity_at else None
        left = max(0.0, (deadline - now).total_seconds()) if deadline else None
        result.append(_row(nb) | {"idle_s": idle, "stops_in_s": left})
    return result


def recent_failures(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    rows = (
        workloads(scope, f)
        .filter(state__in=FAILED_STATES, finished_at__gte=f.start, finished_at__lt=f.end)
        .select_related("project", "owner", "flavor")
        .only(*TABLE_ONLY, "state_reason", "finished_at", "exit_code")
        .order_by("-finished_at")[:TABLE_ROWS]
    )
    return [
        _row(w) | {"finished_at": w.finished_at, "reason": w.state_reason, "exit": w.exit_code}
        for w in rows
    ]


def top_by_cost(scope: Scope, f: DashboardFilters, usage: Usage) -> list[dict[str, Any]]:
    """The workloads that cost the most in the range (their RUNNING minutes in it)."""
    totals = _memory_top(scope, f) if f.label else _span_top(scope, f)
    found_rows = (
        Workload.objects.filter(pk__in=[t[0] for t in totals])
        .select_related("project", "owner", "flavor")
        .only(*TABLE_ONLY)
    )
    by_id = {w.pk: w for w in found_rows}
    return [
        _row(by_id[pk]) | {"cost": amount(Decimal(p)), "gpu_hours": g / 3600}
        for pk, p, g in totals
        if pk in by_id
    ]


def _filter_ids(f: DashboardFilters) -> dict[str, int] | None:
    """The user and flavor filters as ids, to filter the rollups that carry them without a
    join (None: a name nobody has, nothing matches)."""
    ids: dict[str, int | None] = {}
    if f.user:
        from django.contrib.auth import get_user_model

        users = get_user_model().objects.filter(username=f.user)
        ids["owner_id"] = users.values_list("pk", flat=True).first()
    if f.flavor:
        from controlpanel.flavors.models import Flavor

        flavors = Flavor.objects.filter(name=f.flavor)
        ids["flavor_id"] = flavors.values_list("pk", flat=True).first()
    return {k: v for k, v in ids.items() if v is not None} if None not in ids.values() else None


def _span_top(scope: Scope, f: DashboardFilters) -> list[tuple[Any, Decimal, float]]:
    """The costliest workloads of the range: those whose span lies inside it (their totals,
    by the spans' index), merged with those straddling its first or last day (their days in
    the range summed); a workload with no day in the range costs nothing in it."""
    spans = scope.of(WorkloadSpan.objects.all())
    ids = _filter_ids(f)
    if ids is None:
        return []
    spans = spans.filter(**ids)
    inside = spans.filter(first_day__gte=f.first, last_day__lte=f.last).order_by(
        "-price_minutes", "-gpu_seconds", "workload_id"
    )[:TABLE_ROWS]
    found: list[tuple[Any, Decimal, float]] = list(
        inside.values_list("workload_id", "price_minutes", "gpu_seconds")
    )
    straddling = spans.filter(multi_day=True, first_day__lte=f.last, last_day__gte=f.first).filter(
        Q(first_day__lt=f.first) | Q(last_day__gt=f.last)
    )
    in_range = (
        WorkloadDay.objects.filter(
            day__gte=f.first,
            day__lte=f.last,
            # Few (most workloads run within a day): by the days' workload index.
            workload_id__in=list(straddling.values_list("workload_id", flat=True)),
        )
        .values("workload_id")
        .annotate(p=Sum("price_minutes"), g=Sum("gpu_seconds"))
        .order_by()
    )
    found += [(r["workload_id"], r["p"], r["g"]) for r in in_range]
    found.sort(key=lambda t: (-t[1], -t[2], str(t[0])))
    return found[:TABLE_ROWS]


def _memory_top(scope: Scope, f: DashboardFilters) -> list[tuple[Any, Decimal, float]]:
    chosen = workloads(scope, f)
    runs = JobRun.objects.filter(job__in=chosen.values("pk"))
    sums: dict[Any, list[Any]] = defaultdict(lambda: [Decimal(0), 0.0])
    now = timezone.now()
    for day in f.days:
        _, per_workload = usage_rows(day=day, runs=runs, workloads=chosen, now=now)
        for (wid, _), (seconds, money) in per_workload.items():
            sums[wid][0] += money
            sums[wid][1] += seconds
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    import uuid

    return [(uuid.UUID(wid), p, g) for wid, (p, g) in ranked[:TABLE_ROWS]]


def throughput(scope: Scope, f: DashboardFilters) -> list[dict[str, Any]]:
    """Tokens per second of the latest fine-tune runs started in the range."""
    rows = (
        workloads(scope, f)
        .filter(preset="finetune", started_at__gte=f.start, started_at__lt=f.end)
        .select_related("project", "owner", "flavor")
        .only(*TABLE_ONLY, "progress", "started_at")
        .order_by("-started_at")[:TABLE_ROWS]
    )
    result = []
    for w in rows:
        rate = w.progress.get("tokens_per_s") if isinstance(w.progress, dict) else None
        if isinstance(rate, int | float) and math.isfinite(rate):
            result.append(_row(w) | {"tokens_per_s": float(rate), "started_at": w.started_at})
    return result[::-1]


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


def headline(scope: Scope, f: DashboardFilters, usage: Usage) -> dict[str, Any]:
    totals = usage.grouped()
    total = totals[0] if totals else dict.fromkeys(SUMS, 0)
    jobs = usage.grouped(kinds=JUDGED)
    ended = jobs[0] if jobs else dict.fromkeys(SUMS, 0)
    failed = ended["ended_failed"] + ended["ended_error"] + ended["ended_sync_failed"]
    judged = ended["ended_done"] + failed
    live = workloads(scope, f)
    return {
        "gpu_hours": total["gpu_seconds"] / 3600,
        "cost": amount(Decimal(total["price_minutes"])),
        "running": live.filter(state__in=states_of(lambda kind: kind.running)).count(),
        "queued": live.filter(state__in=WAITING_STATES, admitted_at=None).count(),
        "failed": failed,
        "done": ended["ended_done"],
        "success_rate": ended["ended_done"] / judged if judged else None,
        "waits": usage.waits()[0],
        "waits_exact": usage.waits_exact,
    }


def per_day(
    f: DashboardFilters, rows: list[dict[str, Any]], series: str, value: str
) -> dict[str, Any]:
    """A chart's data: labels (days) and one dataset per value of `series`."""
    labels = [d.isoformat() for d in f.days]
    names = sorted({str(r[series] or "—") for r in rows})
    data = {name: [0.0] * len(labels) for name in names}
    index = {d: n for n, d in enumerate(f.days)}
    for r in rows:
        if r["day"] in index:
            data[str(r[series] or "—")][index[r["day"]]] += float(r[value])
    return {"labels": labels, "series": [{"name": n, "data": data[n]} for n in names]}


def charts(scope: Scope, f: DashboardFilters, usage: Usage) -> dict[str, dict[str, Any]]:
    """Every chart's data (the same numbers fill the table beside it)."""
    gpu = per_day(f, usage.grouped("day", "owner"), "owner", "gpu_seconds")
    for s in gpu["series"]:
        s["data"] = [round(v / 3600, 3) for v in s["data"]]
    cost = per_day(f, usage.grouped("day", "kind"), "kind", "price_minutes")
    for s in cost["series"]:
        s["data"] = [float(amount(Decimal(str(v)))) for v in s["data"]]
        s["name"] = PLURALS.get(s["name"], s["name"] + "s")
    ends = usage.grouped("day", kinds=JUDGED)
    states = {"DONE": "ended_done", "FAILED": "ended_failed", "ERROR": "ended_error"}
    states |= {"SYNC_FAILED": "ended_sync_failed", "INTERRUPTED": "ended_interrupted"}
    index = {d: n for n, d in enumerate(f.days)}
    final: dict[str, Any] = {"labels": [d.isoformat() for d in f.days], "series": []}
    for state, column in states.items():
        data = [0] * len(f.days)
        for r in ends:
            data[index[r["day"]]] += int(r[column])
        final["series"].append({"name": state, "data": data})
    waits = usage.waits()[1]
    wait_chart: dict[str, Any] = {"labels": [d.isoformat() for d in f.days], "series": []}
    for name in ("p50", "p95"):
        data_w: list[float | None] = [None] * len(f.days)
        for r in waits:
            if r["day"] in index:
                data_w[index[r["day"]]] = round(r[name] / 60, 2) if r[name] is not None else None
        wait_chart["series"].append({"name": f"{name} (min)", "data": data_w})
    runs = throughput(scope, f)
    tokens = {
        "labels": [f"{r['name']} ({str(r['id'])[:8]})" for r in runs],
        "series": [{"name": "tokens/s", "data": [round(r["tokens_per_s"], 1) for r in runs]}],
    }
    result = {
        "gpu-hours": gpu | {"title": "GPU-hours per day by user", "unit": "GPU-hours"},
        "cost": cost | {"title": f"Cost per day by kind ({settings.CURRENCY})", "unit": "cost"},
        "final-states": final | {"title": "Jobs by final state per day", "unit": "jobs"},
        "queue-wait": wait_chart
        | {
            "title": "Queue wait per day" + ("" if usage.waits_exact else " (±2.5 %)"),
            "unit": "minutes",
        },
        "throughput": tokens
        | {"title": "Fine-tune throughput of recent runs", "unit": "tokens/s", "kind": "bar"},
    }
    for chart in result.values():
        # For the canvas's data attribute (htmx drops <script> elements from swapped content).
        chart["json"] = json.dumps(
            {"labels": chart["labels"], "series": chart["series"], "unit": chart["unit"]}
        )
        columns = [s["data"] for s in chart["series"]]
        chart["rows"] = [
            [label, [column[n] for column in columns]] for n, label in enumerate(chart["labels"])
        ]
    return result


def rolled_up_at(f: DashboardFilters) -> datetime | None:
    """When the range's latest day was last rolled up (None: never)."""
    mark = RollupMark.objects.filter(day=f.last).first()
    return mark.rebuilt_at if mark else None


def filter_choices(scope: Scope) -> dict[str, list[str]]:
    from controlpanel.flavors.models import Flavor

    if scope.project is not None:
        users = list(scope.project.members.order_by("username").values_list("username", flat=True))
    else:
        from django.contrib.auth import get_user_model

        users = list(
            get_user_model()
            .objects.filter(Q(memberships__isnull=False) | Q(is_staff=True))
            .distinct()
            .order_by("username")
            .values_list("username", flat=True)[:500]
        )
    flavors = list(Flavor.objects.order_by("sort_order", "name").values_list("name", flat=True))
    return {"users": users, "flavors": flavors}
