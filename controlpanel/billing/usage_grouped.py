"""Usage broken down by day or month, project, user, workload and flavor (the usage page,
`/api/v1/usage/`, `ajuste usage`): the ledger's lines cut by day or summed by month, plus what
open runs have run since their last recording (`usage.pending`), and the dates they are asked
for in.

Where a usage minute counts: on the UTC day (and month) its start lies in. An adjustment line
(a locked month's minutes corrected later) has no minutes of its own to place: it counts on
the first day of the month it is billed in, like the invoice that carries it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from controlpanel.billing.models import Line
from controlpanel.billing.rules import (
    MINUTE,
    amount,
    minutes_until,
    month_of,
    month_start,
    next_month,
)
from controlpanel.billing.selectors import PRICE_MINUTES
from controlpanel.billing.usage import DAY, open_runs, pending
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project


@dataclass(frozen=True)
class UsageQuery:
    """What usage to read: the projects (None: all), optional user, workload and flavor, the
    days `start` .. `end` (inclusive, UTC), grouped by "day" or "month"."""

    start: date
    end: date
    group: str = "month"
    projects: frozenset[int] | None = None
    user_id: int | None = None
    workload_id: uuid.UUID | None = None
    flavor_id: int | None = None

    @property
    def months(self) -> list[date]:
        months, month = [], month_of(datetime(*self.start.timetuple()[:3], tzinfo=UTC))
        while month <= self.end:
            months.append(month)
            month = next_month(month)
        return months

    @property
    def whole_months(self) -> bool:
        return self.start.day == 1 and (self.end + DAY).day == 1

    def bucket(self, day: date) -> date:
        return day if self.group == "day" else day.replace(day=1)


# (bucket, project slug, username, workload id, workload name, kind, flavor name)
Key = tuple[date, str, str | None, str | None, str, str, str]


@dataclass
class Row:
    """One group of usage: its minutes, unit- and GPU-minutes and Σ minutes × units × price."""

    key: Key
    minutes: int = 0
    unit_minutes: int = 0
    gpu_minutes: int = 0
    price_minutes: Decimal = Decimal(0)
    estimated: bool = False
    runs: set[int] = field(default_factory=set)

    def add(self, minutes: int, units: int, gpus_per_unit: int, price: Decimal) -> None:
        self.minutes += minutes
        self.unit_minutes += minutes * units
        self.gpu_minutes += minutes * units * gpus_per_unit
        self.price_minutes += minutes * units * price

    @property
    def amount(self) -> Decimal:
        return amount(self.price_minutes)

    @property
    def gpu_hours(self) -> Decimal:
        return (Decimal(self.gpu_minutes) / 60).quantize(Decimal("0.01"), ROUND_HALF_UP)

    def as_dict(self, group: str) -> dict[str, Any]:
        bucket, project, user, workload, name, kind, flavor = self.key
        return {
            "period": bucket.isoformat() if group == "day" else f"{bucket:%Y-%m}",
            "project": project,
            "user": user,
            "workload": workload,
            "workload_name": name,
            "kind": kind,
            "flavor": flavor,
            "minutes": self.minutes,
            "unit_minutes": self.unit_minutes,
            "gpu_hours": self.gpu_hours,
            "amount": self.amount,
            "currency": settings.CURRENCY,
            "estimated": self.estimated,
        }


# A deleted workload's runs name it, and who ran it, from what the deletion kept (KeptRun).
KEPT = {
    "who": Coalesce("run__job__owner__username", "run__kept__owner__username"),
    "workload": Coalesce("run__job_id", "run__kept__workload"),
    "what": Coalesce("run__job__name", "run__kept__name"),
    "sort": Coalesce("run__job__kind", "run__kept__kind"),
}
DIMENSIONS = ("project__slug", "who", "workload", "what", "sort", "flavor__name")


def _owned_by(user_id: int, prefix: str = "run__") -> Q:
    return Q(**{f"{prefix}job__owner_id": user_id}) | Q(**{f"{prefix}kept__owner_id": user_id})


def _of_workload(workload_id: Any, prefix: str = "run__") -> Q:
    return Q(**{f"{prefix}job_id": workload_id}) | Q(**{f"{prefix}kept__workload": workload_id})


def _lines(query: UsageQuery) -> QuerySet[Line]:
    lines = Line.objects.filter(period__gte=query.months[0], period__lte=query.months[-1])
    if query.projects is not None:
        lines = lines.filter(project_id__in=query.projects)
    if query.user_id is not None:
        lines = lines.filter(_owned_by(query.user_id))
    if query.workload_id is not None:
        lines = lines.filter(_of_workload(query.workload_id))
    if query.flavor_id is not None:
        lines = lines.filter(flavor_id=query.flavor_id)
    return lines.annotate(**KEPT).order_by()


def _key(bucket: date, values: Any) -> Key:
    slug, user, workload, name, kind, flavor = values
    return (bucket, slug, user, str(workload) if workload else None, name or "", kind or "", flavor)


def usage_rows(query: UsageQuery, now: datetime | None = None) -> list[Row]:
    """Usage grouped by (period, project, user, workload, flavor), billed up to now, in order."""
    now = now or timezone.now()
    rows: dict[Key, Row] = {}
    if query.group == "month" and query.whole_months:
        _month_sums(query, rows)
    else:
        _day_split(query, rows)
    _pending_rows(query, rows, now)
    return sorted(rows.values(), key=lambda row: tuple("" if v is None else v for v in row.key))


def _row(rows: dict[Key, Row], key: Key) -> Row:
    found = rows.get(key)
    if found is None:
        found = rows[key] = Row(key)
    return found


def _month_sums(query: UsageQuery, rows: dict[Key, Row]) -> None:
    """Whole months by month: PostgreSQL adds them up."""
    sums = (
        _lines(query)
        .values("period", *DIMENSIONS)
        .annotate(
            m=Sum("minutes"),
            um=Sum(F("minutes") * F("units")),
            gm=Sum(F("minutes") * F("units") * F("flavor__gpus_per_unit")),
            p=PRICE_MINUTES,
            est=Count("run", filter=Q(run__sighting__estimated=True)),
        )
    )
    for item in sums:
        row = _row(rows, _key(item["period"], [item[d] for d in DIMENSIONS]))
        row.minutes += item["m"]
        row.unit_minutes += item["um"]
        row.gpu_minutes += item["gm"]
        row.price_minutes += Decimal(item["p"])
        row.estimated = row.estimated or item["est"] > 0


def _day_split(query: UsageQuery, rows: dict[Key, Row]) -> None:
    """Each line cut at UTC midnights (its minutes are contiguous from `first_minute`)."""
    items = _lines(query).values_list(
        "period",
        "of_period",
        "run_start",
        "first_minute",
        "minutes",
        "units",
        "price_per_hour",
        "flavor__gpus_per_unit",
        "run__sighting__estimated",
        *DIMENSIONS,
    )
    for period, of_period, start, first, minutes, units, price, gpus, est, *dims in items:
        if period != of_period:  # an adjustment: on the first day of the month billed in
            pieces: Iterable[tuple[date, int]] = [(period, minutes)]
        else:
            pieces = days_of(start, first, minutes)
        for day, count in pieces:
            if query.start <= day <= query.end:
                row = _row(rows, _key(query.bucket(day), dims))
                row.add(count, units, gpus, price)
                row.estimated = row.estimated or bool(est)


def days_of(start: datetime, first: int, minutes: int) -> Iterator[tuple[date, int]]:
    """Minutes `first` .. `first + minutes - 1` of a run started at `start`, by the UTC day
    each one's start lies in."""
    k, end = first, first + minutes
    while k < end:
        moment = (start + k * MINUTE).astimezone(UTC)
        day = moment.date()
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) + DAY
        upto = min(end, minutes_until(start, midnight))
        yield day, upto - k
        k = upto


