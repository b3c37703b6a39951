"""Reads for the teams' side of billing: what a workload has cost so far, a project's spend
this month and its forecast (usage broken down by day, project, user, workload and flavor:
billing/usage_grouped.py).

Everything is the ledger (`Line`) plus what open runs have run since their last recording,
cut by the same rule (`rules.segments`) the next recording will write: "billed up to now".
Computed, never written: a GET writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from controlpanel.billing.models import Line, Meter
from controlpanel.billing.rules import (
    MINUTE,
    Segment,
    amount,
    billed_minutes,
    minutes_until,
    month_of,
    month_start,
    next_month,
    segments,
)
from controlpanel.billing.selectors import PRICE_MINUTES, Total, month_total
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import FlavorPrice
from controlpanel.projects.models import Project

MILLI_CENT = Decimal("0.0001")  # the workload pages show a CPU minute's fractions of a cent
DAY = timedelta(days=1)


# --- what a workload cost so far ------------------------------------------------------------


def runs_with_billing() -> QuerySet[JobRun]:
    """Runs with what their lines bill (`billed_price_minutes`), their meter and sighting and
    their flavor's prices: `run_cost` of each then needs no query (a list prefetches this)."""
    lines = (
        Line.objects.filter(run=OuterRef("pk"))
        .order_by()
        .values("run")
        .annotate(p=PRICE_MINUTES)
        .values("p")
    )
    return (
        JobRun.objects.select_related("meter", "sighting", "flavor")
        .prefetch_related("flavor__prices")
        .annotate(billed_price_minutes=Subquery(lines))
    )


def _meter(run: JobRun) -> Meter | None:
    try:
        return run.meter  # type: ignore[no-any-return]
    except Meter.DoesNotExist:
        return None


def is_estimated(run: JobRun) -> bool:
    """Whether the run's end is an estimate (its pod vanished: closed where last seen)."""
    from controlpanel.billing.models import Sighting

    try:
        return bool(run.sighting.estimated)
    except Sighting.DoesNotExist:
        return False


def _in_sync(meter: Meter | None, run: JobRun) -> bool:
    """The ledger says what the row says (a closed run recorded since its last change)."""
    return (
        meter is not None
        and run.finished_at is not None
        and meter.finished_at == run.finished_at
        and meter.started_at == run.started_at
        and meter.flavor_id == run.flavor_id
        and meter.units == run.units
    )


def pending(run: JobRun, prices: Iterable[FlavorPrice], now: datetime) -> list[Segment[Any]]:
    """The minutes an open run has run since its last recording (all of them when it was
    never recorded), by month and price version: what its next recording adds."""
    assert run.started_at is not None
    meter = _meter(run)
    billed = meter.minutes if meter is not None and meter.started_at == run.started_at else 0
    total = billed_minutes(run.started_at, now)
    found: list[Segment[Any]] = []
    for seg in segments(run.started_at, total, [(p.valid_from, p) for p in prices]):
        first, end = max(seg.first, billed), seg.first + seg.minutes
        if end > first:
            found.append(Segment(seg.month, seg.price, first, end - first))
    return found


def _priced(segs: Iterable[Segment[Any]], units: int) -> Decimal:
    total = Decimal(0)
    for seg in segs:
        total += seg.minutes * units * (seg.price.price_per_hour if seg.price else Decimal(0))
    return total


def run_price_minutes(run: JobRun, now: datetime | None = None) -> Decimal:
    """Σ minutes × units × price/hour of one run so far: its lines, plus what it ran since
    its last recording while open; a run whose row changed since it was recorded (rare: the
    catch-up task is due) counts as its row says."""
    if run.started_at is None:
        return Decimal(0)
    now = now or timezone.now()
    billed = getattr(run, "billed_price_minutes", "unread")
    if billed == "unread":
        billed = Line.objects.filter(run=run).aggregate(p=PRICE_MINUTES)["p"]
    billed = Decimal(billed or 0)
    meter = _meter(run)
    if run.finished_at is not None and _in_sync(meter, run):
        return billed
    prices = list(run.flavor.prices.all())
    if run.finished_at is None and meter is not None and meter.started_at == run.started_at:
        return billed + _priced(pending(run, prices, now), run.units)
    whole = segments(
        run.started_at,
        billed_minutes(run.started_at, run.finished_at or now),
        [(p.valid_from, p) for p in prices],
    )
    return _priced(whole, run.units)


