"""Reads of the ledger for the admins' billing pages: the month's table of projects, a
project's drill-down (users → workloads → runs → a run's lines) and price history.

Everything is summed in PostgreSQL (a month of 10 million minutes is some 10^5 lines), and
long lists are querysets the views paginate. The drill-down's users and workloads read each
workload's month (billing/rollup.py: a row per workload and flavor, always equal to its lines)
instead of every line of the project's month; its runs read the lines in start order.
Money follows `selectors.invoice_lines`: an
invoice line (flavor, price, units, month adjusted) is rounded to the cent once, and a
project's amount is the sum of its invoice lines, so the month's table, the invoice and their
CSVs say the same figure. Rows of the drill-down are rounded once per row.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Case, Count, F, Min, Q, QuerySet, Sum, When

from controlpanel.billing.models import Line, Period, WorkloadMonth
from controlpanel.billing.rules import CENT, amount
from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")
FIRST_YEAR, LAST_YEAR = 2000, 2999

# Σ over lines; GPU-minutes: minutes × units × GPUs per unit; CPU-minutes: minutes × units ×
# vCPUs per unit of flavors without a GPU (their vCPUs are what is sold).
SUMS: dict[str, Any] = {
    "m": Sum("minutes"),
    "um": Sum(F("minutes") * F("units")),
    "gm": Sum(F("minutes") * F("units") * F("flavor__gpus_per_unit")),
    "cm": Sum(
        Case(
            When(
                flavor__gpus_per_unit=0,
                then=F("minutes") * F("units") * F("flavor__vcpu_per_unit"),
            ),
            default=0,
        )
    ),
    "p": Sum(F("minutes") * F("units") * F("price_per_hour")),
    "adj": Count("pk", filter=~Q(period=F("of_period"))),
}
# A run's row shows its minutes, money and adjustments (its GPU- and CPU-minutes are not).
RUN_SUMS = {name: SUMS[name] for name in ("m", "um", "p", "adj")}
# The same sums over the rollup's rows (billing/rollup.py), which hold them per flavor.
MONTH_SUMS: dict[str, Any] = {
    "m": Sum("minutes"),
    "um": Sum("unit_minutes"),
    "gm": Sum(F("unit_minutes") * F("flavor__gpus_per_unit")),
    "cm": Sum(
        Case(
            When(flavor__gpus_per_unit=0, then=F("unit_minutes") * F("flavor__vcpu_per_unit")),
            default=0,
        )
    ),
    "p": Sum("price_minutes"),
    "adj": Sum("adjustments"),
}


def month_parse(text: str) -> date:
    """'YYYY-MM' → the month's first day; ValueError saying what is wrong."""
    found = MONTH_RE.match(text)
    if not found:
        raise ValueError(f"{text[:20]!r} is not a month: write it as YYYY-MM, e.g. 2025-01.")
    year, month = int(found[1]), int(found[2])
    if not 1 <= month <= 12:
        raise ValueError(f"{text!r}: the month must be 01 to 12.")
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ValueError(f"{text!r}: the year must be {FIRST_YEAR} to {LAST_YEAR}.")
    return date(year, month, 1)