def _pending_rows(query: UsageQuery, rows: dict[Key, Row], now: datetime) -> None:
    runs = open_runs().select_related("project", "job__owner", "kept__owner", "sighting")
    if query.projects is not None:
        runs = runs.filter(project_id__in=query.projects)
    if query.user_id is not None:
        runs = runs.filter(_owned_by(query.user_id, ""))
    if query.workload_id is not None:
        runs = runs.filter(_of_workload(query.workload_id, ""))
    if query.flavor_id is not None:
        runs = runs.filter(flavor_id=query.flavor_id)
    for run in runs:
        assert run.started_at is not None
        dims = (run.project.slug, *_named(run), run.flavor.name)
        for seg in pending(run, run.flavor.prices.all(), now):
            price = seg.price.price_per_hour if seg.price else Decimal(0)
            for day, count in days_of(run.started_at, seg.first, seg.minutes):
                if query.start <= day <= query.end:
                    row = _row(rows, _key(query.bucket(day), dims))
                    row.add(count, run.units, run.flavor.gpus_per_unit, price)


def _named(run: JobRun) -> tuple[str | None, Any, str, str]:
    """Who ran the run, its workload's id, name and kind: kept by the deletion if it is gone."""
    if run.job is not None:
        job = run.job
        return job.owner.username if job.owner else None, job.pk, job.name, job.kind
    kept = getattr(run, "kept", None)
    if kept is None:
        return None, None, "", ""
    return kept.owner.username if kept.owner else None, kept.workload, kept.name, kept.kind