@dataclass(frozen=True)
class Cost:
    """A workload's cost so far (some of its runs), and whether an end in it is estimated."""

    price_minutes: Decimal
    estimated: bool

    @property
    def amount(self) -> Decimal:
        return (self.price_minutes / 60).quantize(MILLI_CENT, ROUND_HALF_UP)


def runs_cost(runs: Iterable[JobRun], now: datetime | None = None) -> Cost | None:
    """What these runs cost so far (None when none started)."""
    now = now or timezone.now()
    started = [run for run in runs if run.started_at is not None]
    if not started:
        return None
    return Cost(
        price_minutes=sum((run_price_minutes(run, now) for run in started), Decimal(0)),
        estimated=any(is_estimated(run) for run in started),
    )


# --- a project's month ------------------------------------------------------------------------


def open_runs(project: Project | None = None) -> QuerySet[JobRun]:
    runs = JobRun.objects.filter(finished_at=None).exclude(started_at=None)
    runs = runs.filter(project=project) if project is not None else runs
    return runs.select_related("meter", "flavor").prefetch_related("flavor__prices")


def month_spend(*, project: Project, month: date, now: datetime | None = None) -> Total:
    """What `month` bills the project so far: its ledger, plus what open runs have run in it
    since their last recording."""
    now = now or timezone.now()
    ledger = month_total(month=month, project=project)
    minutes, unit_minutes, price_minutes = 0, 0, Decimal(0)
    for run in open_runs(project):
        for seg in pending(run, run.flavor.prices.all(), now):
            if seg.month == month:
                minutes += seg.minutes
                unit_minutes += seg.minutes * run.units
                price_minutes += _priced([seg], run.units)
    return Total(
        minutes=ledger.minutes + minutes,
        unit_minutes=ledger.unit_minutes + unit_minutes,
        price_minutes=ledger.price_minutes + price_minutes,
        currency=ledger.currency,
    )


@dataclass(frozen=True)
class Forecast:
    """The month-end forecast: the spend so far, plus what the runs open now add if they run
    to the end of the month (each started minute, at the price version in effect for it)."""

    spent: Total
    rest_price_minutes: Decimal
    rate_price_minutes_per_hour: Decimal  # the running rate now: Σ units × price/hour
    month_end: datetime
    now: datetime

    @property
    def amount(self) -> Decimal:
        return amount(self.spent.price_minutes + self.rest_price_minutes)

    @property
    def rate_per_hour(self) -> Decimal:
        return self.rate_price_minutes_per_hour.quantize(Decimal("0.01"), ROUND_HALF_UP)

    @property
    def hours_left(self) -> Decimal:
        return (Decimal((self.month_end - self.now) // MINUTE) / 60).quantize(Decimal("0.1"))


def month_forecast(*, project: Project, now: datetime | None = None) -> Forecast:
    now = now or timezone.now()
    month = month_of(now)
    end = month_start(next_month(month))
    spent = month_spend(project=project, month=month, now=now)
    rest, rate = Decimal(0), Decimal(0)
    for run in open_runs(project):
        assert run.started_at is not None
        prices = list(run.flavor.prices.all())
        done = billed_minutes(run.started_at, now)
        later = minutes_until(run.started_at, end)
        for seg in segments(run.started_at, max(done, later), [(p.valid_from, p) for p in prices]):
            first, last = max(seg.first, done), seg.first + seg.minutes
            if last > first and seg.month == month:
                rest += _priced([Segment(seg.month, seg.price, first, last - first)], run.units)
        in_effect = [p for p in prices if p.valid_from <= now]
        if in_effect:
            rate += max(in_effect, key=lambda p: p.valid_from).price_per_hour * run.units
    return Forecast(spent, rest, rate, end, now)
