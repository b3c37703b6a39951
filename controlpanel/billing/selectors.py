"""Reads of the ledger for the billing pages, the usage API and the CLI.

Sums are exact: PostgreSQL adds minutes × units × price per hour as numerics, and money is
that sum divided by 60 once and rounded to the cent (`rules.amount`), per invoice line.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import F, QuerySet, Sum
from django.utils import timezone

from controlpanel.billing.models import Line, Meter, Period, PeriodState
from controlpanel.billing.rules import amount, billed_minutes, month_of, segments
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import FlavorPrice
from controlpanel.projects.models import Project

PRICE_MINUTES = Sum(F("minutes") * F("units") * F("price_per_hour"))


@dataclass(frozen=True)
class Total:
    """Minutes and money of some lines: `price_minutes` is Σ minutes × units × price/hour."""

    minutes: int
    unit_minutes: int
    price_minutes: Decimal
    currency: str

    @property
    def amount(self) -> Decimal:
        return amount(self.price_minutes)


def month_lines(*, month: date, project: Project | None = None) -> QuerySet[Line]:
    """Lines billed in `month` (usage and adjustments), of one project or all."""
    lines = Line.objects.filter(period=month)
    return lines.filter(project=project) if project is not None else lines


def month_total(*, month: date, project: Project | None = None) -> Total:
    """What `month` bills (the ledger's closed minutes; open runs up to their last recording)."""
    sums = month_lines(month=month, project=project).aggregate(
        m=Sum("minutes"), um=Sum(F("minutes") * F("units")), p=PRICE_MINUTES
    )
    return Total(
        minutes=sums["m"] or 0,
        unit_minutes=sums["um"] or 0,
        price_minutes=Decimal(sums["p"] or 0),
        currency=settings.CURRENCY,
    )


def month_by_project(*, month: date) -> dict[int, Total]:
    """The admin's month table: each project's total, by project id."""
    rows = (
        month_lines(month=month)
        .values("project_id")
        .annotate(m=Sum("minutes"), um=Sum(F("minutes") * F("units")), p=PRICE_MINUTES)
        .order_by("project_id")
    )
    return {
        row["project_id"]: Total(row["m"], row["um"], Decimal(row["p"]), settings.CURRENCY)
        for row in rows
    }


def invoice_lines(*, month: date, project: Project) -> list[dict[str, object]]:
    """One line per (flavor, price, units, adjusted month): minutes and amount, rounded per
    line; adjustments (minutes of a locked month corrected later) come as lines of their own."""
    rows = (
        month_lines(month=month, project=project)
        .values("flavor__name", "price_per_hour", "units", "of_period")
        .annotate(m=Sum("minutes"), p=PRICE_MINUTES)
        .order_by("of_period", "flavor__name", "price_per_hour", "units")
    )
    return [
        {
            "flavor": row["flavor__name"],
            "price_per_hour": row["price_per_hour"],
            "units": row["units"],
            "minutes": row["m"],
            "adjusts": row["of_period"] if row["of_period"] != month else None,
            "amount": amount(Decimal(row["p"])),
        }
        for row in rows
    ]


def period_state(*, month: date) -> str:
    period = Period.objects.filter(month=month).first()
    return period.state if period else PeriodState.OPEN


def open_runs_since_recorded(
    *, month: date, now: datetime | None = None, project: Project | None = None
) -> Total:
    """What open runs add to `month` between their last recording and now (the pages show
    the ledger plus this: "billed up to now"). Computed, never written: a GET writes nothing."""
    now = now or timezone.now()
    runs = JobRun.objects.filter(finished_at=None).exclude(started_at=None)
    if project is not None:
        runs = runs.filter(project=project)
    meters = {m.pk: m for m in Meter.objects.filter(run__in=runs)}
    prices: dict[int, list[FlavorPrice]] = defaultdict(list)
    for version in FlavorPrice.objects.filter(flavor__in=runs.values("flavor_id")):
        prices[version.flavor_id].append(version)
    unit_minutes, price_minutes, minutes = 0, Decimal(0), 0
    for run in runs:
        assert run.started_at is not None
        versions = prices[run.flavor_id]
        meter = meters.get(run.pk)
        billed = meter.minutes if meter and meter.started_at == run.started_at else 0
        total = billed_minutes(run.started_at, now)
        for seg in segments(run.started_at, total, [(p.valid_from, p) for p in versions]):
            extra = seg.first + seg.minutes - max(seg.first, billed)
            if seg.month == month and extra > 0:
                minutes += extra
                unit_minutes += extra * run.units
                price_minutes += extra * run.units * (seg.price.price_per_hour if seg.price else 0)
    return Total(minutes, unit_minutes, price_minutes, settings.CURRENCY)


def current_month(now: datetime | None = None) -> date:
    return month_of(now or timezone.now())