def rollup(rows: Iterable[Row], by: str) -> list[Row]:
    """Rows added up by one dimension: "user", "workload", "flavor" (or "total"), the
    biggest amount first."""
    index = {"user": (2,), "workload": (3, 4, 5), "flavor": (6,), "total": ()}[by]
    sums: dict[Any, Row] = {}
    for row in rows:
        key = tuple(row.key[i] for i in index)
        into = sums.get(key)
        if into is None:
            into = sums[key] = Row(row.key)
        into.minutes += row.minutes
        into.unit_minutes += row.unit_minutes
        into.gpu_minutes += row.gpu_minutes
        into.price_minutes += row.price_minutes
        into.estimated = into.estimated or row.estimated
    return sorted(sums.values(), key=lambda row: (-row.price_minutes, str(row.key)))


def total_of(rows: Iterable[Row]) -> Row:
    """Every row added up (money rounded once, at the end)."""
    found = rollup(rows, "total")
    return found[0] if found else Row((date.min, "", None, None, "", "", ""))


def flavor_named(name: str) -> Flavor | None:
    return Flavor.objects.filter(name=name).first()


def usage_months(*, project: Project) -> list[date]:
    """The months the project has lines in, newest first (for the month selector)."""
    months = set(Line.objects.filter(project=project).values_list("period", flat=True).distinct())
    return sorted(months, reverse=True)


FIRST_YEAR, LAST_YEAR = 1970, 9998  # a month before and after each stays a date


def parse_month(text: str) -> date:
    """`YYYY-MM` → the month's first day; ValueError saying what is wrong."""
    try:
        parsed = datetime.strptime(text.strip(), "%Y-%m")
    except ValueError:
        raise ValueError(f"{text!r} is not a month: write it YYYY-MM, e.g. 2025-02.") from None
    if not FIRST_YEAR <= parsed.year <= LAST_YEAR:
        raise ValueError(f"{text!r} is out of range: years {FIRST_YEAR} to {LAST_YEAR}.")
    return date(parsed.year, parsed.month, 1)


def parse_day(text: str, *, last: bool = False) -> date:
    """`YYYY-MM-DD`, or `YYYY-MM` (its first day, or with `last` its last day)."""
    text = text.strip()
    if len(text) == 7:
        month = parse_month(text)
        return month_start(next_month(month)).date() - DAY if last else month
    try:
        day = datetime.strptime(text, "%Y-%m-%d").date()
    except ValueError:
        raise ValueError(
            f"{text!r} is not a day: write it YYYY-MM-DD (or YYYY-MM for a whole month)."
        ) from None
    if not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise ValueError(f"{text!r} is out of range: years {FIRST_YEAR} to {LAST_YEAR}.")
    return day
