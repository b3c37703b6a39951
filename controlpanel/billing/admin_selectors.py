"""Reads of the ledger for the admins' billing pages: a project's drill-down (users →
workloads → runs → a run's lines), invoice totals and price history; the month's table of
projects is billing/admin_months.py (its names are re-exported here for the views).

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

import uuid
from collections.abc import Iterable, Iterator
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Min, Q, QuerySet, Sum

from controlpanel.billing.admin_months import FIRST_YEAR as FIRST_YEAR
from controlpanel.billing.admin_months import LAST_YEAR as LAST_YEAR
from controlpanel.billing.admin_months import MONTH_SUMS, RUN_SUMS, SUMS, usage_of
from controlpanel.billing.admin_months import month_parse as month_parse
from controlpanel.billing.admin_months import month_projects as month_projects
from controlpanel.billing.admin_months import month_usage as month_usage
from controlpanel.billing.admin_months import previous_month as previous_month
from controlpanel.billing.models import Line, Period, WorkloadMonth
from controlpanel.billing.rules import CENT
from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import FlavorPrice
from controlpanel.projects.models import Project


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