def previous_month(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def hours(minutes: int) -> Decimal:
    return (Decimal(minutes) / 60).quantize(CENT, ROUND_HALF_UP)


@dataclass
class Usage:
    """Sums of some lines. `amount` is set by whoever knows how it is rounded."""

    minutes: int = 0
    unit_minutes: int = 0
    gpu_minutes: int = 0
    cpu_minutes: int = 0
    price_minutes: Decimal = Decimal(0)
    adjustments: int = 0
    amount: Decimal = Decimal("0.00")

    def add(self, row: dict[str, Any]) -> None:
        self.minutes += row["m"] or 0
        self.unit_minutes += row["um"] or 0
        self.gpu_minutes += row.get("gm") or 0
        self.cpu_minutes += row.get("cm") or 0
        self.price_minutes += Decimal(row["p"] or 0)
        self.adjustments += row["adj"] or 0

    @property
    def gpu_hours(self) -> Decimal:
        return hours(self.gpu_minutes)

    @property
    def cpu_hours(self) -> Decimal:
        return hours(self.cpu_minutes)


def usage_of(row: dict[str, Any]) -> Usage:
    """One aggregated row (SUMS) as usage, rounded once."""
    usage = Usage()
    usage.add(row)
    usage.amount = amount(usage.price_minutes)
    return usage


@dataclass
class ProjectMonth:
    """One row of the month's table."""

    project: Project
    usage: Usage = field(default_factory=Usage)
    previous: Decimal = Decimal("0.00")

    @property
    def change(self) -> Decimal:
        return self.usage.amount - self.previous

    @property
    def change_percent(self) -> Decimal | None:
        if not self.previous:
            return None
        return (self.change * 100 / self.previous).quantize(Decimal("0.1"), ROUND_HALF_UP)


def _invoiced(month: date) -> dict[int, Usage]:
    """Each project's usage billed in `month`, its amount the sum of its invoice lines. The
    lines alone are read, and only integers are summed: the price and the flavor are keys of
    each group, so its money is Σ minutes × units times the price, exactly."""
    groups: Any = (
        Line.objects.filter(period=month)
        .values("project_id", "flavor_id", "price_per_hour", "units", "of_period")
        .annotate(m=Sum("minutes"), lines=Count("pk"))
        .order_by()
    )
    flavors = {f.pk: f for f in Flavor.objects.only("gpus_per_unit", "vcpu_per_unit")}
    usage: dict[int, Usage] = {}
    for row in groups:
        flavor, unit_minutes = flavors[row["flavor_id"]], row["m"] * row["units"]
        row["um"], row["p"] = unit_minutes, unit_minutes * row["price_per_hour"]
        row["gm"] = unit_minutes * flavor.gpus_per_unit
        row["cm"] = 0 if flavor.gpus_per_unit else unit_minutes * flavor.vcpu_per_unit
        row["adj"] = row["lines"] if row["of_period"] != month else 0
        project = usage.setdefault(row["project_id"], Usage())
        project.add(row)
        project.amount += amount(Decimal(row["p"]))
    return usage


def month_projects(*, month: date) -> list[ProjectMonth]:
    """Every project billed in `month` or the month before, by amount (largest first)."""
    now, before = _invoiced(month), _invoiced(previous_month(month))
    projects = Project.objects.in_bulk(set(now) | set(before))
    rows = [
        ProjectMonth(
            project=project,
            usage=now.get(pk, Usage()),
            previous=before[pk].amount if pk in before else Decimal("0.00"),
        )
        for pk, project in projects.items()
    ]
    rows.sort(key=lambda row: (-row.usage.amount, row.project.slug))
    return rows


def month_usage(rows: Iterable[ProjectMonth]) -> Usage:
    """The month's total: the sum of its projects' rows."""
    total = Usage()
    for row in rows:
        for name in ("minutes", "unit_minutes", "gpu_minutes", "cpu_minutes", "adjustments"):
            setattr(total, name, getattr(total, name) + getattr(row.usage, name))
        total.price_minutes += row.usage.price_minutes
        total.amount += row.usage.amount
    return total


def project_lines(*, month: date, project: Project) -> QuerySet[Line]:
    """The project's lines billed in `month`."""
    return Line.objects.filter(period=month, project=project)


def project_months(
    *, month: date, project: Project, workload: str | None = None
) -> QuerySet[WorkloadMonth]:
    """The project's workloads' months (billing/rollup.py: a row per workload and flavor,
    equal to the lines summed), or one workload's."""
    rows = WorkloadMonth.objects.filter(period=month, project=project)
    if workload:
        rows = rows.filter(workload_id=uuid.UUID(workload))
    return rows


def deleted_lines(*, month: date, project: Project) -> QuerySet[Line]:
    """The project's lines of `month` whose workload was deleted (their runs lost it)."""
    return project_lines(month=month, project=project).filter(run__job__isnull=True)


def project_users(*, month: date, project: Project) -> list[dict[str, Any]]:
    """The project's month by user: a live workload's owner, or the owner its deletion kept
    (KeptRun), its lines added to that person's row. Only deletions from before KeptRun
    (none kept) stay a row of no one."""
    live: Any = (
        project_months(month=month, project=project)
        .filter(workload__isnull=False)
        .values(user=F("workload__owner__username"))
        .annotate(**MONTH_SUMS, workloads=Count("workload", distinct=True), runs=Sum("runs"))
    )
    gone: Any = (
        deleted_lines(month=month, project=project)
        .values(user=F("run__kept__owner__username"))
        .annotate(
            **SUMS,
            workloads=Count("run__kept__workload", distinct=True),
            runs=Count("run", distinct=True),
        )
    )
    users: dict[str | None, dict[str, Any]] = {}
    for row in [*live, *gone]:
        if (had := users.get(row["user"])) is None:
            users[row["user"]] = dict(row)
            continue
        for name in (*MONTH_SUMS, "workloads", "runs"):
            had[name] = (had[name] or 0) + (row[name] or 0)
    rows = [dict(row, usage=usage_of(row)) for row in users.values()]
    rows.sort(key=lambda row: (-row["usage"].price_minutes, row["user"] is None, row["user"] or ""))
    return rows


class Paged:
    """Rows of a drill-down table, cheap to page: the sums and the order come from the
    ledger's lines alone (grouped by run or workload), and the details (names, times) are
    read only for the rows asked for. Paginator slices it; the CSV iterates it in chunks."""

    CHUNK = 2000

    def __init__(
        self, sums: QuerySet[Any, dict[str, Any]], key: str, details: Any, fields: dict[str, str]
    ) -> None:
        self.sums, self.key, self.details, self.fields = sums, key, details, fields

    def count(self) -> int:
        return self.sums.count()

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, which: slice) -> list[dict[str, Any]]:
        rows = list(self.sums[which])
        ids = [row[self.key] for row in rows if row[self.key] is not None]
        found = {
            d["pk"]: {out: d[lookup] for out, lookup in self.fields.items()}
            for d in self.details.filter(pk__in=ids).values("pk", *self.fields.values())
        }
        empty = dict.fromkeys(self.fields)
        return [row | found.get(row[self.key], empty) for row in rows]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        begin = 0
        while chunk := self[begin : begin + self.CHUNK]:
            yield from chunk
            begin += self.CHUNK


