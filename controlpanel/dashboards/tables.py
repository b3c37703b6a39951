"""The dashboards' tables: what waits and why, idle notebooks (any kind that stops when idle),
recent failures, the top workloads by cost, fine-tune throughput. Each row is a plain dict
(`_row`), read in a fixed number of queries."""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db.models import F, Q, Sum
from django.utils import timezone

from controlpanel.billing.rules import amount
from controlpanel.dashboards.filters import DashboardFilters
from controlpanel.dashboards.models import (
    WorkloadDay,
    WorkloadSpan,
)
from controlpanel.dashboards.rollups import usage_rows
from controlpanel.dashboards.selectors import Scope, Usage, filter_ids, workloads
from controlpanel.engine.admission import WAITING_STATES, shares_machine
from controlpanel.engine.models import JobRun, Workload
from controlpanel.engine.registry import kind_of, kinds, states_of

# What the dashboards show of each kind (registry.py): its failures, and the kinds whose
# running rows stop when idle.
# What the dashboards show of each kind (registry.py): its failures, the kinds whose ends are
# judged (success rate, ends by state), and those whose running rows stop when idle.
FAILED_STATES = states_of(lambda kind: kind.failures)


TABLE_ROWS = 20


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


def _span_top(scope: Scope, f: DashboardFilters) -> list[tuple[Any, Decimal, float]]:
    """The costliest workloads of the range: those whose span lies inside it (their totals,
    by the spans' index), merged with those straddling its first or last day (their days in
    the range summed); a workload with no day in the range costs nothing in it."""
    spans = scope.of(WorkloadSpan.objects.all())
    ids = filter_ids(f)
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
