"""Idle GPUs in money, as the dashboards show it (rows the reclaim tasks price hour by hour:
controlpanel/reclaim/money.py). Two words, never one bucket:

- "allocated but idle": GPUs a workload held (billed minutes) while they sat below its
  project's threshold; money its project paid for GPUs that did nothing. Per project and per
  person, for managers and site admins.
- "unallocated": GPUs the cluster has that no workload held; nobody's bill, capacity the site
  paid for anyway. GPU-hours by model, for site admins, valued at the list price of the
  cheapest flavor of that model where one has a price."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Max, Sum

from controlpanel.dashboards.filters import DashboardFilters
from controlpanel.dashboards.selectors import Scope
from controlpanel.flavors.models import Flavor
from controlpanel.reclaim.models import IdleCost, IdleHour, UnheldGpus
from deploy.local.gpus import gpu_matches

HOUR_MINUTES = Decimal(60)


@dataclass
class IdleMoney:
    """What the idle money page shows: the allocated-but-idle total, by project and by person
    (rows of {project, person, gpu_hours, cost}), the unallocated GPU-hours by model (site
    admins), up to when hours were priced, and why there is nothing ("" when priced)."""

    cost: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    currency: str = ""
    projects: list[dict[str, Any]] = field(default_factory=list)
    people: list[dict[str, Any]] = field(default_factory=list)
    unallocated: list[dict[str, Any]] = field(default_factory=list)
    priced_to: datetime | None = None
    problem: str = ""


def idle_money(scope: Scope, f: DashboardFilters, *, with_unallocated: bool) -> IdleMoney:
    rows = scope.of(IdleCost.objects.filter(hour__gte=f.start, hour__lt=f.end))
    if f.user:
        rows = rows.filter(owner_name=f.user)
    if f.flavor:
        rows = rows.filter(run__flavor__name=f.flavor)
    found = IdleMoney(currency=settings.CURRENCY)
    for row in rows.values("project__slug", "owner_name").annotate(
        gpu_minutes=Sum("gpu_minutes"), cost=Sum("cost")
    ):
        hours = row["gpu_minutes"] / HOUR_MINUTES
        found.people.append(
            {
                "project": row["project__slug"],
                "person": row["owner_name"] or "(deleted account)",
                "gpu_hours": hours,
                "cost": row["cost"],
            }
        )
        found.cost += row["cost"]
        found.gpu_hours += hours
    found.people.sort(key=lambda r: (-r["cost"], r["project"], r["person"]))
    found.projects = _by_project(found.people)
    if with_unallocated:
        found.unallocated = unallocated(f)
    priced = IdleHour.objects.filter(hour__gte=f.start, hour__lt=f.end).aggregate(Max("hour"))
    found.priced_to = priced["hour__max"]
    if not settings.DCGM_PROMETHEUS_URL:
        found.problem = "no DCGM source configured (DCGM_PROMETHEUS_URL): nothing is priced"
    elif found.priced_to is None:
        found.problem = "no hour of this range was priced yet (the reclaim task prices hourly)"
    return found


def _by_project(people: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sums: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"gpu_hours": Decimal(0), "cost": Decimal(0)}
    )
    for row in people:
        sums[row["project"]]["gpu_hours"] += row["gpu_hours"]
        sums[row["project"]]["cost"] += row["cost"]
    shown = [{"project": slug} | values for slug, values in sums.items()]
    return sorted(shown, key=lambda r: (-r["cost"], r["project"]))


def unallocated(f: DashboardFilters) -> list[dict[str, Any]]:
    """GPU-hours no workload held, by GPU model, and their worth at list price."""
    rows = UnheldGpus.objects.filter(hour__gte=f.start, hour__lt=f.end)
    sums = rows.values("gpu_model").annotate(minutes=Sum("gpu_minutes")).order_by("gpu_model")
    prices = _gpu_hour_prices()
    found = []
    for row in sums:
        hours = Decimal(row["minutes"]) / HOUR_MINUTES
        price = _price_of(row["gpu_model"], prices)
        found.append(
            {
                "gpu_model": row["gpu_model"],
                "gpu_hours": hours,
                "price_per_gpu_hour": price,
                "value": hours * price if price is not None else None,
            }
        )
    return found


def _gpu_hour_prices() -> list[tuple[Any, Decimal]]:
    """(flavor spec, price of one GPU-hour) for every GPU flavor with a price now."""
    found = []
    for flavor in Flavor.objects.exclude(gpu_model="").prefetch_related("prices"):
        price = flavor.current_price
        if price is None:
            continue
        found.append((flavor.to_spec(), Decimal(price) / max(1, flavor.gpus_per_unit)))
    return found


def _price_of(model: str, prices: list[tuple[Any, Decimal]]) -> Decimal | None:
    matching = [price for spec, price in prices if gpu_matches(spec, model)]
    return min(matching) if matching else None