def _filtered(
    month: date, project: Project, user: str | None, workload: str | None = None
) -> QuerySet[Line]:
    lines = project_lines(month=month, project=project)
    if user or workload:  # naming the project on the runs too: PostgreSQL then reads just its
        lines = lines.filter(run__project_id=project.pk)  # runs (by index) where it joins them
    if user:  # a deleted workload's runs too, by the owner its deletion kept
        lines = lines.filter(
            Q(run__job__owner__username=user)
            | Q(run__job__isnull=True, run__kept__owner__username=user)
        )
    if workload:  # a deleted workload's runs too, by the id its deletion kept
        key = uuid.UUID(workload)
        lines = lines.filter(Q(run__job_id=key) | Q(run__kept__workload=key))
    return lines


def project_workloads(*, month: date, project: Project, user: str | None = None) -> Paged:
    """The project's month by workload, largest amount first (read from the rollup: a row per
    workload and flavor, not the lines)."""
    rows = project_months(month=month, project=project)
    if user:  # the deleted workloads' row too where one of them was the user's (KeptRun)
        mine = Q(workload__owner__username=user)
        gone = deleted_lines(month=month, project=project)
        if gone.filter(run__kept__owner__username=user).exists():
            mine |= Q(workload__isnull=True)
        rows = rows.filter(mine)
    sums: Any = (
        rows.values("workload")
        .annotate(**MONTH_SUMS, runs=Sum("runs"))
        .order_by(F("p").desc(), "workload")
    )
    fields = {"name": "name", "kind": "kind", "user": "owner__username"}
    return WorkloadsPaged(sums, "workload", Workload.objects.all(), fields, month, project, user)


class WorkloadsPaged(Paged):
    """The workloads' rows, where the rollup's one row of the deleted workloads (None: their
    rows join at deletion) becomes a row per deleted workload, named from what the deletion
    kept (KeptRun: its name, kind and owner), summed from its lines, `deleted` set; under a
    user filter, only those the user owned."""

    def __init__(self, *args: Any) -> None:
        *paged, self.month, self.project, self.user = args
        super().__init__(*paged)

    def __getitem__(self, which: slice) -> list[dict[str, Any]]:
        rows = super().__getitem__(which)
        return [
            part for row in rows for part in (self._deleted() if row[self.key] is None else [row])
        ]

    def _deleted(self) -> list[dict[str, Any]]:
        lines = deleted_lines(month=self.month, project=self.project)
        if self.user:
            lines = lines.filter(run__kept__owner__username=self.user)
        found: Any = (
            lines.values(
                workload=F("run__kept__workload"),
                name=F("run__kept__name"),
                kind=F("run__kept__kind"),
                user=F("run__kept__owner__username"),
            )
            .annotate(**SUMS, runs=Count("run", distinct=True))
            .order_by(F("p").desc(), "name")
        )
        return [dict(row, deleted=True) for row in found]


def project_runs(
    *, month: date, project: Project, user: str | None = None, workload: str | None = None
) -> Paged:
    """The project's month by run (pod run), by start: its end, flavor and units. The lines
    alone are summed (a page's runs from the (period, project, run start) index), the flavor
    and the rest read for the page's rows."""
    sums: Any = (
        _filtered(month, project, user, workload)
        .values(run_pk=F("run_id"))
        .annotate(**RUN_SUMS, start=Min("run_start"))
        .order_by("start", "run_pk")
    )
    fields = {
        "uid": "uid",
        "number": "run",
        "name": "job__name",
        "user": "job__owner__username",
        "kept_name": "kept__name",  # a deleted workload's, kept at its deletion
        "kept_user": "kept__owner__username",
        "started": "started_at",
        "finished": "finished_at",
        "estimated": "sighting__estimated",
        "billed_to": "meter__billed_to",
        "flavor_name": "flavor__name",
        "run_units": "units",
    }
    return Paged(sums, "run_pk", JobRun.objects.all(), fields)


def run_of_month(*, month: date, project: Project, run_id: int) -> JobRun | None:
    """The run, if it belongs to the project and has lines billed in `month`."""
    return (
        JobRun.objects.select_related("job", "job__owner", "flavor", "meter", "sighting")
        .filter(pk=run_id, project=project, billing_lines__period=month)
        .distinct()
        .first()
    )


def run_lines(*, month: date, run: JobRun) -> QuerySet[Line]:
    """The run's lines billed in `month`: its minutes (and adjustments), with their price
    version."""
    return (
        Line.objects.filter(period=month, run=run)
        .select_related("price", "flavor")
        .order_by("of_period", "first_minute", "pk")
    )


def run_other_months(*, month: date, run: JobRun) -> list[date]:
    return sorted(
        set(Line.objects.filter(run=run).exclude(period=month).values_list("period", flat=True))
    )


def invoice_totals(lines: Iterable[dict[str, Any]]) -> dict[str, Decimal]:
    """Subtotal (the lines' amounts), tax at BILLING_TAX_RATE percent, and total."""
    subtotal = sum((line["amount"] for line in lines), Decimal("0.00"))
    rate: Decimal = settings.BILLING_TAX_RATE
    tax = (subtotal * rate / 100).quantize(CENT, ROUND_HALF_UP)
    return {"subtotal": subtotal, "rate": rate, "tax": tax, "total": subtotal + tax}


def price_history() -> QuerySet[FlavorPrice]:
    """Every price version of every flavor, by flavor then newest first."""
    return FlavorPrice.objects.select_related("flavor").order_by(
        "flavor__sort_order", "flavor__name", "-valid_from"
    )


def months_with_lines() -> list[date]:
    """The months the ledger bills in, newest first (the month selector): every month a
    line was written in has a period row (run_record makes it), so the lines are not read."""
    return list(Period.objects.values_list("month", flat=True).order_by("-month"))
